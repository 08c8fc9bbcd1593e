"""Function snapshots: a function's whole state, streamed into blob storage as a state handle.

    snapshots = SnapshotStore(store, "file:///var/lib/statekeep/blobs")
    info = snapshots.create(state)                  # SnapshotInfo(number=3, offset=41, ...)
    snapshots.list("public", "default", "wc")       # oldest first
    snapshots.restore(state, info)                  # the state becomes the snapshot's

Layout: the handles of ``T/N/F`` live in a :class:`~statekeep.handles.StateHandleStore` rooted at
``ROOT/T/N/F`` (default root ``/statekeep/snapshots``), one handle ``snapshot-<10 digits>`` per
snapshot, numbered by :meth:`CoordinationService.next_counter_value` on ``ROOT/T/N/F/counter``. Each
handle's attributes carry what the snapshot covers: ``offset`` (every changelog record at or below it
is in the snapshot), ``epoch`` (the incarnation of the function's state; a snapshot of another epoch
is ignored by followers), ``purged`` and ``format``. Blobs go where ``blobs`` points: by default
``DIR/blobs`` for a ``local://DIR`` store. A blob is a snapshot in the one format of state blobs
(:mod:`statekeep.state.partitioned.entries`, format 2); snapshots of format 1 are still read.

Guarantees: ``create`` holds the leadership ``ROOT/T/N/F/leader`` while it adds the handle (one
snapshot writer at a time per function; handle writes are fenced by it). Consistency of what a
snapshot holds: on the embedded provider the entries and the offset come from one LMDB read
transaction (exact); on the metadata provider the offset is read first and the scan may include
later changes, which is harmless because replaying the changelog from the offset sets every key it
touches to its newest absolute value. Readers lock the handle while they read it, so a snapshot being
read is never deleted underneath them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from statekeep.coordination import CoordinationService
from statekeep.errors import CorruptStateError, InvalidArgumentError, StatekeepError
from statekeep.handles import BlobStore, StateHandleStore
from statekeep.handles.handle import decode as decode_handle
from statekeep.metadata.base import MetadataStore
from statekeep.state import records
from statekeep.state.base import StateEntry, StateStore
from statekeep.state.catalog import FunctionCatalog
from statekeep.state.partitioned import entries

DEFAULT_ROOT = "/statekeep/snapshots"
FORMAT = 2  # 1: the legacy format, still read
PREFIX = "snapshot-"


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot of ``tenant/namespace/name``: its handle ``key`` and number, the changelog
    ``offset`` and ``epoch`` it covers, the blob's ``size`` and when it was written."""

    tenant: str
    namespace: str
    name: str
    key: str
    number: int
    offset: int
    epoch: str | None
    purged: int
    size: int
    created_ms: int
    blob_url: str

    def to_json(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "namespace": self.namespace, "name": self.name, "snapshot": self.number,
                "key": self.key, "offset": self.offset, "epoch": self.epoch, "purgedOffset": self.purged,
                "size": self.size, "createdMs": self.created_ms, "blob": self.blob_url}


def default_blobs(store: MetadataStore) -> str | None:
    """Where snapshots of ``store`` keep blobs by default: ``DIR/blobs`` of a store in a local directory."""
    directory = getattr(store, "directory", None)  # a store in a local directory (local://), not a scheme
    if not isinstance(directory, (str, os.PathLike)):
        return None
    return f"file://{os.path.join(os.fspath(directory), 'blobs')}"


class SnapshotStore:
    """Snapshots of function state in ``store`` (handles) and ``blobs`` (bytes); see the module docstring.
    ``blobs`` may be None for a reader: blob URLs are absolute in the handles. Thread-safe."""

    def __init__(self, store: MetadataStore, blobs: str | BlobStore | None = None, *, root: str = DEFAULT_ROOT,
                 leader_timeout: float = 60.0, blob_options: dict[str, Any] | None = None) -> None:
        self.store = store
        self.root = root.rstrip("/")
        self.leader_timeout = leader_timeout
        blobs = default_blobs(store) if blobs is None else blobs
        self.writable = blobs is not None
        self._blobs = blobs if isinstance(blobs, BlobStore) else None
        self._blobs_spec = (blobs or "file:///", blob_options)

    @property
    def blobs(self) -> BlobStore:
        """The blob storage, created on first use: listing snapshots needs no fsspec, reading or writing
        one does (:class:`MissingDependencyError` naming ``statekeep[blobs]`` without it)."""
        if self._blobs is None:
            url, options = self._blobs_spec
            self._blobs = url if isinstance(url, BlobStore) else BlobStore(url, options=options)
        return self._blobs

    def _root(self, tenant: str, namespace: str, name: str) -> str:
        return FunctionCatalog(self.store, self.root).path(tenant, namespace, name)  # the same naming rule

    # ---- writing -------------------------------------------------------------------------------

    def create(self, state: StateStore) -> SnapshotInfo:
        """Snapshot ``state`` now (streamed: memory stays bounded). Raises :class:`InvalidArgumentError`
        without a blob URL, :class:`LeadershipLostError`, :class:`PossibleInconsistentStateError`
        (the blob is kept), :class:`TimeoutError` if another snapshot writer holds the leadership."""
        if not self.writable:
            raise InvalidArgumentError("snapshots need blob storage: give a blobs URL (e.g. file:///var/lib/blobs)")
        blobs = self.blobs  # a missing fsspec fails here, before anything is written
        root = self._root(state.tenant, state.namespace, state.name)
        with self._leadership(root, "snapshot") as (coord, lock):
            number = coord.next_counter_value(root + "/counter")
            view = state.read_all()
            pos = view.position
            attributes = {"format": FORMAT, "offset": pos.last_offset, "epoch": pos.epoch, "purged": pos.purged_offset}
            key = f"{PREFIX}{number:010d}"
            pairs = ((e.key.encode(), records.entry_bytes(e.version, e.kind, e.value)) for e in view.entries)
            with StateHandleStore(self.store, root, blobs, leadership=lock) as handles:
                handles.add_and_lock(key, entries.encode(entries.SNAPSHOT, pairs), attributes=attributes)
                handles.release(key)  # the writer keeps no lock: gc may remove it later
        info = self.get(state.tenant, state.namespace, state.name, number)
        assert info is not None
        return info

    def remove_older(self, tenant: str, namespace: str, name: str, keep: int = 2) -> list[int]:
        """Remove all but the ``keep`` newest snapshots (those a reader has locked stay until it is
        done); returns the numbers removed."""
        if keep < 1:
            raise InvalidArgumentError("keep at least one snapshot")
        root = self._root(tenant, namespace, name)
        old = self.list(tenant, namespace, name)[:-keep]
        if not old:
            return []
        blobs = self.blobs  # before the leadership: a missing fsspec changes nothing
        with (self._leadership(root, "snapshot-gc") as (_, lock),
              StateHandleStore(self.store, root, blobs, leadership=lock) as handles):
            return [info.number for info in old if handles.release_and_try_remove(info.key)]

    @contextlib.contextmanager
    def _leadership(self, root: str, who: str) -> Iterator[tuple[CoordinationService, Any]]:
        """The snapshot writers' leadership of ``root`` (one at a time per function), held for the block;
        :class:`TimeoutError` after ``leader_timeout``."""
        with CoordinationService(self.store) as coord:
            lock = coord.become_leader(root + "/leader", f"{who}-{os.getpid()}".encode()).result(self.leader_timeout)
            with lock:
                yield coord, lock

    # ---- reading -------------------------------------------------------------------------------

    def list(self, tenant: str, namespace: str, name: str) -> list[SnapshotInfo]:
        """The function's snapshots, oldest first (unreadable handles are left out)."""
        handles = f"{self._root(tenant, namespace, name)}/handles"
        infos = (self._info(tenant, namespace, name, handles, key) for key in self.store.get_children(handles))
        return [info for info in infos if info is not None]

    def get(self, tenant: str, namespace: str, name: str, number: int) -> SnapshotInfo | None:
        handles = f"{self._root(tenant, namespace, name)}/handles"
        return self._info(tenant, namespace, name, handles, f"{PREFIX}{number:010d}")

    def newest(self, tenant: str, namespace: str, name: str, epoch: str | None = None) -> SnapshotInfo | None:
        """The newest snapshot (of ``epoch`` if given), or None."""
        for info in reversed(self.list(tenant, namespace, name)):
            if epoch is None or info.epoch == epoch:
                return info
        return None

    def _info(self, tenant: str, namespace: str, name: str, handles: str, key: str) -> SnapshotInfo | None:
        if not key.startswith(PREFIX) or not key[len(PREFIX):].isdigit():
            return None
        current = self.store.get(f"{handles}/{key}")
        if current is None:
            return None
        try:
            h = decode_handle(key, current.stat.version, current.value, None)
            a = h.attributes
            return SnapshotInfo(tenant, namespace, name, key, int(key[len(PREFIX):]), int(a["offset"]),
                                a.get("epoch"), int(a.get("purged", -1)), h.size, h.created_ms, h.blob_url)
        except (CorruptStateError, KeyError, TypeError, ValueError):
            return None

    @contextlib.contextmanager
    def open(self, info: SnapshotInfo, *,
             key_prefix: str = "") -> Iterator[tuple[dict[str, Any], Iterator[StateEntry]]]:
        """``(header, entries)`` of a snapshot, its handle locked until the block ends: ``header`` holds
        its ``offset``, ``epoch``, ``purged`` and ``format``; the entries are in key order. The entries
        iterator raises :class:`CorruptStateError` where the stream breaks, at the latest at its end
        (checksum): act on what it yielded only once it is exhausted. :class:`NotFoundError` if gone.
        With ``key_prefix``, only the entries whose key starts with it (the others are not decoded;
        see :mod:`~statekeep.state.partitioned.entries`)."""
        handles = StateHandleStore(self.store, self._root(info.tenant, info.namespace, info.name), self.blobs)
        try:
            handle = handles.get_and_lock(info.key)
            with handle.open() as reader:
                pairs = entries.decode(entries.SNAPSHOT, reader.read, f"snapshot {info.key} ({info.blob_url})",
                                       key_prefix=key_prefix.encode("utf-8"))
                yield dict(handle.attributes), _entries(pairs)
        finally:
            with contextlib.suppress(StatekeepError):  # the lock goes with the session anyway
                handles.release(info.key)

    def verify(self, info: SnapshotInfo) -> int:
        """Read the whole snapshot, checking it; returns its number of entries."""
        with self.open(info) as (_, entries):
            return sum(1 for _ in entries)

    def restore(self, state: StateStore, info: SnapshotInfo) -> int:
        """Make ``state`` exactly the snapshot's (see :meth:`StateStore.replace_state`: one transaction on
        the embedded provider, batches elsewhere), each change with its changelog record so followers
        see it. The snapshot is verified whole first, so a corrupt one changes nothing. Returns the
        number of keys changed."""
        self.verify(info)
        with self.open(info) as (_, entries):
            return state.replace_state(entries)


def _entries(pairs: Iterator[tuple[bytes, bytes]]) -> Iterator[StateEntry]:
    for key, raw in pairs:
        try:
            name = key.decode()
        except UnicodeDecodeError as e:
            raise CorruptStateError(f"a snapshot entry has a key that is not UTF-8: {key!r}") from e
        yield records.decode_entry(name, raw)
