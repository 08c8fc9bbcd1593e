"""The ``context`` a function receives, shaped like Pulsar's Python ``Context``.

During a micro-batch a partition's state is a :class:`BufferedState`: reads are served from one
bulk prefetch (a miss fetches that key once), writes are buffered, and the runtime applies them
all in one atomic write at the end of the batch. A function therefore never waits on the store
per record, and a batch that fails half-way has written nothing.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from statekeep.errors import InvalidArgumentError
from statekeep.functions.windowing.timecontext import TimeMethods
from statekeep.state.base import validate_value
from statekeep.state.buffer import BufferedState
from statekeep.state.keys import encode_key
from statekeep.state.timestate import check_user_key, wall_clock_ms
from statekeep.state.typed import StateSchemaError, check_evolution, variable
from statekeep.state.variables import ListState, MapState, Scope, ValueState
from statekeep.validate import check_int

H = TypeVar("H", bound="ValueState[Any] | ListState[Any] | MapState[Any, Any]")


def _key(key: object) -> str:
    encode_key(key)  # raises InvalidArgumentError for what the store would refuse (cached for hot keys)
    if key[0] == "\x00":  # type: ignore[index]  # a non-empty str (encode_key accepted it)
        check_user_key(key)  # type: ignore[arg-type]  # statekeep's own time state: refused
    return key  # type: ignore[return-value]  # encode_key accepted it, so it is a str


def _key_list(keys: object, op: str) -> list[str]:
    """``keys`` (a pyarrow Array or ChunkedArray, a numpy/pandas array, or any sequence of str) as
    a list of valid state keys; :class:`InvalidArgumentError` naming ``op`` otherwise."""
    if isinstance(keys, (str, bytes)):
        raise InvalidArgumentError(f"{op}: keys must be a sequence of str, not one {type(keys).__name__}")
    if hasattr(keys, "to_pylist"):  # pyarrow
        keys = keys.to_pylist()
    elif hasattr(keys, "tolist"):  # numpy, pandas
        keys = keys.tolist()
    try:  # any iterable (list() raises TypeError otherwise); each item is checked to be a valid key below
        key_list: list[str] = list(keys)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(f"{op}: keys must be a sequence of str, not {type(keys).__name__}") from None
    for key in key_list:
        try:
            check_user_key(encode_key(key) and key)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{op}: {e}") from None
    return key_list


def _value_list(values: object, n: int, op: str, what: str) -> list[Any]:
    """``values`` (as :func:`_key_list` takes keys) as a list of exactly ``n`` items."""
    if hasattr(values, "to_pylist"):
        values = values.to_pylist()
    elif hasattr(values, "tolist"):
        values = values.tolist()
    try:  # any iterable: list() raises TypeError otherwise
        value_list: list[Any] = list(values)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(f"{op}: {what} must be a sequence, not {type(values).__name__}") from None
    if len(value_list) != n:
        raise InvalidArgumentError(f"{op}: {n} keys but {len(value_list)} {what} (one per key)")
    return value_list


def is_valid_key(key: object) -> bool:
    """Whether the state store accepts ``key`` (a non-empty str within the length limit)."""
    try:
        encode_key(key)
    except InvalidArgumentError:
        return False
    return True


class RecordSource:
    """Where the records of one (batch, partition) came from, for the per-record Context methods.
    ``records`` (raw lines or JSON documents), ``keys`` (the key field's value per record, or None)
    and ``topics`` (the input each record came from, or None when there is one input) are aligned
    by position; the context reads them only when a metadata method is called, so a function that
    calls none costs one attribute store per record."""

    __slots__ = ("batch_id", "records", "keys", "topics", "inputs", "event_time_field", "source_format")

    def __init__(self, batch_id: int | str, records: list[Any], keys: list[Any] | None = None,
                 topics: list[Any] | None = None, inputs: list[str] | None = None,
                 event_time_field: str | None = None, source_format: str = "json") -> None:
        self.batch_id = batch_id
        self.records = records
        self.keys = keys
        self.topics = topics
        self.inputs = list(inputs or [])
        self.event_time_field = event_time_field
        self.source_format = source_format


class Context(TimeMethods):
    """What ``process(input, context)`` may use. Names and semantics follow Pulsar's Python Context
    (``pulsar.functions.context.Context``); every method of it exists here.

    Per record: ``get_message_id`` (``"BATCH:PARTITION:POSITION"``, the same on a replay of the
    batch), ``get_message_key``/``get_partition_key``/``get_ordering_key`` (the key field's value,
    None without one), ``get_message_eventtime`` (ms: the record's ``userConfig.eventTimeField``
    field if configured, else None: files carry no producer event time), ``get_message_properties``
    (a changelog input's ``offset``, ``kind`` and ``version``; ``{}`` for files),
    ``get_current_message_topic_name`` (the input the record came from). Outside a record (e.g. in
    ``process_batch``) they return None (``{}`` for properties).
    """

    def __init__(self, tenant: str, namespace: str, name: str, state: BufferedState,
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
        self._state = state
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
        self._scope: Scope | None = None

    # the record being processed
    def _at(self, column: str) -> Any:
        source, position = self._source, self.position
        values = getattr(source, column) if source is not None else None
        if values is None or not 0 <= position < len(values):
            return None
        return values[position]

    def get_message_id(self) -> str | None:
        if self._source is None or self.position < 0:
            return None
        return f"{self._source.batch_id}:{self._instance_id}:{self.position}"

    def _key(self) -> str | None:
        key: str | None = self._at("keys")  # the key column: a str per record (null without a key field)
        if key is None:  # a Pulsar message's own key
            message_key = self._message().get("key")
            key = message_key if isinstance(message_key, str) else None
        return key

    def get_message_key(self) -> str | None:
        return self._key()

    def get_partition_key(self) -> str | None:
        return self._key()

    def get_ordering_key(self) -> str | None:
        return self._key()

    def _document(self) -> dict[str, Any] | None:
        raw = self._at("records")
        if isinstance(raw, dict):
            return raw
        message = self._message()
        if message:  # a message's payload, when it is a JSON line
            raw = message.get("value") if message.get("format") == "json" else None
        if self._source is None or self._source.source_format == "text" or raw is None:
            return None
        try:
            document = json.loads(raw)
        except (TypeError, ValueError):
            return None
        return document if isinstance(document, dict) else None

    def _message(self) -> dict[str, Any]:
        """The current record's Pulsar message record ({} unless the input holds messages)."""
        if self._source is None or self._source.source_format != "message":
            return {}
        from statekeep.functions.messaging.messages import record_of

        return record_of(self._at("records"))

    def get_message_eventtime(self) -> int | None:
        event_time = self._message().get("eventTime")
        if isinstance(event_time, int) and not isinstance(event_time, bool):
            return event_time
        field_name = self._source.event_time_field if self._source is not None else None
        if not field_name:
            return None
        value = (self._document() or {}).get(field_name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def get_message_properties(self) -> dict[str, str]:
        properties = self._message().get("properties")
        if isinstance(properties, dict):
            return {str(k): str(v) for k, v in properties.items()}
        if self._source is None or self._source.source_format != "statekeep-changelog":
            return {}
        document = self._document() or {}
        return {k: str(document[k]) for k in ("offset", "kind", "version") if document.get(k) is not None}

    def get_current_message_topic_name(self) -> str | None:
        if self._source is None or self.position < 0:
            return None
        if self._source.topics is None:
            return self._inputs[0] if self._inputs else None
        return input_of(self._at("topics"), self._inputs)

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

    # state
    # with time state (self._time), a key past its TTL reads as absent and a write restarts it
    # the per-record fast paths hand a plain str key outside the reserved namespace straight to the buffer,
    # which validates a key on its first read (BufferedState); any other key goes through _key
    def get_state(self, key: str) -> bytes | None:
        if self._time is None and key.__class__ is str and key[:1] != "\x00":
            return self._state.get(key)
        if self._time is not None and self._time.expired(_key(key)):
            return None
        return self._state.get(_key(key))

    def put_state(self, key: str, value: bytes | str, *, ttl_seconds: int | None = None) -> None:
        """Set ``key``; ``ttl_seconds`` (keyword-only, statekeep's): the key expires that long after this
        write (default: the function's ``stateTtlSeconds``, else never)."""
        if isinstance(value, str):
            value = value.encode()
        elif not isinstance(value, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"state values are bytes or str, not {type(value).__name__}")
        if ttl_seconds is not None:
            self._ttl_check(ttl_seconds)
        self._state.put(_key(key), validate_value(value, self._state.max_value_size))
        if self._time is not None:
            self._ttl_written(key, ttl_seconds)

    def del_state(self, key: str) -> None:
        self._state.put(_key(key), None)
        if self._time is not None:
            self._time.deleted(key)

    def incr_counter(self, key: str, amount: int = 1, *, ttl_seconds: int | None = None) -> int:
        """Add ``amount``; ``ttl_seconds`` as :meth:`put_state` (an expired counter restarts from 0)."""
        if amount.__class__ is not int and (isinstance(amount, bool) or not isinstance(amount, int)):
            raise InvalidArgumentError(f"a counter amount must be an int, not {type(amount).__name__}")
        if ttl_seconds is not None:
            self._ttl_check(ttl_seconds)
        elif self._time is None:
            return self._state.incr(key if key.__class__ is str and key[:1] != "\x00" else _key(key), amount)
        if self._time is not None and self._time.expired(_key(key)):
            self._state.put(key, None)
        value = self._state.incr(_key(key), amount)
        self._ttl_written(key, ttl_seconds)
        return value

    def get_counter(self, key: str) -> int:
        if self._time is None and key.__class__ is str and key[:1] != "\x00":
            return self._state.get_counter(key)
        if self._time is not None and self._time.expired(_key(key)):
            return 0
        return self._state.get_counter(_key(key))

    def del_counter(self, key: str) -> None:
        self.del_state(key)

    # bulk state operations (for ``process_batch``; usable from ``process`` too). ``keys`` and
    # per-key arguments may be pyarrow Arrays or ChunkedArrays, numpy/pandas arrays or sequences.
    # Each call is all or nothing: a bad key, value or amount raises InvalidArgumentError (naming
    # the operation) before any of its changes is buffered. Results are lists in the order of keys.

    def incr_counters(self, keys: Any, amounts: Any = 1) -> None:
        """Add ``amounts`` (one int for every key, or one per key) to the counters at ``keys`` (a key
        may repeat: its amounts add up). Reads nothing (:meth:`get_counters` gives the new values):
        a key that holds bytes, or a counter the stored value would overflow, fails the batch's
        write, which then writes nothing."""
        keys = _key_list(keys, "incr_counters")
        if amounts.__class__ is int or (isinstance(amounts, int) and not isinstance(amounts, bool)):
            amounts = [amounts] * len(keys)
        else:
            amounts = _value_list(amounts, len(keys), "incr_counters", "amounts")
            for amount in amounts:
                if amount.__class__ is not int and (isinstance(amount, bool) or not isinstance(amount, int)):
                    raise InvalidArgumentError(f"incr_counters: a counter amount must be an int, "
                                               f"not {type(amount).__name__} ({amount!r})")
        if self._time is not None:  # expired counters restart; every key's expiry is refreshed
            self._time.prefetch_expiries(keys)
            for key in dict.fromkeys(keys):
                if self._time.expired(key):
                    self._state.put(key, None)
        self._state.add_many(keys, amounts)
        if self._time is not None:
            for key in dict.fromkeys(keys):
                self._time.written(key, None)

    def get_counters(self, keys: Any) -> list[int]:
        """The counter at each key (0 if absent); a key holding bytes raises InvalidArgumentError."""
        keys = _key_list(keys, "get_counters")
        self._state.prefetch(keys)
        get = self._state.get_counter
        if self._time is not None:
            self._time.prefetch_expiries(keys)
            return [0 if self._time.expired(k) else get(k) for k in keys]
        return [get(k) for k in keys]

    def get_states(self, keys: Any) -> list[bytes | None]:
        """The value at each key (a counter as 8 bytes), or None where absent."""
        keys = _key_list(keys, "get_states")
        self._state.prefetch(keys)
        get = self._state.get
        if self._time is not None:
            self._time.prefetch_expiries(keys)
            return [None if self._time.expired(k) else get(k) for k in keys]
        return [get(k) for k in keys]

    def put_states(self, keys: Any, values: Any) -> None:
        """Set each key to its value (bytes, or str stored as UTF-8); a later pair wins for a repeated key."""
        keys = _key_list(keys, "put_states")
        values = _value_list(values, len(keys), "put_states", "values")
        limit, checked = self._state.max_value_size, []
        for key, value in zip(keys, values):
            if isinstance(value, str):
                value = value.encode()
            elif not isinstance(value, (bytes, bytearray, memoryview)):
                raise InvalidArgumentError(f"put_states: state values are bytes or str, not "
                                           f"{type(value).__name__} (key {key!r})")
            checked.append(validate_value(value, limit))
        put = self._state.put
        for key, value in zip(keys, checked):
            put(key, value)
        if self._time is not None:
            for key in dict.fromkeys(keys):
                self._time.written(key, None)

    def del_states(self, keys: Any) -> None:
        """Delete each key (state or counter); absent keys are fine."""
        put = self._state.put
        for key in _key_list(keys, "del_states"):
            put(key, None)
            if self._time is not None:
                self._time.deleted(key)

    # typed state variables (statekeep.state.typed): scoped to the record's key (inside on_timer, the timer's)
    def value_state(self, name: str, type: Any, *, ttl: float | None = None) -> ValueState[Any]:
        """The value state ``name`` of the current record's key, holding ``type`` (int, float, str, bytes,
        bool, a dataclass or msgspec.Struct); each write expires ``ttl`` seconds later (default never).
        :class:`StateSchemaError` if the function's recorded schema of ``name`` cannot evolve into this one."""
        return self._variable(name, "value", type, None, ttl, ValueState)

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
            if var.ttl_ms is not None and self._time is None:
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
            if self._scope is None:
                self._scope = Scope(self._state, self._variable_key, self._clock, self._batch_keys,
                                    self._time.index if self._time is not None else None)
            opened = self._variables[(name, kind, value_type, key_type, ttl)] = handle(self._scope, var)
        return opened

    def _variable_key(self) -> str | None:
        if self._time is not None and self._time.current_key is not None:
            return self._time.current_key or None  # "" is the timers of records without a key
        source, position = self._source, self.position
        keys = source.keys if source is not None else None
        if keys is not None and 0 <= position < len(keys) and keys[position] is not None:
            return keys[position]  # type: ignore[no-any-return]  # the key column: str or None
        return self._key()

    def _batch_keys(self) -> Iterable[Any]:
        """The record keys of the batch (for typed variables' prefetch)."""
        source = self._source
        return source.keys if source is not None and source.keys is not None else ()

    def _clock(self) -> int:
        return self._time.now if self._time is not None else wall_clock_ms()


def environment_secret(secret_name: str, path: Any = None) -> str | None:
    """Pulsar's ``EnvironmentBasedSecretsProvider``: the environment variable named ``secret_name``."""
    return os.environ.get(secret_name)


def input_of(file: str | None, inputs: list[str]) -> str | None:
    """The entry of ``inputs`` a file read by Spark (``file:///a/b/x.json``) belongs to: the longest
    input whose path it is, or lies under; the file itself if none matches."""
    if file is None:
        return None
    path = file.removeprefix("file://")
    best = None
    for entry in inputs:
        plain = entry.removeprefix("file://").rstrip("/")
        if (path == plain or path.startswith(plain + "/")) and (best is None or len(plain) > len(best[1])):
            best = (entry, plain)
    return best[0] if best else file
