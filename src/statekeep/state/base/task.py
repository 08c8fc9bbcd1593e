"""What a Spark task sees of a function's state: :class:`TaskState`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol


class TaskState(Protocol):
    """All the runtime sees of a function's state: that of one Spark task, the (batch, partition)
    :meth:`StateStore.task` returns. Per-key stores are their own one-partition task (any key);
    partition-owned state gives each partition its own (its key groups' keys only).

    - ``fetch_many``: read many keys at once (``{key: (value or None, counter or None)}``).
    - ``has_marker(marker)``: whether this (batch, partition) was applied.
    - ``scan(prefix)``: ``(key, value)`` of the keys starting with ``prefix``, in key order (of the task's own
      key groups: typed variables' maps, whose entries are all in their record key's group).
    - ``apply_batch(puts, counters, marker)``: commit the changes, their changelog records and the
      marker in one atomic write: True (applied), False (already applied: nothing written), or
      :class:`StateConflictError` (state the task read changed since: nothing written, run it again)."""

    max_value_size: int

    def has_marker(self, marker: str) -> bool: ...

    def fetch_many(self, keys: Iterable[str]) -> dict[str, tuple[bytes | None, int | None]]: ...

    def scan(self, prefix: str = "") -> Iterator[tuple[str, bytes]]: ...

    def apply_batch(self, puts: Mapping[str, bytes | None], counters: Mapping[str, int],
                    marker: str | None = None) -> bool: ...
