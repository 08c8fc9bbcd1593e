"""One partition's state on this machine: a local LMDB copy of its manifest, and the commit.

The local copy (:class:`Partition`) is a cache, never the truth: it records which manifest lineage
(``id``) and commit (``seq``) it reflects, and before any read or write it catches up with the
manifest the coordination store holds now: the segments after its ``seq`` (cost in proportion to what
it missed), or, when it belongs to another lineage or is older than the snapshot, the snapshot (and
inherited state) plus the segments after it. A commit holds the local write transaction while it
uploads the segment and compare-and-sets the manifest, and commits locally only if the manifest
commit succeeded, so the local copy never runs ahead of the truth; a crash in between leaves it
behind, which the next catch-up repairs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import lmdb

from statekeep.errors import (BadVersionError, CorruptStateError, NotFoundError, PossibleInconsistentStateError,
                              StateConflictError, StatekeepError, StoreUnavailableError)
from statekeep.handles.blobs import BlobStore
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.embedded import prefixed, transaction
from statekeep.state import records
from statekeep.state.partitioned import entries as blobfmt
from statekeep.state.partitioned.manifest import Blob, Manifest
from statekeep.state.partitioned.restore import restore

_U64 = struct.Struct(">Q")
T = TypeVar("T")

#: a snapshot is taken once the entries to replay after the snapshot exceed the state's size (and at
#: least this many), or the manifest lists this many segments: restore stays within twice the state
SNAPSHOT_MIN_ENTRIES = 20_000
MAX_SEGMENTS = 64


class PartitionMovedError(StatekeepError):
    """The layout changed (a rescale): this partition's manifest is retired; read the layout again."""


_envs: dict[str, tuple[int, lmdb.Environment]] = {}
_envs_lock = threading.Lock()


def _open_env(directory: str) -> lmdb.Environment:
    """One environment per directory and process (LMDB refuses to open a file twice in one process)."""
    with _envs_lock:
        found = _envs.get(directory)
        if found is not None and found[0] == os.getpid():
            return found[1]
        os.makedirs(directory, exist_ok=True)
        try:
            # a cache: the truth is in shared storage, so a commit need not wait for the meta page (a
            # power loss may undo the last local commits, which the next catch-up redoes)
            env = lmdb.open(directory, map_size=64 << 30, max_dbs=4, max_readers=512, sync=True, metasync=False,
                            readahead=False)
        except lmdb.Error as e:
            raise StoreUnavailableError(f"cannot open the local state copy at {directory}: {e}") from e
        _envs[directory] = (os.getpid(), env)
        return env


class Partition:
    """The local copy of one partition of one function, and its reads and commits. Thread-safe."""

    def __init__(self, store: MetadataStore, path: str, blobs: BlobStore, scope: str, cache_dir: str,
                 groups: int) -> None:
        self.store, self.path, self.blobs, self.scope, self.groups = store, path, blobs, scope, groups
        self.env = _open_env(cache_dir)
        with transaction(self.env, write=True) as txn:
            self.state_db = self.env.open_db(b"state", txn=txn)
            self.meta_db = self.env.open_db(b"meta", txn=txn)

    # ---- the manifest --------------------------------------------------------------------------

    def manifest(self) -> Manifest:
        """The manifest now. :class:`PartitionMovedError` if this generation was replaced."""
        result = self.store.get(self.path)
        if result is None:
            raise PartitionMovedError(f"{self.path} no longer exists (the function's layout changed or it was deleted)")
        manifest = Manifest.decode(result.value, result.stat.version, self.path)
        if manifest.retired:
            raise PartitionMovedError(f"{self.path} was retired by a rescale")
        return manifest

    # ---- catching up ---------------------------------------------------------------------------

    def local_position(self, txn: Any) -> tuple[str | None, int]:
        lineage = txn.get(b"id", db=self.meta_db)
        raw = txn.get(b"seq", db=self.meta_db)
        return (None if lineage is None else lineage.decode()), (-1 if raw is None else _U64.unpack(raw)[0])

    def sync(self, manifest: Manifest) -> None:
        """Bring the local copy to ``manifest`` (a no-op when it is there or newer: another process on
        this machine committed since ``manifest`` was read, and a commit at ``manifest`` will fail).
        :class:`StateConflictError` if a blob ``manifest`` names was replaced since it was read."""
        with transaction(self.env) as txn:
            lineage, seq = self.local_position(txn)
            if lineage == manifest.id and seq >= manifest.seq:
                return
        with transaction(self.env, write=True) as txn:
            lineage, seq = self.local_position(txn)
            if not (lineage == manifest.id and seq >= manifest.seq):
                self.catch_up(txn, manifest)

    def catch_up(self, txn: Any, manifest: Manifest) -> None:
        """Bring the local copy to exactly ``manifest`` within ``txn``. :class:`StateConflictError` if it
        is newer (``manifest`` is stale: the local copy only ever commits what the manifest committed)
        or a blob ``manifest`` names was replaced since it was read; :class:`CorruptStateError` for a
        blob missing or damaged in the manifest the coordination store holds now."""
        lineage, seq = self.local_position(txn)
        if lineage == manifest.id and seq >= manifest.seq:
            if seq > manifest.seq:
                raise StateConflictError(f"{self.path} committed since it was read")
            return
        try:
            self._catch_up(txn, manifest, lineage, seq)
        except CorruptStateError:
            now = self.store.get(self.path)
            if now is not None and now.stat.version != manifest.version:
                raise StateConflictError(f"{self.path} changed while it was read") from None
            raise

    def _catch_up(self, txn: Any, manifest: Manifest, lineage: str | None, seq: int) -> None:
        after: int | None = seq
        if lineage != manifest.id or seq < (manifest.snapshot.seq if manifest.snapshot else 0) or (
                manifest.parents and seq < 1):
            txn.drop(self.state_db, delete=False)  # another lineage, or too far behind: start from the snapshot
            after = None
        for _, kind, pairs in restore(manifest, self.groups, functools.partial(read_blob, self.blobs), after=after):
            if kind == blobfmt.SNAPSHOT:
                txn.cursor(db=self.state_db).putmulti(pairs)
            else:
                write_changes(txn, self.state_db, list(pairs))
        txn.put(b"id", manifest.id.encode(), db=self.meta_db)
        txn.put(b"seq", _U64.pack(manifest.seq), db=self.meta_db)

    # ---- reads ---------------------------------------------------------------------------------

    def read(self, keys: Iterable[str]) -> dict[str, bytes]:
        """Stored values (version + tagged value) of the present keys, from the local copy as it is."""
        with transaction(self.env, db=self.state_db) as txn:
            get = txn.get
            return {key: raw for key in keys if (raw := get(key.encode())) is not None}

    def scan(self, low: bytes, want: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Stored pairs with keys >= ``low`` that start with ``want``, in key order, from one read snapshot."""
        gate = transaction(self.env, db=self.state_db)
        try:
            yield from prefixed(gate.txn.cursor(), want, low)  # type: ignore[union-attr]
        finally:
            gate.end()

    def count(self) -> int:
        with transaction(self.env) as txn:
            return int(txn.stat(self.state_db)["entries"])

    # ---- commits -------------------------------------------------------------------------------

    def commit(self, manifest: Manifest, work: Callable[[Any], tuple[T, list[tuple[bytes, bytes]]]],
               batch: int | None = None) -> T:
        """Run ``work(txn)`` on the local copy at ``manifest`` (it returns its result and the changed
        ``(key, stored value)`` pairs, already written into ``txn``), write them as a segment and commit
        the manifest conditionally on the version ``manifest`` was read at. Returns ``work``'s result
        once the commit is durable in shared storage and in the coordination store.

        Raises :class:`StateConflictError` if the manifest changed since (nothing committed, the
        segment deleted); :class:`PossibleInconsistentStateError` if the coordination store's answer
        was lost (the segment is kept: it may be committed); a :class:`BlobStorageError` if the upload
        failed. ``work``'s own errors propagate with nothing written."""
        with transaction(self.env, write=True) as txn:  # aborted on any error below
            self.catch_up(txn, manifest)
            result, changes = work(txn)
            if not changes and batch is None:
                return result  # nothing to commit
            segment = None
            if changes:
                ref = self.blobs.write(self.scope, manifest.id, blobfmt.encode(blobfmt.SEGMENT, changes))
                segment = Blob.of(ref, manifest.seq + 1, len(changes))
            updated = manifest.committed(segment, batch)
            try:
                self.store.put(self.path, updated.encode(), expected_version=manifest.version)
            except BadVersionError:
                if segment is not None:
                    self._discard([segment])
                raise StateConflictError(f"{self.path} changed since it was read") from None
            except PossibleInconsistentStateError:
                raise
            except NotFoundError:  # deleted meanwhile (the function was deleted)
                if segment is not None:
                    self._discard([segment])
                raise PartitionMovedError(f"{self.path} no longer exists") from None
            txn.put(b"seq", _U64.pack(updated.seq), db=self.meta_db)
        self._maybe_snapshot(updated, manifest.version + 1)
        return result

    def _discard(self, blobs: list[Blob]) -> None:
        for blob in blobs:
            with contextlib.suppress(StatekeepError):  # garbage collection reclaims it
                self.blobs.delete(blob.url)

    def _maybe_snapshot(self, manifest: Manifest, version: int) -> None:
        """Snapshot the partition when restoring it from its segments would cost more than its size."""
        pending = manifest.since_snapshot
        if len(manifest.segments) < MAX_SEGMENTS and (
                pending < SNAPSHOT_MIN_ENTRIES or pending < self.count()) and not manifest.parents:
            return
        self.snapshot(replace(manifest, version=version))

    def snapshot(self, manifest: Manifest) -> bool:
        """Write a snapshot of the local copy (at ``manifest``) and commit it to the manifest; False if
        the manifest moved meanwhile (nothing changed; the next commit tries again)."""
        with transaction(self.env, db=self.state_db) as txn:
            if self.local_position(txn) != (manifest.id, manifest.seq):
                return False
            pairs = txn.cursor().iternext(keys=True, values=True)
            count = int(txn.stat(self.state_db)["entries"])
            ref = self.blobs.write(self.scope, manifest.id, blobfmt.encode(blobfmt.SNAPSHOT, pairs))
        updated = manifest.with_snapshot(Blob.of(ref, manifest.seq, count))
        try:
            self.store.put(self.path, updated.encode(), expected_version=manifest.version)
        except (BadVersionError, NotFoundError):
            self._discard([updated.snapshot])  # type: ignore[list-item]
            return False
        # the replaced blobs of this lineage go; inherited ones are shared with the generation's other
        # partitions, so garbage collection frees them once no manifest names them
        self._discard([b for b in [manifest.snapshot, *manifest.segments] if b is not None])
        return True


def read_blob(blobs: BlobStore, blob: Blob) -> bytes:
    """The bytes of ``blob``, its size and sha256 checked (:class:`CorruptStateError` if missing or damaged)."""
    with blobs.open(blob.url, blob.size, blob.sha256) as reader:
        data: bytes = reader.read()
        return data


def write_changes(txn: Any, db: Any, changes: list[tuple[bytes, bytes]]) -> None:
    """Apply planned changes (or a segment's: each key at most once) to the local copy."""
    puts = []
    for key, value in changes:
        if value[8] == records.TOMBSTONE_TAG:
            txn.delete(key, db=db)
        else:
            puts.append((key, value))
    if puts:
        txn.cursor(db=db).putmulti(puts)


def now_ms() -> int:
    return int(time.time() * 1000)
