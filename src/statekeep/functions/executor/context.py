"""The ``context`` a function receives, shaped like Pulsar's Python ``Context``: the whole API in this one class.

- **The record** being processed (``get_message_*``, ``get_current_message_topic_name``): read where the record
  path put it (:class:`~statekeep.functions.executor.record.RecordSource`), at the context's cursor.
- **State** (Pulsar's ``get_state``/``put_state``/counters, their bulk forms for ``process_batch``, typed state
  variables): each a face on the run's :class:`~statekeep.state.transaction.KeyedTransaction`, which checks keys,
  encodes entries and applies TTL. Reads come from one bulk prefetch, writes are buffered and committed in one
  atomic write at the end of the batch: a function never waits on the store per record, and a batch that fails
  half-way has written nothing.
- **Time**: timers belong to a key, the current record's (``--key-field``; records without one share one key) or,
  inside ``on_timer``, the key whose timer fired. ``register_timer(ms)`` is idempotent per (key, time, domain); a
  timer fires once, at the end of the batch in which the watermark (event time) or the clock (processing time)
  reaches it, calling ``on_timer(key, timestamp_ms, context)``, whose return value is an output record and whose
  state changes commit with the batch. ``get_window`` while a window is processed.
- **Outputs, identity and configuration**: ``publish``, ``record_metric``, ``get_secret``, ``get_user_config_*``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from statekeep.errors import InvalidArgumentError
from statekeep.functions.executor.record import RecordSource, input_of
from statekeep.state.buffer import BufferedState
from statekeep.state.timekeeping import DOMAINS
from statekeep.state.transaction import KeyedTransaction
from statekeep.state.typed import StateSchemaError, check_evolution, variable
from statekeep.state.variables import ListState, MapState, ValueState
from statekeep.validate import check_int

if TYPE_CHECKING:
    from statekeep.functions.windowing.windowtypes import Window
    from statekeep.state.timekeeping import TimeState

H = TypeVar("H", bound="ValueState[Any] | ListState[Any] | MapState[Any, Any]")


class Context:
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

    _time: TimeState | None = None
    _window: Window | None = None
    _last_value: tuple[str, Any, ValueState[Any]] | None = None  # (name, type, handle): value_state's last open

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

    # ---- the record being processed (Pulsar's per-record methods) ----
    def _at(self, column: str) -> Any:
        source, position = self._source, self.position
        values = getattr(source, column) if source is not None else None
        if values is None or not 0 <= position < len(values):
            return None
        return values[position]

    def get_message_id(self) -> Any:
        """A Pulsar message's own id (a ``pulsar.MessageId``, as Pulsar's runtime gives it); a Kafka message's
        ``TOPIC:PARTITION:OFFSET`` (TOPIC its input's name); for any other record ``BATCH:INSTANCE:POSITION``."""
        source, position = self._source, self.position
        if source is None or position < 0:
            return None
        messages = source.messages
        if messages is not None and messages.ids is not None:
            ident = messages.message_id(position)
            if ident is not None:
                return ident
        if messages is not None and messages.offsets is not None and messages.offsets[0][position] is not None:
            return f"{self.get_current_message_topic_name()}:{messages.offsets[0][position]}:" \
                   f"{messages.offsets[1][position]}"  # where the message is in Kafka
        return f"{source.batch_id}:{self._instance_id}:{position}"

    def get_message_key(self) -> str | None:
        source, position = self._source, self.position
        if source is None or position < 0:
            return None
        keys = source.keys  # resolved once per batch (RecordSource): read per record, by every output too
        return keys[position] if keys is not None and position < len(keys) else None

    get_partition_key = get_ordering_key = get_message_key

    def _document(self) -> dict[str, Any] | None:
        raw = self._at("records")
        if isinstance(raw, dict):
            return raw
        source = self._source
        if source is None or source.format.text_lines or raw is None:
            return None
        if source.messages is not None and not source.messages.is_json(self.position):
            return None  # a message's payload is a document only where it is a JSON file's line
        try:
            document = json.loads(raw)
        except (TypeError, ValueError):
            return None
        return document if isinstance(document, dict) else None

    def get_message_eventtime(self) -> int | None:
        source, position = self._source, self.position
        if source is None or position < 0:
            return None
        if source.messages is not None:
            event_time = source.messages.time_at(position)
            if event_time is not None:
                return event_time
        if not source.event_time_field:
            return None
        value = (self._document() or {}).get(source.event_time_field)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def get_message_properties(self) -> dict[str, str]:
        source, position = self._source, self.position
        if source is None or position < 0:
            return {}
        if source.messages is not None:
            return source.messages.properties_at(position)
        if not source.format.changelog:
            return {}
        document = self._document() or {}
        return {k: str(document[k]) for k in ("offset", "kind", "version") if document.get(k) is not None}

    def get_current_message_topic_name(self) -> str | None:
        if self._source is None or self.position < 0:
            return None
        if self._source.topics is None:
            return self._inputs[0] if self._inputs else None
        return input_of(self._at("topics"), self._inputs)

    # ---- state (Pulsar's, their bulk forms, typed state variables) ----
    # state: with time state, a key past its TTL reads as absent and a write restarts it
    def get_state(self, key: str) -> bytes | None:
        return self._txn.get(key)

    def put_state(self, key: str, value: bytes | str, *, ttl_seconds: int | None = None) -> None:
        """Set ``key``; ``ttl_seconds`` (keyword-only, statekeep's): the key expires that long after this
        write (default: the function's ``stateTtlSeconds``, else never)."""
        self._txn.put(key, value, ttl_seconds)

    def del_state(self, key: str) -> None:
        self._txn.delete(key)

    def incr_counter(self, key: str, amount: int = 1, *, ttl_seconds: int | None = None) -> int:
        """Add ``amount``; ``ttl_seconds`` as :meth:`put_state` (an expired counter restarts from 0)."""
        return self._txn.incr(key, amount, ttl_seconds)

    def get_counter(self, key: str) -> int:
        return self._txn.counter(key)

    def del_counter(self, key: str) -> None:
        self._txn.delete(key)

    # bulk state operations (for ``process_batch``; usable from ``process`` too). ``keys`` and
    # per-key arguments may be pyarrow Arrays or ChunkedArrays, numpy/pandas arrays or sequences.
    # Each call is all or nothing: a bad key, value or amount raises InvalidArgumentError (naming
    # the operation) before any of its changes is buffered. Results are lists in the order of keys.

    def incr_counters(self, keys: Any, amounts: Any = 1) -> None:
        """Add ``amounts`` (one int for every key, or one per key) to the counters at ``keys`` (a key
        may repeat: its amounts add up). Reads nothing (:meth:`get_counters` gives the new values):
        a key that holds bytes, or a counter the stored value would overflow, fails the batch's
        write, which then writes nothing."""
        self._txn.incr_many(keys, amounts)

    def get_counters(self, keys: Any) -> list[int]:
        """The counter at each key (0 if absent); a key holding bytes raises InvalidArgumentError."""
        return self._txn.counters(keys)

    def get_states(self, keys: Any) -> list[bytes | None]:
        """The value at each key (a counter as 8 bytes), or None where absent."""
        return self._txn.get_many(keys)

    def put_states(self, keys: Any, values: Any) -> None:
        """Set each key to its value (bytes, or str stored as UTF-8); a later pair wins for a repeated key."""
        self._txn.put_many(keys, values)

    def del_states(self, keys: Any) -> None:
        """Delete each key (state or counter); absent keys are fine."""
        self._txn.delete_many(keys)

    # typed state variables (statekeep.state.typed): scoped to the record's key (inside on_timer, the timer's)
    def value_state(self, name: str, type: Any, *, ttl: float | None = None) -> ValueState[Any]:
        """The value state ``name`` of the current record's key, holding ``type`` (int, float, str, bytes,
        bool, a dataclass or msgspec.Struct); each write expires ``ttl`` seconds later (default never).
        :class:`StateSchemaError` if the function's recorded schema of ``name`` cannot evolve into this one."""
        last = self._last_value  # a record's one call, on the handle the batch's first call opened
        if last is not None and last[0] is name and last[1] is type and ttl is None:
            return last[2]
        opened = self._variable(name, "value", type, None, ttl, ValueState)
        if ttl is None:
            self._last_value = (name, type, opened)
        return opened

    def list_state(self, name: str, type: Any, *, ttl: float | None = None) -> ListState[Any]:
        """The list state ``name`` of the current record's key: elements of ``type``, each expiring ``ttl``
        seconds after its append (see :meth:`value_state`)."""
        return self._variable(name, "list", type, None, ttl, ListState)

    def map_state(self, name: str, key_type: Any, value_type: Any, *, ttl: float | None = None) -> MapState[Any, Any]:
        """The map state ``name`` of the current record's key: ``key_type`` (str, int, bool or bytes) to
        ``value_type``, each entry expiring ``ttl`` seconds after its write (see :meth:`value_state`)."""
        return self._variable(name, "map", value_type, key_type, ttl, MapState)

    def _variable(self, name: str, kind: str, value_type: Any, key_type: Any, ttl: Any, handle: type[H]) -> H:
        opened = self._variables.get((name, kind, value_type, key_type, ttl))
        if opened is None:
            var = variable(name, kind, value_type, key_type, ttl)
            if var.ttl_ms is not None and self._txn.ttl is None:
                raise InvalidArgumentError(
                    f"state variable {name!r} has a TTL, which needs the function's time state (its TTL index): kept "
                    "when the function's source names a TTL (ttl=, ttl_seconds), on_timer or register_timer, or its "
                    "config has stateTtlSeconds or a windowConfig; here it did not (the ttl came from elsewhere?)")
            schema = var.schema()
            seen = self.state_schemas.get(name)
            if seen is not None and seen != schema:
                raise StateSchemaError(f"state variable {name!r} is opened with two schemas in one run: {seen} and "
                                       f"{schema}", name)
            if self.recorded_schemas is None:
                self.recorded_schemas = self.load_schemas()
            recorded = self.recorded_schemas.get(name)
            if recorded is not None:
                check_evolution(name, recorded, schema)
            self.state_schemas[name] = schema
            opened = self._variables[(name, kind, value_type, key_type, ttl)] = handle(self._txn, var)
        return opened

    def _variable_key(self) -> str | None:
        """The record key typed variables belong to: the timer's inside ``on_timer`` (None for the timers of records
        without a key), else the current record's, as its :class:`RecordSource` resolved it once for the batch."""
        time = self._time
        if time is not None and time.current_key is not None:
            return time.current_key or None
        source, position = self._source, self.position
        keys = source.keys if source is not None else None
        return keys[position] if keys is not None and 0 <= position < len(keys) else None

    def _batch_keys(self) -> Iterable[Any]:
        """The record keys of the batch (for typed variables' prefetch)."""
        source = self._source
        return source.keys if source is not None and source.keys is not None else ()

    # ---- time: timers, the watermark, the current window ----
    def keep_time(self, time: TimeState) -> None:
        """Give the context its run's time state (the runtime, for a function keeping time)."""
        self._time = time
        self._txn.keep_time(time)

    def in_window(self, window: Window | None) -> None:
        """Set the window :meth:`get_window` returns (the runtime, while a window is processed; None after)."""
        self._window = window

    def _time_state(self, op: str) -> TimeState:
        if self._time is None:
            raise InvalidArgumentError(f"{op}: this function keeps no time state (define on_timer, a windowConfig "
                                       "or stateTtlSeconds)")
        return self._time

    def register_timer(self, timestamp_ms: int, domain: str = "event", *, key: str | None = None) -> None:
        """Fire ``on_timer(key, timestamp_ms, context)`` once ``domain``'s time (``"event"``: the watermark,
        ``"processing"``: the clock) reaches ``timestamp_ms``; ``key`` defaults to the current key.
        :class:`InvalidArgumentError` for a non-int time or one more than ten years from now."""
        time = self._time_state("register_timer")
        time.register(self._txn.timer_key(key), time.check_timestamp(timestamp_ms, domain), DOMAINS[domain])

    def delete_timer(self, timestamp_ms: int, domain: str = "event", *, key: str | None = None) -> bool:
        """Remove a registered timer; False if there was none."""
        time = self._time_state("delete_timer")
        if domain not in DOMAINS:
            raise InvalidArgumentError(f"a timer's domain is 'event' or 'processing', not {domain!r}")
        return time.delete(self._txn.timer_key(key), timestamp_ms, DOMAINS[domain])

    def list_timers(self, *, key: str | None = None) -> list[tuple[int, str]]:
        """The key's registered timers as ``(timestamp_ms, domain)``, oldest first (windows' own timers
        show with domain ``"window"``)."""
        time = self._time_state("list_timers")
        return time.timers(self._txn.timer_key(key))

    def get_current_watermark(self) -> int | None:
        """The event-time watermark (ms) as this batch found it; None before any event time was seen."""
        return self._time.watermark if self._time is not None else None

    def get_current_processing_time(self) -> int:
        """The batch's processing time (ms since the epoch), the same for its every record."""
        return self._time_state("get_current_processing_time").now

    def get_window(self) -> Window | None:
        """While a windowed function processes a window: its key, start, end and size (records); else None."""
        return self._window

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
