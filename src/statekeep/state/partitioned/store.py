"""The function-level store of partition-owned state: what the REST API, the CLI, the console and
followers read and write (see the package docstring; Spark tasks go through :mod:`.task`)."""

from __future__ import annotations

import contextlib
import functools
import heapq
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from statekeep.errors import (AlreadyExistsError, BadVersionError, CorruptStateError, InvalidArgumentError,
                              StateConflictError)
from statekeep.handles.blobs import BlobStore
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.types import Put
from statekeep.retry import DEFAULT
from statekeep.state import records
from statekeep.state.base import (BatchLimits, Capability, ChangelogPosition, CompactionResult, EntryStateStore,
                                  StateEntry, check_partition, validate_batch)
from statekeep.state.keygroups import group_range, key_group, owner, validate_layout
from statekeep.state.keys import check_scan, encode_key
from statekeep.state.partitioned.changelog import CAPABILITIES, SEQ_SHIFT, epoch_of, partition_position
from statekeep.state.partitioned.manifest import Layout, Lineage, Manifest, function_path, manifest_name
from statekeep.state.partitioned.partition import Partition, PartitionMovedError, now_ms, read_blob, write_changes
from statekeep.state.partitioned.restore import restore
from statekeep.state.partitioned.task import PartitionTask

T = TypeVar("T")


class PartitionedStateStore(EntryStateStore):
    """One function's partition-owned state, as the REST API, the CLI and the console see it: reads
    answer the latest committed value (each read checks the owning partition's manifest and brings
    the local copy up to it); writes commit to the owning partition like a micro-batch does, ordered
    with the function's batches (a batch that read the state before a write commits nothing and is
    run again). Spark tasks use :meth:`task`.

    Its changelog has one position per partition of the current layout (:meth:`read_partition_changelog`,
    :meth:`partition_position`): partition ``p``'s records are the entries of the segments its manifest
    names, in commit order, offset ``seq << 32 | index`` (:data:`SEQ_SHIFT`). A snapshot replaces the
    segments it covers (``purged_offset``); a rescale starts a new epoch (:func:`epoch_of`) whose
    partitions start empty of records (their inherited state is behind their ``purged_offset``).
    :meth:`read_changelog` is partition 0's while there is one partition (refused with more: use the
    per-partition reads); :meth:`changelog_position` is the newest of the partitions' positions.
    Capabilities: no markers on the store itself (a batch's marker is its partition's, through
    :meth:`task`) and no ``compact_changelog`` (snapshots compact it as it runs)."""

    provider_name = "partitioned"
    capabilities = CAPABILITIES

    def __init__(self, store: MetadataStore, blobs: BlobStore, tenant: str, namespace: str, name: str, *,
                 key_groups: int, cache_dir: str) -> None:
        """The state of ``tenant/namespace/name``: its manifests in ``store``, its blobs in ``blobs``, its
        local copies under ``cache_dir``; ``key_groups`` for a layout it creates (see
        :class:`~statekeep.state.partitioned.provider.PartitionedStateProvider`)."""
        super().__init__(tenant, namespace, name)
        self.store, self.blobs = store, blobs
        self.key_groups, self.cache_dir = key_groups, cache_dir
        self.root = function_path(tenant, namespace, name)
        self.scope = f"{tenant}/{namespace}/{name}"
        self.max_value_size = min(self.max_value_size, 64 << 20)
        self._layout: Layout | None = None
        self._partitions: dict[str, Partition] = {}
        self._lock = threading.Lock()

    # ---- layout --------------------------------------------------------------------------------

    def layout(self, refresh: bool = False) -> Layout | None:
        """The key groups and partitions now (None until the state is first written)."""
        if self._layout is None or refresh:
            result = self.store.get(f"{self.root}/layout")
            self._layout = None if result is None else Layout.decode(result.value, result.stat.version, self.root)
        return self._layout

    def ensure_layout(self, parallelism: int) -> Layout:
        """The layout, created with ``parallelism`` partitions if the state has none yet."""
        layout = self.layout(refresh=True)
        if layout is not None:
            return layout
        groups, parallelism = validate_layout(self.key_groups, parallelism)
        new = Layout(groups, parallelism, 0)
        ops = [Put(f"{self.root}/layout", new.encode(), expected_version=-1)]
        ops += [Put(f"{self.root}/{manifest_name(0, p)}", Manifest.new(0, p, group_range(p, parallelism, groups))
                    .encode(), expected_version=-1) for p in range(parallelism)]
        with contextlib.suppress(AlreadyExistsError, BadVersionError):  # another writer created it first
            self.store.multi(ops)
        layout = self.layout(refresh=True)
        assert layout is not None
        return layout

    def manifests(self, layout: Layout, partitions: Iterable[int] | None = None) -> list[Manifest]:
        """The manifests of ``partitions`` (default: all) of ``layout``, as the store holds them now."""
        out = []
        for p in range(layout.parallelism) if partitions is None else partitions:
            path = f"{self.root}/{manifest_name(layout.generation, p)}"
            result = self.store.get(path)
            if result is None:
                raise PartitionMovedError(f"{path} no longer exists")
            out.append(Manifest.decode(result.value, result.stat.version, path))
        return out

    def partitioning(self, parallelism: int, *, prepare: bool = True) -> tuple[int, int]:
        """``(key groups, parallelism this micro-batch runs with)``; see :meth:`prepare_batch`. Without
        ``prepare``: the layout as it stands (no layout is created, nothing rescaled), or before the
        state's first write the one the first batch creates."""
        layout = self.layout(refresh=True)
        if not prepare:
            return (layout.groups, layout.parallelism) if layout else validate_layout(self.key_groups,
                                                                                      parallelism)
        return (layout.groups if layout else self.key_groups), self.prepare_batch(parallelism)

    def prepare_batch(self, parallelism: int) -> int:
        """Called by the driver before each micro-batch: the parallelism this batch runs with. Creates
        the layout, and rescales to ``parallelism`` when the partitions stand at one batch (a rescale
        never splits a batch: a batch some partitions applied and others not is finished first, with
        the parallelism it started with)."""
        layout = self.ensure_layout(parallelism)
        if layout.parallelism == parallelism:
            return parallelism
        current = self.manifests(layout)
        if len({m.batch for m in current}) != 1:
            return layout.parallelism
        self.rescale(layout, current, parallelism)
        return parallelism

    def rescale(self, layout: Layout, current: list[Manifest], parallelism: int) -> None:
        """Replace the partitions of ``layout`` by ``parallelism`` new ones in one atomic write: the old
        manifests are retired (a task still running with them commits nothing), each new partition
        inherits the state of the old ones whose key groups it takes over."""
        groups, parallelism = validate_layout(layout.groups, parallelism)
        generation = layout.generation + 1
        ops = [Put(f"{self.root}/{manifest_name(layout.generation, m.partition)}",
                   replace(m, retired=True).encode(), expected_version=m.version) for m in current]
        for p in range(parallelism):
            wanted = group_range(p, parallelism, groups)
            # each old partition's inherited lineages, narrowed to the groups it owned: a lineage two old
            # partitions inherited is then the truth of disjoint groups in each, never applied twice
            parents = tuple(Lineage((max(lineage.groups[0], m.groups[0]), min(lineage.groups[1], m.groups[1])),
                                    lineage.snapshot, lineage.segments)
                            for m in current if m.groups[0] < wanted.stop and wanted.start < m.groups[1]
                            for lineage in (*m.parents, m.lineage()))
            manifest = Manifest.new(generation, p, wanted, current[0].batch, parents)
            ops.append(Put(f"{self.root}/{manifest_name(generation, p)}", manifest.encode(), expected_version=-1))
        ops.append(Put(f"{self.root}/layout", Layout(groups, parallelism, generation).encode(),
                       expected_version=layout.version))
        self.store.multi(ops)
        self.layout(refresh=True)

    def partition(self, layout: Layout, p: int) -> Partition:
        name = manifest_name(layout.generation, p)
        with self._lock:
            found = self._partitions.get(name)
            if found is None:
                cache = os.path.join(self.cache_dir, self.tenant, self.namespace, self.name, name)
                found = self._partitions[name] = Partition(self.store, f"{self.root}/{name}", self.blobs, self.scope,
                                                           cache, layout.groups)
            return found

    def _owner_of(self, key: str) -> tuple[Partition, Manifest] | None:
        """The partition owning ``key`` and its manifest now, its local copy brought up to it; None
        while the state has no layout (nothing was ever written)."""
        for attempt in DEFAULT.bounded(attempts=5).attempts():
            layout = self.layout(refresh=attempt > 0)
            if layout is None:
                return None
            partition = self.partition(layout, owner(key_group(key, layout.groups), layout.parallelism, layout.groups))
            try:
                manifest = partition.manifest()
                partition.sync(manifest)
                return partition, manifest
            except (PartitionMovedError, StateConflictError):
                continue  # rescaled, or committed since read: read the layout and manifest again
        raise StateConflictError(f"the state of {self.scope} kept changing under 5 reads")

    # ---- reads ---------------------------------------------------------------------------------

    def get_entry(self, key: str) -> StateEntry | None:
        encode_key(key)
        found = self._owner_of(key)
        if found is None:
            return None
        raw = found[0].read([key]).get(key)
        return None if raw is None else records.decode_entry(key, raw)

    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        check_scan(prefix, start_after, limit)
        return self._scan(prefix, start_after, limit)

    def _scan(self, prefix: str, start_after: str | None, limit: int | None) -> Iterator[StateEntry]:
        layout = self.layout(refresh=True)
        if layout is None:
            return
        low = prefix.encode()
        if start_after is not None and start_after.encode() >= low:
            low = start_after.encode() + b"\0"
        streams = []
        for p in range(layout.parallelism):
            partition = self.partition(layout, p)
            partition.sync(partition.manifest())
            streams.append(partition.scan(low, prefix.encode()))
        for produced, (key, raw) in enumerate(heapq.merge(*streams)):
            if limit is not None and produced >= limit:
                return
            yield records.decode_entry(key.decode(), raw)

    def changelog_partitions(self) -> int:
        layout = self.layout(refresh=True)
        return 1 if layout is None else layout.parallelism

    def read_changelog(self, after: int = -1, limit: int | None = None) -> list[records.ChangelogRecord]:
        partitions = self.changelog_partitions()
        if partitions != 1:
            raise InvalidArgumentError(f"{self.scope} has {partitions} partitions, each with its own changelog "
                                       "offsets: read them with read_partition_changelog(partition, after)")
        return self.read_partition_changelog(0, after, limit)

    def read_partition_changelog(self, partition: int, after: int = -1,
                                 limit: int | None = None) -> list[records.ChangelogRecord]:
        """Partition ``partition``'s records with offset > ``after``, in its commit order (see the class
        docstring), read from the segments its manifest names now."""
        for attempt in DEFAULT.bounded(attempts=5).attempts():
            layout = self.layout(refresh=attempt > 0)
            if layout is None:
                check_partition(partition, 1)
                return []
            check_partition(partition, layout.parallelism)
            path = f"{self.root}/{manifest_name(layout.generation, partition)}"
            found = self.store.get(path)
            if found is None:
                continue  # rescaled meanwhile
            out: list[records.ChangelogRecord] = []
            manifest = Manifest.decode(found.value, found.stat.version, path)
            try:  # the segments from the commit holding offset `after` on
                for segment, _, pairs in restore(manifest, layout.groups, functools.partial(read_blob, self.blobs),
                                                 after=(after >> SEQ_SHIFT) - 1):
                    base = segment.seq << SEQ_SHIFT
                    for index, (key, value) in enumerate(pairs):
                        if base + index > after:
                            out.append(records.entry_record(key, value, base + index))
                            if limit is not None and len(out) >= limit:
                                return out
            except CorruptStateError:
                now = self.store.get(path)
                if now is None or now.stat.version != found.stat.version:
                    continue  # a snapshot replaced the segment while it was read
                raise
            return out
        raise StateConflictError(f"the changelog of {self.scope} kept changing under 5 reads")

    def partition_position(self, partition: int) -> ChangelogPosition:
        layout = self.layout(refresh=True)
        if layout is None:
            check_partition(partition, 1)
            return ChangelogPosition(None, -1)
        check_partition(partition, layout.parallelism)
        first, manifest = self.manifests(layout, (0, partition))
        return partition_position(manifest, epoch_of(layout.generation, first))

    def changelog_position(self) -> ChangelogPosition:
        """Epoch: the layout's generation and incarnation (:func:`epoch_of`); the offsets: the newest of
        the partitions' (partition 0's position while there is one)."""
        layout = self.layout(refresh=True)
        if layout is None:
            return ChangelogPosition(None, -1)
        manifests = self.manifests(layout)
        found = [partition_position(m, "") for m in manifests]
        return ChangelogPosition(epoch_of(layout.generation, manifests[0]), max(p.last_offset for p in found),
                                 max(p.compacted_offset for p in found), max(p.purged_offset for p in found))

    def count_changelog(self, after: int = -1) -> int:
        """Counted from the manifests' segment sizes (no segment is read)."""
        layout = self.layout(refresh=True)
        if layout is None:
            return 0
        count = 0
        for segment in (s for m in self.manifests(layout) for s in m.segments):
            base = segment.seq << SEQ_SHIFT
            count += max(0, min(segment.entries, base + segment.entries - 1 - after))
        return count

    # ---- writes (REST, CLI) ---------------------------------------------------------------------

    def _write(self, key: str, work: Callable[[Callable[[bytes], bytes | None]], tuple[T, list[tuple[bytes, bytes]]]]
               ) -> T:
        """Commit ``work`` (given the stored value of ``key``) to ``key``'s partition; retried while
        batches or other writers commit first."""
        encode_key(key)
        for _ in DEFAULT.bounded(seconds=30).attempts():
            found = self._owner_of(key)
            if found is None:
                self.ensure_layout(1)
                continue
            partition, manifest = found

            def run(txn: Any) -> tuple[T, list[tuple[bytes, bytes]]]:
                result, changes = work(lambda raw_key: txn.get(raw_key, db=partition.state_db))
                write_changes(txn, partition.state_db, changes)
                return result, changes

            try:
                return partition.commit(manifest, run)
            except (StateConflictError, PartitionMovedError):
                continue
        raise StateConflictError(f"state key {key!r} of {self.scope}: lost every race for 30 s")

    def _write_key(self, key: str, expected: int | None, values: Mapping[str, bytes | None],
                   deltas: Mapping[str, int]) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        def work(get: Callable[[bytes], bytes | None]) -> tuple[tuple[bytes | None, list[tuple[bytes, bytes]]],
                                                                list[tuple[bytes, bytes]]]:
            raw, changes = self._plan_key(get, key, expected, values, deltas, now_ms())
            return (raw, changes), changes

        return self._write(key, work)

    def apply_batch(self, puts: Mapping[str, bytes | None], counters: Mapping[str, int],
                    marker: str | None = None) -> bool:
        """Atomic per partition (keys of one partition commit together); a ``marker`` is refused
        (:class:`UnsupportedCapabilityError`: no :attr:`Capability.MARKERS`): a batch of a Spark task
        goes through :meth:`task`."""
        if marker is not None:
            self.require(Capability.MARKERS, f"{self.scope}'s batch markers are per partition, through task()")
        values, deltas = validate_batch(puts, counters, self.max_value_size)
        layout = self.layout(refresh=True) or self.ensure_layout(1)
        by_partition: dict[int, tuple[dict[str, bytes | None], dict[str, int]]] = {}
        for key in dict.fromkeys([*values, *deltas]):
            p = owner(key_group(key, layout.groups), layout.parallelism, layout.groups)
            part_values, part_deltas = by_partition.setdefault(p, ({}, {}))
            if key in values:
                part_values[key] = values[key]
            if key in deltas:
                part_deltas[key] = deltas[key]
        for part_values, part_deltas in by_partition.values():
            self._write_key(next(iter([*part_values, *part_deltas])), None, part_values, part_deltas)
        return True

    def has_marker(self, marker: str) -> bool:
        self.require(Capability.MARKERS, f"{self.scope}'s batch markers are per partition, through task()")
        return False  # not reached: the capability is absent

    @property
    def batch_limits(self) -> BatchLimits:
        return BatchLimits(max_keys=1 << 30, max_bytes=1 << 40)

    def compact_changelog(self, upto_offset: int, tombstone_retention_s: float, *,
                          now_ms: int | None = None) -> CompactionResult:
        """Refused (:class:`UnsupportedCapabilityError`): snapshots compact partition-owned state as it runs."""
        self.require(Capability.COMPACTION, f"snapshots compact {self.scope} as it runs")
        return CompactionResult(0, 0, 0, upto_offset)  # not reached: the capability is absent

    def task(self, batch: int, partition: int, parallelism: int) -> PartitionTask:
        """Partition ``partition`` of ``parallelism`` in micro-batch ``batch``. :class:`PartitionMovedError` if
        the state has another number of partitions."""
        layout = self.ensure_layout(parallelism)
        if layout.parallelism != parallelism:
            raise PartitionMovedError(f"{self.scope} has {layout.parallelism} partitions, this task runs one of "
                                      f"{parallelism}")
        return PartitionTask(self.partition(layout, partition), layout, batch, self.scope, self.max_value_size)

    # ---- housekeeping ---------------------------------------------------------------------------

    def collect_garbage(self, older_than_s: float = 600.0) -> int:
        """Delete blobs no manifest names (left by crashed or fenced writers, or replaced by a rescale)
        that are older than ``older_than_s``; returns how many."""
        layout = self.layout(refresh=True)
        wanted = set()
        if layout is not None:
            wanted = {b.url for m in self.manifests(layout) for b in m.blobs()}
        cutoff = now_ms() - older_than_s * 1000
        removed = 0
        for info in self.blobs.list(self.scope):
            if info.url not in wanted and info.written_ms < cutoff and self.blobs.delete(info.url):
                removed += 1
        return removed

    def cleanup(self) -> None:
        self.store.delete_recursive(self.root)
        self.blobs.delete_scope(self.scope)
        with self._lock:
            self._partitions.clear()
        self._layout = None
