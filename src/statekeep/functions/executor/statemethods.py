"""The state methods of a function's ``context`` (:class:`StateMethods`, mixed into
:class:`~statekeep.functions.executor.context.Context`): Pulsar's ``get_state``/``put_state``/counters, their bulk
forms for ``process_batch``, and typed state variables, each a face on the batch's
:class:`~statekeep.state.transaction.KeyedTransaction`, which checks keys, encodes entries and applies TTL."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from statekeep.errors import InvalidArgumentError
from statekeep.functions.executor.record import RecordSource
from statekeep.state.transaction import KeyedTransaction
from statekeep.state.typed import StateSchemaError, check_evolution, variable
from statekeep.state.variables import ListState, MapState, ValueState

if TYPE_CHECKING:
    from statekeep.state.timekeeping import TimeState

H = TypeVar("H", bound="ValueState[Any] | ListState[Any] | MapState[Any, Any]")


class StateMethods:
    """Mixed into :class:`statekeep.functions.executor.context.Context` (which sets these attributes): every
    method is its transaction's (``_txn``)."""

    _txn: KeyedTransaction
    _time: TimeState | None
    _source: RecordSource | None
    position: int
    load_schemas: Callable[[], dict[str, dict[str, Any]]]
    recorded_schemas: dict[str, dict[str, Any]] | None
    state_schemas: dict[str, dict[str, Any]]
    _variables: dict[tuple[Any, ...], Any]
    _last_value: tuple[str, Any, ValueState[Any]] | None = None  # (name, type, handle): value_state's last open

    if TYPE_CHECKING:  # the Context's other mixin's (defined here, it would hide it)
        def get_message_key(self) -> str | None: ...  # RecordMethods': the current record's key

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
