"""The ``context`` a function receives, shaped like Pulsar's Python ``Context``.

During a micro-batch a partition's state is a :class:`BufferedState`: reads are served from one
bulk prefetch (a miss fetches that key once), writes are buffered, and the runtime applies them
all in one atomic write at the end of the batch. A function therefore never waits on the store
per record, and a batch that fails half-way has written nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.base import validate_value
from statekeep.state.keys import encode_key
from statekeep.state.records import COUNTER_MAX, COUNTER_MIN


class BufferedState:
    """One batch's view of a function's state.

    ``fetch(keys)`` returns ``{key: (value_bytes_or_None, counter_or_None)}`` for every key asked.
    After the batch, :attr:`puts` (key -> bytes, or None for a delete) and :attr:`counter_deltas`
    (key -> amount, applied after the puts, so a delete then an increment restarts from zero) are
    what must be written. ``max_value_size`` is the store's limit, checked per put so that a value
    the store would refuse fails its own record rather than the batch's write.
    """

    def __init__(self, fetch: Callable[[list[str]], Mapping[str, tuple[bytes | None, int | None]]],
                 max_value_size: int = 1 << 20) -> None:
        self._fetch = fetch
        self.max_value_size = max_value_size
        self._base: dict[str, tuple[bytes | None, int | None]] = {}
        self.puts: dict[str, bytes | None] = {}
        self.counter_deltas: dict[str, int] = {}

    def prefetch(self, keys: Iterable[str]) -> None:
        missing = [k for k in dict.fromkeys(keys) if k not in self._base]
        if missing:
            self._base.update(self._fetch(missing))

    def _entry(self, key: str) -> tuple[bytes | None, int | None]:
        if key not in self._base:
            self.prefetch([key])
        return self._base[key]

    def get(self, key: str) -> bytes | None:
        if key in self.puts:
            return self.puts[key]
        return self._entry(key)[0]

    def put(self, key: str, value: bytes | None) -> None:
        self.puts[key] = value
        self.counter_deltas.pop(key, None)

    def _stored_counter(self, key: str, entry: tuple[bytes | None, int | None]) -> int:
        value, counter = entry
        if counter is None and value is not None:  # as the store would refuse it, but per record
            raise InvalidArgumentError(f"state key {key!r} holds bytes, not a counter")
        return counter or 0

    def get_counter(self, key: str) -> int:
        delta = self.counter_deltas.get(key, 0)
        if key in self.puts:  # deleted (or overwritten) in this batch: counts restart from zero
            return delta
        return self._stored_counter(key, self._entry(key)) + delta

    def incr(self, key: str, amount: int) -> int:
        # get_counter inlined: this runs once per record in counting functions
        delta = self.counter_deltas.get(key, 0) + amount
        if key in self.puts:
            value = delta
        else:
            base = self._base.get(key)
            if base is None:
                base = self._entry(key)
            value = (base[1] if base[1] is not None else self._stored_counter(key, base)) + delta
        if not COUNTER_MIN <= value <= COUNTER_MAX:
            raise InvalidArgumentError(f"counter {key!r} would overflow a signed 64-bit integer")
        self.counter_deltas[key] = delta
        return value

    def add_many(self, keys: list[str], amounts: list[int]) -> None:
        """Buffer ``amounts`` as counter deltas of ``keys`` (a key may repeat), reading nothing: the
        stored values are checked (a key holding bytes, overflow) by the batch's write, which then
        fails whole. A running delta outside 64 bits raises here, before any of them is buffered."""
        deltas = self.counter_deltas
        new = dict.fromkeys(keys, 0)
        for key, amount in zip(keys, amounts):
            new[key] += amount
        for key, amount in new.items():
            total = deltas.get(key, 0) + amount
            if not COUNTER_MIN <= total <= COUNTER_MAX:
                raise InvalidArgumentError(f"counter {key!r} would overflow a signed 64-bit integer")
            new[key] = total
        deltas.update(new)

    @property
    def dirty(self) -> bool:
        return bool(self.puts or self.counter_deltas)


def _key(key: object) -> str:
    encode_key(key)  # raises InvalidArgumentError for what the store would refuse (cached for hot keys)
    return key  # type: ignore[return-value]


def _key_list(keys: object, op: str) -> list[str]:
    """``keys`` (a pyarrow Array or ChunkedArray, a numpy/pandas array, or any sequence of str) as
    a list of valid state keys; :class:`InvalidArgumentError` naming ``op`` otherwise."""
    if isinstance(keys, (str, bytes)):
        raise InvalidArgumentError(f"{op}: keys must be a sequence of str, not one {type(keys).__name__}")
    if hasattr(keys, "to_pylist"):  # pyarrow
        keys = keys.to_pylist()
    elif hasattr(keys, "tolist"):  # numpy, pandas
        keys = keys.tolist()
    try:
        keys = list(keys)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(f"{op}: keys must be a sequence of str, not {type(keys).__name__}") from None
    for key in keys:
        try:
            encode_key(key)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{op}: {e}") from None
    return keys


def _value_list(values: object, n: int, op: str, what: str) -> list[Any]:
    """``values`` (as :func:`_key_list` takes keys) as a list of exactly ``n`` items."""
    if hasattr(values, "to_pylist"):
        values = values.to_pylist()
    elif hasattr(values, "tolist"):
        values = values.tolist()
    try:
        values = list(values)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(f"{op}: {what} must be a sequence, not {type(values).__name__}") from None
    if len(values) != n:
        raise InvalidArgumentError(f"{op}: {n} keys but {len(values)} {what} (one per key)")
    return values


def is_valid_key(key: object) -> bool:
    """Whether the state store accepts ``key`` (a non-empty str within the length limit)."""
    try:
        encode_key(key)
    except InvalidArgumentError:
        return False
    return True


class Context:
    """What ``process(input, context)`` may use. Names follow Pulsar's Python Context."""

    def __init__(self, tenant: str, namespace: str, name: str, state: BufferedState,
                 user_config: Mapping[str, Any] | None = None, logger: logging.Logger | None = None) -> None:
        self.tenant = tenant
        self.namespace = namespace
        self.name = name
        self._state = state
        self._user_config = dict(user_config or {})
        self._logger = logger or logging.getLogger(f"statekeep.function.{tenant}.{namespace}.{name}")

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
    def get_state(self, key: str) -> bytes | None:
        return self._state.get(_key(key))

    def put_state(self, key: str, value: bytes | str) -> None:
        if isinstance(value, str):
            value = value.encode()
        elif not isinstance(value, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"state values are bytes or str, not {type(value).__name__}")
        self._state.put(_key(key), validate_value(value, self._state.max_value_size))

    def del_state(self, key: str) -> None:
        self._state.put(_key(key), None)

    def incr_counter(self, key: str, amount: int = 1) -> int:
        if amount.__class__ is not int and (isinstance(amount, bool) or not isinstance(amount, int)):
            raise InvalidArgumentError(f"a counter amount must be an int, not {type(amount).__name__}")
        return self._state.incr(_key(key), amount)

    def get_counter(self, key: str) -> int:
        return self._state.get_counter(_key(key))

    def del_counter(self, key: str) -> None:
        self._state.put(_key(key), None)

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
        self._state.add_many(keys, amounts)

    def get_counters(self, keys: Any) -> list[int]:
        """The counter at each key (0 if absent); a key holding bytes raises InvalidArgumentError."""
        keys = _key_list(keys, "get_counters")
        self._state.prefetch(keys)
        get = self._state.get_counter
        return [get(k) for k in keys]

    def get_states(self, keys: Any) -> list[bytes | None]:
        """The value at each key (a counter as 8 bytes), or None where absent."""
        keys = _key_list(keys, "get_states")
        self._state.prefetch(keys)
        get = self._state.get
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

    def del_states(self, keys: Any) -> None:
        """Delete each key (state or counter); absent keys are fine."""
        put = self._state.put
        for key in _key_list(keys, "del_states"):
            put(key, None)
