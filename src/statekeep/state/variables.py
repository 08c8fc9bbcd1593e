"""The handles a function's Context gives for typed state variables (:mod:`statekeep.state.typed`): value,
list and map state of the record being processed, read and written through the batch's
:class:`~statekeep.state.buffer.BufferedState`, so their changes commit with the batch's, exactly once.

Every operation works on the current record's key (``key_of()``), or on another key's through ``of(key)``
(with partition-owned state, a key of the task's own key groups). A write sets the entry's expiry to the batch's
time plus the variable's TTL and lists it in the function's TTL index (the Scope's ``index``), so the first batch
after it deletes the entry, read or not; a read at or after the expiry finds it absent. Errors:
:class:`InvalidArgumentError` for a value of the wrong type, a record without a key, a state key too long;
nothing is buffered by a call that raises.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from statekeep.errors import InvalidArgumentError
from statekeep.state.buffer import BufferedState
from statekeep.state.typed import (EXPIRING, MAP_KEY_TYPES, Variable, checked_key, decode_map_key, element_key,
                                   encode_bounds, encode_entry, entry_expiry, entry_payload, list_bounds, map_key_code,
                                   variable_prefix)

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class Scope:
    """What the handles share: the batch's ``state``, the current record's key (``key_of``), the batch's
    time in ms (``now``, one per batch, so that expiry is the same for every record of it) and the TTL index
    (``index(state key, expiry ms)``; None: no variable of the run has a TTL)."""

    def __init__(self, state: BufferedState, key_of: Callable[[], str | None], now: Callable[[], int],
                 batch_keys: Callable[[], Iterable[Any]] = tuple,
                 index: Callable[[str, int], None] | None = None) -> None:
        self.state, self.key_of, self._now, self._batch_keys = state, key_of, now, batch_keys
        self._index = index
        self._time: int | None = None
        self._at: dict[tuple[str, str, str], str] = {}
        self._prefetched: set[tuple[str, str]] = set()
        #: (variable prefix, map key's class, map key) -> its entry's state key, checked: a map's get then put
        self.map_entries: dict[tuple[str, type, Any], str] = {}

    def now(self) -> int:
        if self._time is None:
            self._time = self._now()
        return self._time

    def at(self, bound: str | None, var: Variable, suffix: str) -> str:
        """The state key of ``var``'s entry ``suffix`` (``=``: a value, ``#``: a list's bounds) of the record key
        (``bound``, else the current record's), checked once per batch."""
        key = bound if bound is not None else self.key_of()
        if key is None:
            key = self.key(None, var)  # raises: no key
        cached = self._at.get((var.name, key, suffix))
        if cached is None and (var.name, suffix) not in self._prefetched:
            self._prefetch(var, suffix)
            cached = self._at.get((var.name, key, suffix))
        if cached is None:
            if len(self._at) > 100_000:
                self._at.clear()
            cached = self._at[(var.name, key, suffix)] = checked_key(variable_prefix(key, var.name) + suffix,
                                                                    f"state variable {var.name!r}")
        return cached

    def _prefetch(self, var: Variable, suffix: str) -> None:
        """At the first read of ``var``'s entry ``suffix`` in the batch: that entry of every record key of the
        batch, in one bulk read (as the runtime prefetches the keys themselves)."""
        self._prefetched.add((var.name, suffix))
        at = {}
        for key in dict.fromkeys(self._batch_keys()):
            if isinstance(key, str) and key:
                with contextlib.suppress(InvalidArgumentError):  # too long: its own read says so
                    at[(var.name, key, suffix)] = checked_key(variable_prefix(key, var.name) + suffix, var.name)
        self._at.update(at)
        self.state.prefetch(at.values())

    def key(self, bound: str | None, var: Variable) -> str:
        key = bound if bound is not None else self.key_of()
        if key is None:
            raise InvalidArgumentError(f"state variable {var.name!r} belongs to a record's key, and this record has "
                                       "none: give the function a key (keyField, or the operator's key column) or "
                                       "name one with .of(key)")
        return key

    def expires(self, var: Variable) -> int | None:
        return None if var.ttl_ms is None else self.now() + var.ttl_ms

    def write(self, state_key: str, payload: bytes, expires: int | None) -> None:
        """Buffer an entry's ``payload`` with its expiry (None: none, see :meth:`expires`), listed in the TTL index."""
        if expires is None:
            self.state.put(state_key, payload)
            return
        self.state.put(state_key, encode_entry(payload, expires))
        assert self._index is not None  # a variable with a TTL is opened only where there is an index
        self._index(state_key, expires)

    def read(self, state_key: str) -> bytes | memoryview | None:
        """An entry's value; None if absent or expired (an expired one is deleted with the batch)."""
        raw = self.state.get(state_key)
        if raw is None or raw[0] != EXPIRING:
            return raw
        payload = entry_payload(raw, self.now())
        if payload is None:
            self.state.put(state_key, None)
        return payload


class _Handle(Generic[T]):
    def __init__(self, scope: Scope, var: Variable, key: str | None = None) -> None:
        self._scope, self._var, self._bound = scope, var, key

    def of(self, key: str) -> Any:
        """This variable of another record key (in the task: with partition-owned state, of its key groups)."""
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"a record key is a non-empty str, not {key!r}")
        return type(self)(self._scope, self._var, key)

    def _prefix(self) -> str:
        return variable_prefix(self._scope.key(self._bound, self._var), self._var.name)


class ValueState(_Handle[T]):
    """One value of the record's key."""

    _memo: tuple[str | None, str] = (None, "")  # (record key, its state key): a record's get, then update

    def _at(self) -> str:
        key = self._bound if self._bound is not None else self._scope.key_of()
        memo = self._memo
        if key is not None and key is memo[0]:
            return memo[1]
        at = self._scope.at(key, self._var, "=")
        self._memo = (key, at)
        return at

    def get(self, default: T | None = None) -> T | None:
        """The value, or ``default`` if there is none (never written, cleared or expired)."""
        at = self._at()
        raw = self._scope.state.get(at)  # Scope.read inlined: once per record in counting functions
        if raw is None:
            return default
        payload = raw if raw[0] != EXPIRING else self._scope.read(at)
        return default if payload is None else self._var.value.decode(payload)

    def exists(self) -> bool:
        return self._scope.read(self._at()) is not None

    def update(self, value: T) -> None:
        """Set the value (its TTL starts again)."""
        var = self._var
        raw = var.value.encode(value)
        if var.ttl_ms is None:
            self._scope.state.put(self._at(), raw)
        else:
            self._scope.write(self._at(), raw, self._scope.expires(var))

    def clear(self) -> None:
        self._scope.state.put(self._at(), None)

    # bulk forms (for process_batch): one read of all the keys
    def get_many(self, keys: Iterable[str], default: T | None = None) -> list[T | None]:
        """The values of ``keys`` (``default`` where there is none), read in one bulk read."""
        handles = [self.of(key) for key in keys]
        at = [h._at() for h in handles]
        self._scope.state.prefetch(at)
        return [h.get(default) for h in handles]

    def update_many(self, keys: Iterable[str], values: Iterable[T]) -> None:
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise InvalidArgumentError(f"update_many: {len(keys)} keys but {len(values)} values")
        writes = [(self.of(key)._at(), self._var.value.encode(value))
                  for key, value in zip(keys, values)]  # every value checked before any is buffered
        expires = self._scope.expires(self._var)
        for at, raw in writes:
            self._scope.write(at, raw, expires)


class ListState(_Handle[T]):
    """A list of the record's key: one entry per element, numbered in append order, and its bounds. Appending
    reads only the bounds, never the elements."""

    def _bounds(self, prefix: str) -> tuple[str, int, int]:
        at = self._scope.at(self._bound, self._var, "#")
        first, end = list_bounds(self._scope.state.get(at), self._scope.now())
        return at, first, end

    def get(self) -> list[T]:
        """The elements, oldest first, without the expired ones."""
        return list(self)

    def __iter__(self) -> Iterator[T]:
        prefix = self._prefix()
        at, first, end = self._bounds(prefix)
        keys = [element_key(prefix, n) for n in range(first, end)]
        state, now, decode = self._scope.state, self._scope.now(), self._var.value.decode
        state.prefetch(keys)
        live = first
        values = []
        for number, key in zip(range(first, end), keys):
            raw = state.get(key)
            payload = None if raw is None else entry_payload(raw, now)
            if payload is None:  # expired (deleted with the batch); at the front, the list starts after it
                if raw is not None:
                    state.put(key, None)
                if live == number:
                    live = number + 1
                continue
            values.append(decode(payload))
        if live != first:  # the bounds keep their expiry (the newest element's)
            state.put(at, encode_entry(encode_bounds(live, end), entry_expiry(state.get(at))) if live < end else None)
        return iter(values)

    def append(self, value: T) -> None:
        self.extend((value,))

    def extend(self, values: Iterable[T]) -> None:
        """Append every value of ``values`` (all checked first), reading only the list's bounds."""
        encode, expires = self._var.value.encode, self._scope.expires(self._var)
        raws = [encode(value) for value in values]
        if not raws:
            return
        prefix = self._prefix()
        at, first, end = self._bounds(prefix)
        write = self._scope.write
        for number, raw in enumerate(raws, end):
            write(element_key(prefix, number), raw, expires)
        write(at, encode_bounds(first, end + len(raws)), expires)  # expires with its newest element

    def replace(self, values: Iterable[T]) -> None:
        """Make the list exactly ``values``."""
        values = list(values)
        for value in values:
            self._var.value.check(value)
        self.clear()
        self.extend(values)

    def clear(self) -> None:
        prefix = self._prefix()
        at, first, end = self._bounds(prefix)
        put = self._scope.state.put
        for number in range(first, end):
            put(element_key(prefix, number), None)
        put(at, None)


class MapState(_Handle[V], Generic[K, V]):
    """A map of the record's key: one entry per map key, so one is read or written without the others;
    ``keys``/``values``/``items`` read the map by a prefix scan, in the order of the keys' codes."""

    def _entry(self, prefix: str, key: K) -> str:
        entries = self._scope.map_entries
        memo = (prefix, key.__class__, key) if key.__class__ in MAP_KEY_TYPES else None  # else unhashable maybe
        at = entries.get(memo) if memo is not None else None
        if at is None:
            assert self._var.key is not None  # a map variable has a key type
            self._var.key.check(key)
            at = checked_key(prefix + "m" + map_key_code(key), f"state variable {self._var.name!r}, map key {key!r}")
            if memo is not None:
                if len(entries) > 100_000:
                    entries.clear()
                entries[memo] = at
        return at

    def get(self, key: K, default: V | None = None) -> V | None:
        payload = self._scope.read(self._entry(self._prefix(), key))
        return default if payload is None else self._var.value.decode(payload)

    def contains(self, key: K) -> bool:
        return self._scope.read(self._entry(self._prefix(), key)) is not None

    __contains__ = contains

    def put(self, key: K, value: V) -> None:
        at = self._entry(self._prefix(), key)
        self._scope.write(at, self._var.value.encode(value), self._scope.expires(self._var))

    def put_all(self, entries: Mapping[K, V]) -> None:
        prefix, expires, encode = self._prefix(), self._scope.expires(self._var), self._var.value.encode
        writes = [(self._entry(prefix, k), encode(v)) for k, v in entries.items()]
        for at, raw in writes:
            self._scope.write(at, raw, expires)

    def remove(self, key: K) -> None:
        self._scope.state.put(self._entry(self._prefix(), key), None)

    def items(self) -> list[tuple[K, V]]:
        """The live entries, by the order of their keys' codes."""
        start = self._prefix() + "m"
        now, decode, state = self._scope.now(), self._var.value.decode, self._scope.state
        out = []
        for state_key, raw in state.scan(start):
            payload = entry_payload(raw, now)
            if payload is None:
                state.put(state_key, None)
                continue
            out.append((decode_map_key(state_key[len(start):]), decode(payload)))
        return out

    def keys(self) -> list[K]:
        return [k for k, _ in self.items()]

    def values(self) -> list[V]:
        return [v for _, v in self.items()]

    def clear(self) -> None:
        start = self._prefix() + "m"
        for state_key, _ in self._scope.state.scan(start):
            self._scope.state.put(state_key, None)
