"""The handles a function's Context gives for typed state variables (:mod:`statekeep.state.typed`): value,
list and map state of the record being processed, read and written through the batch's
:class:`~statekeep.state.transaction.KeyedTransaction` (which checks their keys, encodes their entries and
applies their TTL), so their changes commit with the batch's, exactly once.

Every operation works on the current record's key, or on another key's through ``of(key)`` (with
partition-owned state, a key of the task's own key groups). A write sets the entry's expiry to the batch's time
plus the variable's TTL and lists it in the function's TTL index, so the first batch after it deletes the
entry, read or not; a read at or after the expiry finds it absent. Errors: :class:`InvalidArgumentError` for a
value of the wrong type, a record without a key, a state key too long; nothing is buffered by a call that raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

from statekeep.errors import InvalidArgumentError
from statekeep.state.transaction import KeyedTransaction
from statekeep.state.typed import (EXPIRING, Variable, decode_map_key, element_key, encode_bounds, entry_expiry,
                                   list_bounds, variable_prefix)

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


class _Handle(Generic[T]):
    def __init__(self, txn: KeyedTransaction, var: Variable, key: str | None = None) -> None:
        self._txn, self._var, self._bound = txn, var, key

    def of(self, key: str) -> Any:
        """This variable of another record key (in the task: with partition-owned state, of its key groups)."""
        return type(self)(self._txn, self._var, self._txn.scoped(key))

    _bound_prefix: str | None = None  # with .of(key): its prefix

    def _prefix(self) -> str:
        if self._bound is not None:
            prefix = self._bound_prefix
            if prefix is None:
                prefix = self._bound_prefix = variable_prefix(self._bound, self._var.name)
            return prefix
        return variable_prefix(self._txn.record_key(None, self._var), self._var.name)


class ValueState(_Handle[T]):
    """One value of the record's key."""

    _batch: dict[Any, str] | None = None  # the transaction's entries of this variable (record key -> state key)
    _bound_at: str | None = None  # with .of(key): its state key (a get, then an update)

    def _at(self) -> str:
        bound = self._bound
        if bound is not None:
            at = self._bound_at
            if at is None:
                at = self._bound_at = self._txn.at(bound, self._var, "=")
            return at
        batch = self._batch
        if batch is None:
            batch = self._batch = self._txn.entries(self._var, "=")
        key = self._txn.key_of()
        found = batch.get(key)
        return found if found is not None else self._txn.at(key, self._var, "=")

    def get(self, default: T | None = None) -> T | None:
        """The value, or ``default`` if there is none (never written, cleared or expired)."""
        batch = self._batch  # _at's common case inlined (the record's own key, of the batch): once per record
        at = batch.get(self._txn.key_of()) if batch is not None and self._bound is None else None
        if at is None:
            at = self._at()
        raw = self._txn.stored(at)
        if raw is None:
            return default
        payload = raw if raw[0] != EXPIRING else self._txn.payload(at, raw)
        return default if payload is None else self._var.value.decode(payload)

    def exists(self) -> bool:
        return self._txn.read(self._at()) is not None

    def update(self, value: T) -> None:
        """Set the value (its TTL starts again)."""
        var = self._var
        raw = var.value.encode(value)
        expires = self._txn.expires(var)
        if expires is None:
            batch = self._batch  # as in get
            at = batch.get(self._txn.key_of()) if batch is not None and self._bound is None else None
            self._txn.write(at if at is not None else self._at(), raw, None)
        else:
            self._txn.write(self._at(), raw, expires)

    def clear(self) -> None:
        self._txn.remove(self._at())

    # bulk forms (for process_batch): one read of all the keys
    def get_many(self, keys: Iterable[str], default: T | None = None) -> list[T | None]:
        """The values of ``keys`` (``default`` where there is none), read in one bulk read."""
        handles = [self.of(key) for key in keys]
        at = [h._at() for h in handles]
        self._txn.prefetch(at)
        return [h.get(default) for h in handles]

    def update_many(self, keys: Iterable[str], values: Iterable[T]) -> None:
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise InvalidArgumentError(f"update_many: {len(keys)} keys but {len(values)} values")
        writes = [(self.of(key)._at(), self._var.value.encode(value))
                  for key, value in zip(keys, values)]  # every value checked before any is buffered
        expires = self._txn.expires(self._var)
        for at, raw in writes:
            self._txn.write(at, raw, expires)


class ListState(_Handle[T]):
    """A list of the record's key: one entry per element, numbered in append order, and its bounds. Appending
    reads only the bounds, never the elements."""

    def _bounds(self, prefix: str) -> tuple[str, int, int]:
        at = self._txn.at(self._bound, self._var, "#")
        first, end = list_bounds(self._txn.stored(at), self._txn.now())
        return at, first, end

    def get(self) -> list[T]:
        """The elements, oldest first, without the expired ones."""
        return list(self)

    def __iter__(self) -> Iterator[T]:
        prefix = self._prefix()
        at, first, end = self._bounds(prefix)
        txn, payload_of, decode = self._txn, self._txn.payload, self._var.value.decode
        live = first
        values = []
        for number, (key, raw) in zip(range(first, end), txn.elements(prefix, first, end)):
            payload = payload_of(key, raw)
            if payload is None:  # absent or expired (deleted with the batch); at the front, the list starts after it
                if live == number:
                    live = number + 1
                continue
            values.append(decode(payload))
        if live != first and live < end:  # the bounds keep their expiry (the newest element's)
            txn.write(at, encode_bounds(live, end), entry_expiry(txn.stored(at)))
        elif live != first:
            txn.remove(at)
        return iter(values)

    def append(self, value: T) -> None:
        self.extend((value,))

    def extend(self, values: Iterable[T]) -> None:
        """Append every value of ``values`` (all checked first), reading only the list's bounds."""
        encode, expires = self._var.value.encode, self._txn.expires(self._var)
        raws = [encode(value) for value in values]
        if not raws:
            return
        prefix = self._prefix()
        at, first, end = self._bounds(prefix)
        write = self._txn.write
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
        self._txn.remove_elements(prefix, first, end)
        self._txn.remove(at)


class MapState(_Handle[V], Generic[K, V]):
    """A map of the record's key: one entry per map key, so one is read or written without the others;
    ``keys``/``values``/``items`` read the map by a prefix scan, in the order of the keys' codes."""

    _last: tuple[str, Any, str] | None = None  # (prefix, map key, state key) of the last entry (a get, then a put)

    def _entry(self, prefix: str, key: K) -> str:
        last = self._last
        if last is not None and last[1] is key and last[0] == prefix:
            return last[2]
        at = self._txn.map_entry(prefix, self._var, key)
        self._last = (prefix, key, at)
        return at

    def get(self, key: K, default: V | None = None) -> V | None:
        payload = self._txn.read(self._entry(self._prefix(), key))
        return default if payload is None else self._var.value.decode(payload)

    def contains(self, key: K) -> bool:
        return self._txn.read(self._entry(self._prefix(), key)) is not None

    __contains__ = contains

    def put(self, key: K, value: V) -> None:
        at = self._entry(self._prefix(), key)
        self._txn.write(at, self._var.value.encode(value), self._txn.expires(self._var))

    def put_all(self, entries: Mapping[K, V]) -> None:
        prefix, expires, encode = self._prefix(), self._txn.expires(self._var), self._var.value.encode
        writes = [(self._entry(prefix, k), encode(v)) for k, v in entries.items()]
        for at, raw in writes:
            self._txn.write(at, raw, expires)

    def remove(self, key: K) -> None:
        self._txn.remove(self._entry(self._prefix(), key))

    def items(self) -> list[tuple[K, V]]:
        """The live entries, by the order of their keys' codes."""
        start = self._prefix() + "m"
        payload_of, decode = self._txn.payload, self._var.value.decode
        out = []
        for state_key, raw in self._txn.scan(start):
            payload = payload_of(state_key, raw)
            if payload is None:
                continue
            out.append((decode_map_key(state_key[len(start):]), decode(payload)))
        return out

    def keys(self) -> list[K]:
        return [k for k, _ in self.items()]

    def values(self) -> list[V]:
        return [v for _, v in self.items()]

    def clear(self) -> None:
        start = self._prefix() + "m"
        for state_key, _ in self._txn.scan(start):
            self._txn.remove(state_key)
