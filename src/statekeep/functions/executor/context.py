"""The ``context`` a function receives, shaped like Pulsar's Python ``Context``.

During a micro-batch a partition's state is a :class:`BufferedState`: reads are served from one
bulk prefetch (a miss fetches that key once), writes are buffered, and the runtime applies them
all in one atomic write at the end of the batch. A function therefore never waits on the store
per record, and a batch that fails half-way has written nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.functions.executor.record import RecordMethods, RecordSource
from statekeep.functions.executor.statemethods import StateMethods
from statekeep.functions.windowing.timecontext import TimeMethods
from statekeep.state.buffer import BufferedState
from statekeep.state.transaction import KeyedTransaction
from statekeep.validate import check_int
class Context(RecordMethods, StateMethods, TimeMethods):
    """What ``process(input, context)`` may use. Names and semantics follow Pulsar's Python Context
    (``pulsar.functions.context.Context``); every method of it exists here.

    Per record: ``get_message_id`` (a Kafka message's ``"TOPIC:PARTITION:OFFSET"``, TOPIC its input's
    name; else ``"BATCH:PARTITION:POSITION"``, the same on a replay of the batch),
    ``get_message_key``/``get_partition_key``/``get_ordering_key`` (the key field's value, None without one),
    ``get_message_eventtime`` (ms: the record's ``userConfig.eventTimeField`` field if configured, else None:
    files carry no producer event time), ``get_message_properties`` (a changelog input's ``offset``, ``kind``
    and ``version``; ``{}`` for files), ``get_current_message_topic_name`` (the input the record came from).
    Outside a record (e.g. in ``process_batch``) they return None (``{}`` for properties).
    """

    def __init__(self, tenant: str, namespace: str, name: str, state: KeyedTransaction | BufferedState,
                 user_config: Mapping[str, Any] | None = None, logger: logging.Logger | None = None, *,
                 function_id: str = "", function_version: int | str = 0, instance_id: int = 0,
                 inputs: list[str] | None = None, output: str | None = None,
                 secrets: Mapping[str, Any] | None = None,
                 secrets_provider: Callable[[str, Any], Any] | None = None,
                 source: RecordSource | None = None, output_serde: str | None = None) -> None:
        self.tenant = tenant
        self._output_serde = output_serde
        self.namespace = namespace
        self.name = name
        #: the batch's keyed state (a bare buffer gets a transaction of its own, committed by its caller): every state
        #: method, and the key of a timer, go through it
        self._txn = state if isinstance(state, KeyedTransaction) else KeyedTransaction(state)
        self._txn.follow(self._variable_key, self._batch_keys)
        self._user_config = dict(user_config or {})
        self._logger = logger or logging.getLogger(f"statekeep.function.{tenant}.{namespace}.{name}")
        self._function_id = function_id
        self._function_version = function_version
        self._instance_id = instance_id
        self._inputs = list(inputs or [])
        self._output = output
        self._secrets = dict(secrets or {})
        self._secrets_provider = secrets_provider or environment_secret
        self._source = source
        #: the record cursor: the current record's position in source (-1: none), which the runtime moves per
        #: record; the per-record methods read the record it points at
        self.position = -1
        self.metrics: dict[str, list[float]] = {}  # name -> [sum, count, last] of record_metric values
        self.published: list[tuple[str, Any]] = []  # (topic, message) from publish, written with the batch
        #: the typed variables' schemas as recorded with the function (name -> schema; read by ``load_schemas``
        #: when a variable is first opened), checked at each open; and those this run opened, to be recorded
        self.load_schemas: Callable[[], dict[str, dict[str, Any]]] = dict
        self.recorded_schemas: dict[str, dict[str, Any]] | None = None
        self.state_schemas: dict[str, dict[str, Any]] = {}
        self._variables: dict[tuple[Any, ...], Any] = {}  # the handles opened, by their arguments

    def get_input_topics(self) -> list[str]:
        return list(self._inputs)

    def get_output_topic(self) -> str | None:
        return self._output

    def get_output_serde_class_name(self) -> str | None:
        """``outputSerdeClassName``; else Pulsar's ``serde.IdentitySerDe`` with an output, None without."""
        return self._output_serde or ("serde.IdentitySerDe" if self._output else None)

    def get_function_id(self) -> str:
        return self._function_id

    def get_instance_id(self) -> int:
        return self._instance_id

    def get_function_version(self) -> int | str:
        return self._function_version

    def get_secret(self, secret_name: str) -> Any:
        """As Pulsar: None unless ``secret_name`` is in the config's ``secrets`` map; then what the
        secrets provider gives for it (by default the environment variable of that name)."""
        if secret_name not in self._secrets:
            return None
        return self._secrets_provider(secret_name, self._secrets[secret_name])

    def record_metric(self, metric_name: str, metric_value: float) -> None:
        """Add a value to a user metric (its count, sum and last value appear in the function's
        stats as ``userMetrics`` and in ``/metrics``); InvalidArgumentError for a non-number."""
        if not isinstance(metric_name, str) or not metric_name:
            raise InvalidArgumentError("a metric name must be a non-empty str")
        if isinstance(metric_value, bool) or not isinstance(metric_value, (int, float)):
            raise InvalidArgumentError(f"a metric value must be a number, not {type(metric_value).__name__}")
        entry = self.metrics.get(metric_name)
        if entry is None:
            self.metrics[metric_name] = [float(metric_value), 1.0, float(metric_value)]
        else:
            entry[0] += metric_value
            entry[1] += 1
            entry[2] = float(metric_value)

    def publish(self, topic_name: str, message: Any, serde_class_name: str = "serde.IdentitySerDe",
                properties: Mapping[str, str] | None = None, compression_type: Any = None,
                callback: Callable[[Any, str], Any] | None = None, message_conf: Any = None) -> None:
        """Send ``message`` to ``topic_name`` (a Pulsar topic, or a directory, as a function's output):
        written with the batch's outputs, exactly once (a replayed batch rewrites the same file).
        ``serde_class_name`` serializes it (see :mod:`statekeep.functions.messaging.messages`); ``properties``
        and ``message_conf``'s ``properties``, ``partition_key`` and ``event_timestamp`` are kept with
        it (its other keys are accepted and ignored). ``callback`` (if given) is called with
        ``(None, topic_name)`` once it is buffered."""
        from statekeep.functions.messaging.messages import Published

        if not isinstance(topic_name, str) or not topic_name or topic_name == "console":
            raise InvalidArgumentError("publish needs an output name (a topic or a directory), not "
                                       f"{topic_name!r}")
        conf = dict(message_conf or {})
        merged = {**dict(properties or {}), **dict(conf.get("properties") or {})}
        key, event_time = conf.get("partition_key"), conf.get("event_timestamp")
        if key is not None and not isinstance(key, str):
            raise InvalidArgumentError(f"message_conf partition_key must be a str, not {type(key).__name__}")
        check_int(event_time, "message_conf event_timestamp (ms)", optional=True)
        if not isinstance(serde_class_name, str):
            raise InvalidArgumentError("serde_class_name must be a str")
        self.published.append((topic_name, Published(message, serde_class_name, key,
                                                     {str(k): str(v) for k, v in merged.items()}, event_time)))
        if callback is not None:
            callback(None, topic_name)

    def ack(self, msgid: Any = None, topic: Any = None) -> None:
        """Accepted and ignored: under exactly-once a record counts as consumed when its batch's state
        and outputs are written, which the runtime does."""

    # identity and configuration

    def get_function_tenant(self) -> str:
        return self.tenant

    def get_function_namespace(self) -> str:
        return self.namespace

    def get_function_name(self) -> str:
        return self.name

    def get_user_config_value(self, key: str) -> Any:
        return self._user_config.get(key)

    def get_user_config_map(self) -> dict[str, Any]:
        return dict(self._user_config)

    def get_logger(self) -> logging.Logger:
        return self._logger


def environment_secret(secret_name: str, path: Any = None) -> str | None:
    """Pulsar's ``EnvironmentBasedSecretsProvider``: the environment variable named ``secret_name``."""
    return os.environ.get(secret_name)
