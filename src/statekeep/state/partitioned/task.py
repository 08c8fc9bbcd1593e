"""What one Spark task sees of partition-owned state: :class:`PartitionTask`, its partition's keys."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError, StateConflictError
from statekeep.retry import DEFAULT
from statekeep.state import records
from statekeep.state.base import validate_batch
from statekeep.state.keygroups import key_group
from statekeep.state.keys import check_keys, check_scan
from statekeep.state.partitioned.manifest import Layout
from statekeep.state.partitioned.partition import Partition, now_ms, write_changes


class PartitionTask:
    """What one Spark task of micro-batch ``batch`` sees: its ``partition`` of ``layout`` (built by
    :meth:`PartitionedStateStore.task <statekeep.state.partitioned.store.PartitionedStateStore.task>`).
    Its marker is the batch: :meth:`has_marker` says whether the partition applied it, and
    :meth:`apply_batch` commits it once (of two attempts, one commits; the other finds it applied).
    Keys outside the partition's key groups raise :class:`InvalidArgumentError`."""

    def __init__(self, partition: Partition, layout: Layout, batch: int, scope: str, max_value_size: int) -> None:
        self.partition, self.layout, self.batch, self.scope = partition, layout, batch, scope
        self.max_value_size = max_value_size
        self.manifest = partition.manifest()
        self._read: dict[bytes, bytes | None] = {}  # key -> version read (None: absent), checked at commit

    def has_marker(self, marker: str) -> bool:
        return self.manifest.batch >= self.batch

    def _check(self, keys: Iterable[str]) -> None:
        low, high = self.manifest.groups
        groups = self.layout.groups
        for key in keys:
            if not low <= key_group(key, groups) < high:
                raise InvalidArgumentError(
                    f"state key {key!r} is not in this partition's key groups: with partition-owned state a record "
                    "reads and writes the state keys of its own key (the function's --key-field value)")

    def fetch_many(self, keys: Iterable[str]) -> dict[str, tuple[bytes | None, int | None]]:
        keys = check_keys(keys)
        self._check(keys)
        self.partition.sync(self.manifest)
        found = self.partition.read(keys)
        out: dict[str, tuple[bytes | None, int | None]] = {}
        for key in keys:
            raw = found.get(key)
            self._read.setdefault(key.encode(), None if raw is None else raw[:8])  # the version read
            entry = None if raw is None else records.decode_entry(key, raw)
            out[key] = (None, None) if entry is None else (entry.value, entry.counter)
        return out

    def scan(self, prefix: str = "") -> Iterator[tuple[str, bytes]]:
        """The partition's keys starting with ``prefix``, in key order (each recorded as read, as
        :meth:`fetch_many` records them)."""
        check_scan(prefix, None, None)
        self.partition.sync(self.manifest)
        for raw_key, raw in self.partition.scan(prefix.encode(), prefix.encode()):
            self._read.setdefault(raw_key, raw[:8])
            entry = records.decode_entry(raw_key.decode(), raw)
            if entry is not None:
                yield entry.key, entry.value

    def apply_batch(self, puts: Mapping[str, bytes | None], counters: Mapping[str, int],
                    marker: str | None = None) -> bool:
        """Commit the batch's changes; False if the partition had applied the batch already.
        :class:`StateConflictError` if another write committed since this task read the state (run the
        batch again)."""
        values, deltas = validate_batch(puts, counters, self.max_value_size)
        self._check([*values, *deltas])
        if self.manifest.batch >= self.batch:
            return False
        db, read = self.partition.state_db, self._read

        def work(txn: Any) -> tuple[None, list[tuple[bytes, bytes]]]:
            get = txn.get
            for raw_key, version in read.items():  # what the batch read must be unchanged (optimistic concurrency)
                raw = get(raw_key, db=db)
                if (None if raw is None else raw[:8]) != version:
                    raise StateConflictError(f"state key {raw_key.decode()!r} changed since the batch read it")
            changes = records.plan_batch(txn.cursor(db=db).get, values, deltas, now_ms())
            write_changes(txn, db, changes)
            return None, changes

        # writes since the read (REST, putstate) that changed none of the keys this batch read leave its
        # result valid: it commits on top of them instead of running again, so a steady writer cannot
        # starve the function; a changed read key raises StateConflictError (the runtime runs it again)
        for _ in DEFAULT.bounded(attempts=50).attempts():
            try:
                self.partition.commit(self.manifest, work, batch=self.batch)
                return True
            except StateConflictError:
                self.manifest = self.partition.manifest()
                if self.manifest.batch >= self.batch:
                    return False  # another attempt of this batch committed first
        raise StateConflictError(f"{self.scope}: batch {self.batch} lost 50 commits in a row to other writes")
