"""The state methods of a function's ``context`` (:class:`StateMethods`, mixed into
:class:`~statekeep.functions.executor.context.Context`): Pulsar's ``get_state``/``put_state``/counters, their bulk
forms for ``process_batch``, and typed state variables, all on the batch's
:class:`~statekeep.state.buffer.BufferedState`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from statekeep.errors import InvalidArgumentError
from statekeep.functions.executor.record import RecordSource
from statekeep.state.base import validate_value
from statekeep.state.buffer import BufferedState
from statekeep.state.keys import encode_key
from statekeep.state.timestate import check_user_key, wall_clock_ms
from statekeep.state.typed import StateSchemaError, check_evolution, variable
from statekeep.state.variables import ListState, MapState, Scope, ValueState

if TYPE_CHECKING:
    from statekeep.functions.windowing.timekeeping import TimeState

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


class StateMethods:
    """Mixed into :class:`statekeep.functions.executor.context.Context` (which sets these attributes)."""

    _state: BufferedState
    _time: TimeState | None
    _source: RecordSource | None
    position: int
    load_schemas: Callable[[], dict[str, dict[str, Any]]]
    recorded_schemas: dict[str, dict[str, Any]] | None
    state_schemas: dict[str, dict[str, Any]]
    _variables: dict[tuple[Any, ...], Any]
    _scope: Scope | None

    if TYPE_CHECKING:  # the Context's other mixins' (defined here, they would hide theirs)
        def _key(self) -> str | None: ...  # RecordMethods': the current record's key

        def _ttl_check(self, ttl_seconds: Any) -> None: ...  # TimeMethods'

        def _ttl_written(self, key: str, ttl_seconds: Any) -> None: ...  # TimeMethods'

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
