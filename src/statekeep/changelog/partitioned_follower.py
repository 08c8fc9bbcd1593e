"""Followers of partition-owned state (:mod:`statekeep.state.partitioned`): what :meth:`FollowerStore.open`
returns when the function's state provider is ``partitioned``. Same public API and contract as
:class:`~statekeep.changelog.follower.FollowerStore` (reads from the follower's own ``local_dir`` copy,
subsets through :class:`~statekeep.changelog.view.FollowerView`, writes refused, a deleted function
:class:`NotFoundError`); only the way it follows differs, since such state has no single changelog:
each partition's changelog is its manifest's segments in shared storage.

How it follows (one poll every ``poll_interval``):

- It reads the layout and each partition's manifest from the coordination store (one small read each)
  and, in ONE write to the local copy (:class:`PartitionedReplica`, a :class:`LocalReplica`), applies per
  partition the entries of the segments committed after the ``seq`` it applied, and records every
  partition's position, ``{generation, key groups, [(manifest id, seq) per partition]}`` (the replica's
  meta ``P+k``): a follower killed at any moment resumes exactly where its last write ended.
- A partition whose snapshot covers commits it has not applied (it fell behind, or a snapshot replaced
  the segments while it read them) is rebuilt in place: in that same one write, the copy's keys of the
  partition's key groups are deleted and its snapshot (or inherited state filtered by its key groups,
  as :class:`~statekeep.state.partitioned.partition.Partition` restores it) and the segments after it
  are written. Readers see the copy before or after, never a mix. (Finding those keys reads the
  copy's keys once per such write: its cost follows the copy's size, which follows the subset.)
- A rescale (a new generation of the layout) and the first start (or a copy built for another view,
  or an interrupted bootstrap) re-bootstrap the whole copy: every partition's snapshot, inherited
  state and segments are written into a NEW generation of the local copy in chunks of
  ``restore_chunk``, which one write then makes the active one with the positions. Readers keep the
  previous complete copy until then. An interrupted bootstrap starts over (it does not resume).
  Rebuilding after a rescale costs the whole state once: the new partitions snapshot at their first
  commit and delete the segments a follower could have applied instead.
- A subset (``key_prefix``, ``key_filter``, ``transform``) applies while materializing: entries outside
  the view are not written (from a snapshot, decoding stops after the prefix's range), so the copy's
  size and the write time follow the subset (blobs are still read whole: their sha256 is checked).

Status:

- ``lag``: entries in the segments not yet applied, summed over the partitions (for a partition to
  rebuild, or all of them before a bootstrap or after a rescale: every entry of the blobs it needs).
  ``applied_offset``: the newest of the partitions' applied changelog offsets, as the leader's
  ``changelog_position().last_offset`` counts them.
- ``wait_until_caught_up(timeout)``: True once every commit made before the call is applied (a poll
  that started after the call read every manifest and applied everything they name).
- Deleted: the registry entry gone (when the follower knows the registry), the layout gone after the
  follower adopted it, or a lineage that is not the one it follows (a partition's manifest id changed
  in its generation, or the generation it follows is no longer there as the retired predecessor of a
  rescale): reads, ``lag`` and ``wait_until_caught_up`` raise :class:`NotFoundError`.
- A blob that is missing or damaged while the manifest naming it is still the one the coordination
  store holds: the follower keeps serving its last copy and retries (a later snapshot may replace the
  blob); ``status()["error"]`` and ``wait_until_caught_up`` (raises) report it as
  :class:`CorruptStateError` naming the blob and the manifest. The same failure while the manifest
  changed is a race with a snapshot: the next poll reads again.
"""

from __future__ import annotations

import json
import logging
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from statekeep import jsonrecords
from statekeep.changelog.follower import FollowerStore
from statekeep.changelog.replica import LocalReplica, Op, write_ops
from statekeep.errors import CorruptRecordError, CorruptStateError, InvalidArgumentError, NotFoundError
from statekeep.metadata.embedded import transaction
from statekeep.state import records
from statekeep.state.base import Capability, ChangelogPosition, StateStore
from statekeep.state.keygroups import key_group
from statekeep.state.partitioned.manifest import Blob, Layout, Manifest, manifest_name
from statekeep.state.partitioned.partition import PartitionMovedError, read_blob
from statekeep.state.partitioned.changelog import PartitionedChangelog, epoch_of, partition_position
from statekeep.state.partitioned.restore import restore

log = logging.getLogger(__name__)

_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")


@dataclass(frozen=True)
class Positions:
    """Where the local copy is: per partition of layout ``generation``, the manifest (lineage) ``id`` and
    the ``seq`` it applied. ``gen`` is the replica generation they describe (positions of another one
    are ignored)."""

    gen: int
    generation: int
    groups: int
    partitions: tuple[tuple[str, int], ...]
    last: int = -1  # the newest changelog offset applied (the leader's changelog_position().last_offset)

    @classmethod
    def of(cls, gen: int, layout: Layout, manifests: list[Manifest]) -> Positions:
        last = max((partition_position(m, "").last_offset for m in manifests), default=-1)
        return cls(gen, layout.generation, layout.groups, tuple((m.id, m.seq) for m in manifests), last)

    @property
    def epoch(self) -> str:
        return epoch_of(self.generation, self.partitions[0][0])  # the leader's changelog_position().epoch

    def encode(self) -> bytes:
        return json.dumps({"gen": self.gen, "generation": self.generation, "groups": self.groups,
                           "partitions": [list(p) for p in self.partitions], "last": self.last}).encode()

    @classmethod
    def decode(cls, raw: bytes, where: str) -> Positions:
        """:class:`CorruptRecordError` naming ``where`` if ``raw`` is not one."""
        return jsonrecords.decode(raw, where, "follower position", lambda d: cls(
            int(d["gen"]), int(d["generation"]), int(d["groups"]),
            tuple((str(i), int(s)) for i, s in d["partitions"]), int(d.get("last", -1))))


class PartitionedReplica(LocalReplica):
    """A :class:`LocalReplica` that also keeps the per-partition positions (meta key ``P+k``), written in
    the same write as the entries they account for, and applies raw stored values (the blobs' entries
    are already the replica's format: ``version + tagged value``)."""

    def positions(self) -> Positions | None:
        with transaction(self._env, db=self._meta) as txn:
            raw = txn.get(self._p + b"k")
        try:
            return None if raw is None else Positions.decode(raw, self._where("k"))
        except CorruptRecordError as e:
            log.warning("%s: bootstrapping the copy again", e)
            return None

    def _put_position(self, txn: Any, positions: Positions) -> None:
        p, meta = self._p, self._meta
        txn.put(p + b"k", positions.encode(), db=meta)
        txn.put(p + b"a", _I64.pack(positions.last), db=meta)
        txn.put(p + b"e", positions.epoch.encode(), db=meta)

    def apply_ops(self, positions: Positions, ops: list[Op], clear: tuple[int, frozenset[int]] | None = None) -> None:
        """In one write, to the active generation ``positions.gen``: delete every key whose key group
        (of ``clear = (groups, key groups)``) is in the set, apply ``ops`` in order, record ``positions``."""
        prefix = self._p + _U64.pack(positions.gen)

        def work(txn: Any) -> None:
            state = self._state
            if clear is not None:
                groups, dirty = clear
                cursor = txn.cursor(db=state)
                found = cursor.set_range(prefix)
                while found and (key := cursor.key()).startswith(prefix):
                    found = cursor.delete() if key_group(key[len(prefix):].decode(), groups) in dirty else cursor.next()
            write_ops(txn, state, prefix, ops)
            self._put_position(txn, positions)

        self._submit(work)


class _Changed(Exception):
    """The layout or a manifest changed while a poll read them: the next poll reads again."""


class PartitionedFollowerStore(FollowerStore):
    """See the module docstring. Built by :meth:`FollowerStore.open`."""

    replica_type = PartitionedReplica
    replica: PartitionedReplica

    def __init__(self, leader: StateStore, replica: LocalReplica, **options: Any) -> None:
        leader.require(Capability.PARTITIONED, "a follower of partition-owned state reads its partitions' manifests")
        if not isinstance(replica, PartitionedReplica):
            raise InvalidArgumentError("a follower of partition-owned state keeps a PartitionedReplica")
        options.pop("snapshots", None)  # partition-owned state keeps its snapshots in its manifests
        super().__init__(leader, replica, **options)
        #: the leader's partitions, as a store declaring Capability.PARTITIONED offers them
        self.state = cast(PartitionedChangelog, leader)
        self._positions = self._load_positions()
        self._blob_error: CorruptStateError | None = None  # of the last poll, and when that poll started
        self._blob_error_at = float("-inf")

    def _load_positions(self) -> Positions | None:
        meta = self._meta
        if meta.gen is None or meta.restore is not None:
            return None
        positions = self.replica.positions()
        return positions if positions is not None and positions.gen == meta.gen else None

    def _check_leader(self, position: ChangelogPosition | None) -> None:
        """:class:`NotFoundError` if the registry entry is gone, or (given the leader's position) its
        partition-owned state is gone after this follower adopted it."""
        if position is not None and position.epoch is None and self._positions is not None:
            raise self._deleted("its partition-owned state is gone")
        self._check_registry()

    # ---- one poll ------------------------------------------------------------------------------

    def step(self) -> int:
        """One poll (see the module docstring). Returns how many entries it wrote to the local copy."""
        meta = self._meta
        if meta.restore is not None:  # a bootstrap was interrupted: it starts over
            self.replica.abandon_restore()
            self._meta = meta = self.replica.load()
            self._positions = None
        if meta.garbage and self.replica.collect_garbage(meta.garbage):
            meta.garbage = []
        started = time.monotonic()
        try:
            applied = self._poll()
        except _Changed:
            return 0  # raced with a commit, a snapshot or a rescale: read again
        except CorruptStateError as e:
            with self._cond:
                self._blob_error, self._blob_error_at = e, started
                self._cond.notify_all()
            raise
        self._blob_error = None
        with self._cond:
            self._phase = "tailing"
            self._caught_up_at = started  # everything committed before `started` is applied
            self._cond.notify_all()
        return applied

    def _poll(self) -> int:
        self._check_registry()
        layout = self.state.layout(refresh=True)
        positions = self._positions
        if layout is None:
            if positions is not None:
                raise self._deleted("its partition-owned state is gone")
            return 0  # nothing was written yet
        try:
            manifests = self.state.manifests(layout)
        except PartitionMovedError:
            raise _Changed() from None  # rescaled or deleted while read
        if positions is None:
            return self._rebuild(layout, manifests)
        if layout.groups != positions.groups or layout.generation < positions.generation:
            raise self._deleted(f"its state was reset (layout generation {positions.generation} -> "
                                f"{layout.generation})")
        if layout.generation > positions.generation:  # a rescale, unless the lineage followed is gone
            self._check_predecessors(positions)
            log.info("follower of %s: rescaled to %d partitions (generation %d); rebuilding the copy",
                     self._fqfn, layout.parallelism, layout.generation)
            return self._rebuild(layout, manifests)
        if len(manifests) != len(positions.partitions):
            raise self._deleted("its layout changed within a generation")
        for manifest, (lineage, _) in zip(manifests, positions.partitions):
            if manifest.id != lineage:
                raise self._deleted(f"its state was reset (partition {manifest.partition} is another lineage)")
        return self._advance(layout, manifests, positions)

    def _check_predecessors(self, positions: Positions) -> None:
        """After a rescale, the manifests of the generation this follower followed are kept, retired:
        if they are gone or are another lineage, the function was deleted (and created again)."""
        for p, (lineage, _) in enumerate(positions.partitions):
            path = f"{self.state.root}/{manifest_name(positions.generation, p)}"
            found = self.state.store.get(path)
            if found is None or Manifest.decode(found.value, found.stat.version, path).id != lineage:
                raise self._deleted(f"its state was reset (generation {positions.generation} is gone)")

    def _advance(self, layout: Layout, manifests: list[Manifest], positions: Positions) -> int:
        """Apply what each partition committed since its position, in one write."""
        ops: list[Op] = []
        dirty: set[int] = set()
        rebuilt: list[int] = []
        changed: list[records.ChangelogRecord] | None = [] if self.on_apply is not None else None
        for manifest, (_, seq) in zip(manifests, positions.partitions):
            if manifest.seq == seq:
                continue
            snapshot_seq = manifest.snapshot.seq if manifest.snapshot else 0
            if manifest.seq < seq or snapshot_seq > seq:  # behind its snapshot: rebuild the partition
                dirty.update(range(*manifest.groups))
                ops += self._ops(layout, manifest)
                rebuilt.append(manifest.partition)
                continue
            ops += self._ops(layout, manifest, after=seq, changed=changed)
        updated = Positions.of(positions.gen, layout, manifests)
        if updated == positions:
            return 0
        if rebuilt:
            log.info("follower of %s: partition(s) %s behind their snapshot: rebuilt in place", self._fqfn, rebuilt)
        self.replica.apply_ops(updated, ops, (layout.groups, frozenset(dirty)) if dirty else None)
        self._positions = updated
        self._meta.applied, self._meta.epoch = updated.last, updated.epoch
        if changed:
            assert self.on_apply is not None
            self.on_apply(changed)
        return max(1, len(ops))

    def _rebuild(self, layout: Layout, manifests: list[Manifest]) -> int:
        """Write every partition's state into a new generation of the copy, then switch to it."""
        with self._cond:
            self._phase = "restoring"
            self._restored = 0
        progress = self.replica.begin_restore({"source": "partitioned", "generation": layout.generation})
        try:
            if not self._write_generation(progress, (op for m in manifests for op in self._ops(layout, m))):
                raise _Changed()  # stopping: the next start bootstraps again
        except BaseException:
            self.replica.abandon_restore()
            self._meta = self.replica.load()
            raise
        positions = Positions.of(progress["gen"], layout, manifests)
        self.replica.finish_restore(positions.gen, positions.last, positions.epoch, {b"k": positions.encode()})
        self._meta = self.replica.load()
        self._positions = positions
        return max(1, int(progress["written"]))

    # ---- reading blobs -------------------------------------------------------------------------

    def _where(self, layout: Layout, manifest: Manifest) -> tuple[str, int]:
        return f"{self.state.root}/{manifest_name(layout.generation, manifest.partition)}", manifest.version

    def _read(self, blob: Blob, where: tuple[str, int]) -> bytes:
        """The bytes of ``blob`` (size and sha256 checked). ``where``: the manifest that names it and the
        version it was read at. A missing or damaged blob is a race with a snapshot, a rescale or a
        delete if that manifest changed since (:class:`_Changed`), else :class:`CorruptStateError`
        naming the blob and the manifest."""
        try:
            return read_blob(self.state.blobs, blob)
        except CorruptStateError as e:
            path, version = where
            found = self.state.store.get(path)
            if found is None or found.stat.version != version:
                raise _Changed() from None
            raise CorruptStateError(f"{e} (named by the partition manifest {path}, unchanged since it was "
                                    "read)") from e

    def _ops(self, layout: Layout, manifest: Manifest, after: int | None = None,
             changed: list[records.ChangelogRecord] | None = None) -> Iterator[Op]:
        """The changes to the local copy that bring a copy of ``manifest``'s partition at commit ``after``
        (None: nothing) to it, in order (:func:`~statekeep.state.partitioned.restore.restore`), for the
        keys in the follower's view (rewritten by its transform); ``changed`` collects the leader's
        records of those keys."""
        where = self._where(layout, manifest)
        view = self.view
        for _, _, pairs in restore(manifest, layout.groups, lambda blob: self._read(blob, where), after=after,
                                   key_prefix=view.prefix_bytes):
            if view.everything and changed is None:
                for key, value in pairs:
                    yield key, None if value[records.TAG_AT] == records.TOMBSTONE_TAG else value
            else:
                yield from self._selected(pairs, changed)

    def _selected(self, pairs: Iterator[tuple[bytes, bytes]], changed: list[records.ChangelogRecord] | None
                  ) -> Iterator[Op]:
        view = self.view
        for key, value in pairs:
            record = records.entry_record(key, value)
            if not view.matches(record.key):
                continue
            if changed is not None:
                changed.append(record)
            if record.value is not None and view.transform is not None:
                (record,) = view.records([record])  # its value None: the transform left the key out
                if record.value is not None:
                    value = records.entry_bytes(record.version, record.kind, record.value)
            yield key, None if record.value is None else value

    # ---- status --------------------------------------------------------------------------------

    @property
    def lag(self) -> int:
        """Entries in the segments not yet applied, summed over the partitions (see the module docstring)."""
        self._raise_if_failed()
        return lag(self.state, self._positions)

    def _raise_if_failed(self, since: float | None = None) -> None:
        """Also, waiting (``since`` the call): :class:`CorruptStateError` (naming the blob) when a poll
        that started after the call could not go on because a blob is missing or damaged (the
        follower keeps retrying)."""
        super()._raise_if_failed()
        error = self._blob_error
        if since is not None and error is not None and self._blob_error_at >= since:
            raise CorruptStateError(str(error))

    def status(self) -> dict[str, Any]:
        out = super().status()
        positions = self._positions
        if self._blob_error is not None and out["error"] is None:
            out["error"] = str(self._blob_error)
        out["partitions"] = None if positions is None else {
            "generation": positions.generation, "seqs": [seq for _, seq in positions.partitions]}
        return out


def lag(state: PartitionedChangelog, positions: Positions | None) -> int:
    """Entries of ``state``'s blobs a copy at ``positions`` has not applied (see
    :attr:`PartitionedFollowerStore.lag`). :class:`NotFoundError` if the state is gone since."""
    layout = state.layout(refresh=True)
    if layout is None:
        if positions is not None:
            raise NotFoundError(f"function {state.scope} was deleted: its partition-owned state is gone")
        return 0
    total = 0
    for p, manifest in enumerate(state.manifests(layout)):
        whole = sum(b.entries for b in manifest.blobs())
        if positions is None or positions.generation != layout.generation or p >= len(positions.partitions):
            total += whole
            continue
        lineage, seq = positions.partitions[p]
        snapshot_seq = manifest.snapshot.seq if manifest.snapshot else 0
        if lineage != manifest.id or snapshot_seq > seq:
            total += whole
        else:
            total += sum(s.entries for s in manifest.segments if s.seq > seq)
    return total


PartitionedFollowerStore.follow_with(Capability.PARTITIONED)  # no single changelog: its manifests and segments
