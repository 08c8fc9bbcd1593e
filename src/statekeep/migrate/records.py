"""The records a migration moves, in the one order every source produces and every sink consumes.

A copy is a stream of records: every :class:`Node` of the metadata tree (depth first, children in
sorted order, so each parent comes before its children), then :class:`Sequence` counters, then per
registered function one :class:`Function` followed by its state's :class:`Entry` records in key
order. :class:`Skipped` records (ephemeral keys) may appear among the nodes; sinks ignore them. The
order is fully determined by the source's content, so a resumed copy can skip the records a previous
run committed by counting them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple, Union

from statekeep.state.records import Kind, StateEntry


class Node(NamedTuple):
    """A persistent key of the metadata tree and its raw value."""

    path: str
    value: bytes


class Skipped(NamedTuple):
    """A key that is not copied, and why (``"ephemeral"``: it belongs to a live session of the source)."""

    path: str
    reason: str


class Sequence(NamedTuple):
    """A parent's sequential counter: sequential keys created under ``parent`` on the target must get
    numbers greater than ``last``."""

    parent: str
    last: int


class Function(NamedTuple):
    """A registered function. ``state`` is ``"copied"`` (its state follows as :class:`Entry` records:
    it lives in the source store, with the source's default provider ``provider``) or ``"external"``
    (its configuration names a provider of its own, whose state stays where it is)."""

    tenant: str
    namespace: str
    name: str
    state: str
    provider: str

    @property
    def fqfn(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"


class Entry(NamedTuple):
    """One state key of the function before it: ``kind`` ``"bytes"`` or ``"counter"`` (``value`` then
    holds the counter's 8-byte big-endian form)."""

    key: str
    kind: Kind
    value: bytes


Record = Union[Node, Skipped, Sequence, Function, Entry]


class Peekable:
    """A record iterator with one record of look-ahead; ``next()`` and ``peek()`` give None at the end."""

    def __init__(self, records: Iterable[Record]) -> None:
        self._it = iter(records)
        self._next: Record | None = None
        self._has = False

    def peek(self) -> Record | None:
        if not self._has:
            self._next, self._has = next(self._it, None), True
        return self._next

    def next(self) -> Record | None:
        record = self.peek()
        self._has = False
        return record

    def entries(self) -> Iterator[StateEntry]:
        """The :class:`Entry` records that come next (consumed) as state entries of version 0, up to the
        next record of another kind (not consumed)."""
        while isinstance(record := self.peek(), Entry):
            self._has = False
            yield StateEntry(record.key, record.value, record.kind, 0)
