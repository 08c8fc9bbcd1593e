"""``StateHandleStore``: large state in blob storage, small leader-fenced handles in the metadata store
(after Flink's ``StateHandleStore`` / ``KubernetesStateHandleStore``).

Layout under ``root`` (the store owns these names)::

    ROOT/handles/KEY                  the handle: small JSON pointing to the blob (never the state bytes)
    ROOT/handles/KEY/locks/IDENTITY   ephemeral, one per holder that locked KEY: gone when its session ends
    ROOT/fence, ROOT/fence-sessions/  the leader's claim (see statekeep.handles.fence)
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Mapping
from typing import Any

from statekeep.errors import (
    AlreadyExistsError,
    BadVersionError,
    CorruptStateError,
    ForbiddenError,
    InvalidArgumentError,
    InvalidPathError,
    LeadershipLostError,
    NotEmptyError,
    NotFoundError,
    PossibleInconsistentStateError,
    StatekeepError,
    StoreClosedError,
    StoreUnavailableError,
    UnauthorizedError,
    ValueTooLargeError,
)
from statekeep.handles.blobs import DEFAULT_CHUNK_SIZE, BlobRef, BlobStore, StateSource
from statekeep.handles.fence import Fence, Leadership
from statekeep.handles.handle import StateHandle, check_attributes, decode, encode
from statekeep.metadata.base import Closing, MetadataStore
from statekeep.metadata.types import Check, Delete, GetResult, Op, Put, Stat, validate_path
from statekeep.retry import DEFAULT as RETRY
from statekeep.validate import check_int

log = logging.getLogger(__name__)

# The store said no: nothing was applied, so a blob uploaded for the write can go.
_REFUSED = (BadVersionError, NotFoundError, NotEmptyError, InvalidArgumentError, InvalidPathError,
            ValueTooLargeError, UnauthorizedError, ForbiddenError)
# The outcome is unknown: the write may have been applied, so no blob may go.
_AMBIGUOUS = (StoreUnavailableError, PossibleInconsistentStateError, TimeoutError)


class StateHandleStore(Closing):
    """Keys mapped to large states: each state is a blob, each key's handle a small JSON pointer to it.

    ``blobs`` is a URL (``file:///DIR`` or a plain path; ``s3://BUCKET/PREFIX`` with ``statekeep[s3]``,
    ``blob_options`` going to fsspec) or a :class:`BlobStore`. ``lock_identity`` names this holder's locks
    (unique per process by default). ``leadership``: the :class:`~statekeep.coordination.ResourceLock` of
    the leader; creating the store then claims the root for it (:class:`LeadershipLostError` if not held).
    Without ``leadership`` the store is unfenced: any caller may change handles (single-writer use).
    Creating another fenced store on the same root (even with the same lock) supersedes this one's claim,
    and a store whose leadership ended stays fenced: after winning an election again, create a new store.

    Guarantees:

    - Adding, replacing and removing handles (:meth:`add_and_lock`, :meth:`replace`,
      :meth:`release_and_try_remove`, :meth:`clear_entries`) check the leadership in the same atomic
      ``multi`` as the handle change. A deposed leader's write is never applied: it raises
      :class:`LeadershipLostError` (chained to the store's refusal). Locking and releasing are open to all.
    - States stream in chunks both ways; memory stays bounded whatever their size. The metadata store
      receives only handles. Reads verify size and sha256 (:class:`CorruptStateError`).
    - If the outcome of a metadata write is unknown (store unreachable, timeout, connection lost),
      :class:`PossibleInconsistentStateError` is raised (chained; ``.key`` and ``.blob_url`` set) and no
      blob is deleted. Blobs no handle points to are reclaimed by ``statekeep handles gc``.
    - A blob is never overwritten, and is deleted only once no handle points to it and no other holder
      has its key locked; otherwise it is left for ``gc``.

    Thread-safe. Blob storage failures raise :class:`BlobStorageError`.
    """

    def __init__(self, store: MetadataStore, root_path: str, blobs: str | BlobStore, *,
                 lock_identity: str | None = None, leadership: Leadership | None = None,
                 blob_options: dict[str, Any] | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 max_retries: int = 100) -> None:
        if not isinstance(store, MetadataStore):
            raise InvalidArgumentError(f"StateHandleStore needs a MetadataStore, not {type(store).__name__}")
        self.store = store
        self.root = validate_path(root_path)
        self._handles = f"{self.root.rstrip('/')}/handles"
        self.blobs = blobs if isinstance(blobs, BlobStore) else BlobStore(blobs, options=blob_options,
                                                                         chunk_size=chunk_size)
        self.lock_identity = lock_identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        if not isinstance(self.lock_identity, str) or "/" in self.lock_identity:
            raise InvalidArgumentError(f"lock_identity must be one path segment, got {self.lock_identity!r}")
        validate_path(f"{self._handles}/k/locks/{self.lock_identity}")
        self.max_retries = max_retries
        self._retry = RETRY.bounded(attempts=max_retries)
        self._fence = Fence(store, self.root, leadership)

    # ---- paths ---------------------------------------------------------------------------------

    def _path(self, key: str) -> str:
        if not isinstance(key, str) or not key or "/" in key:
            raise InvalidArgumentError(f"a handle key is one non-empty path segment, got {key!r}")
        try:
            return validate_path(f"{self._handles}/{key}")
        except InvalidPathError as e:
            raise InvalidArgumentError(f"a handle key is one path segment without control characters, "
                                       f"not '.' or '..': got {key!r}") from e

    def _locks(self, key: str) -> str:
        return f"{self._handles}/{key}/locks"

    def _lock(self, key: str) -> str:
        return f"{self._handles}/{key}/locks/{self.lock_identity}"

    # ---- leader writes -------------------------------------------------------------------------

    def add_and_lock(self, key: str, state: StateSource, *,
                     attributes: Mapping[str, Any] | None = None) -> StateHandle:
        """Store ``state`` as a new blob, add a handle for ``key`` pointing to it, and lock it for this holder.

        Raises :class:`AlreadyExistsError` if ``key`` exists, :class:`LeadershipLostError`,
        :class:`PossibleInconsistentStateError` (blob kept), :class:`BlobStorageError`; on a definite
        refusal the new blob is deleted.
        """
        path = self._path(key)
        attrs = check_attributes(attributes)
        self._check_writable()
        ref = self.blobs.write(self.root, key, state)
        ops: list[Op] = [Put(path, encode(ref, attrs), -1), Put(self._locks(key), b"", -1),
                         Put(self._lock(key), b"", -1, ephemeral=True)]
        return self._handle(key, self._write(ops, "add", key, ref)[0], ref, attrs)

    def replace(self, key: str, expected_version: int, state: StateSource, *,
                attributes: Mapping[str, Any] | None = None) -> StateHandle:
        """Point ``key`` to a new blob holding ``state``, if ``key`` is at ``expected_version``; then delete
        the old blob unless another holder has ``key`` locked (it may be reading it; ``gc`` reclaims it later).

        Raises :class:`NotFoundError` if ``key`` is absent, :class:`BadVersionError` on a version mismatch,
        :class:`LeadershipLostError`, :class:`PossibleInconsistentStateError` (both blobs kept).
        """
        path = self._path(key)
        check_int(expected_version, "expected_version", minimum=0)
        attrs = check_attributes(attributes)
        self._check_writable()
        current = self.store.get(path)  # fail before uploading what could not be written anyway
        if current is None:
            raise NotFoundError(f"no state handle {key!r} under {self.root}")
        if current.stat.version != expected_version:
            raise BadVersionError(f"state handle {key!r} is at version {current.stat.version}, not {expected_version}")
        old_url = self._old_blob(key, current)
        ref = self.blobs.write(self.root, key, state)
        stat = self._write([Put(path, encode(ref, attrs), expected_version)], "replace", key, ref)[0]
        if old_url is not None and old_url != ref.url:
            self._discard_unless_locked(key, old_url)
        return self._handle(key, stat, ref, attrs)

    def release_and_try_remove(self, key: str) -> bool:
        """Release this holder's lock on ``key``; if no other holder has it locked, remove the handle and
        delete its blob. Returns True if ``key`` is gone (also if it was absent), False if others hold it.

        Raises :class:`LeadershipLostError` (the lock is still released), :class:`PossibleInconsistentStateError`
        (the removal may have applied; the blob is kept).
        """
        self._path(key)
        try:
            self._check_writable()
        except LeadershipLostError:
            self.release(key)
            raise
        return self._remove(key, force=False)

    def clear_entries(self) -> None:
        """Remove every handle, including those other holders have locked (their locks go too). Blobs of
        handles nobody else had locked are deleted; the others are left for ``gc`` (a holder may be reading).

        Raises :class:`LeadershipLostError`, :class:`PossibleInconsistentStateError` (the blob of the handle
        being removed is kept; handles removed before stay removed).
        """
        self._check_writable()
        for key in self.get_all_handles():
            self._remove(key, force=True)

    # ---- reads and locks (open to any holder) --------------------------------------------------

    def exists(self, key: str) -> int | None:
        """The version of ``key``'s handle, or ``None`` if there is none."""
        current = self.store.get(self._path(key))
        return None if current is None else current.stat.version

    def get_and_lock(self, key: str) -> StateHandle:
        """The handle of ``key``, locked for this holder (the leader cannot remove it underneath until
        :meth:`release`). Raises :class:`NotFoundError`; :class:`CorruptStateError` if it cannot be decoded."""
        path = self._path(key)
        for _ in self._retry.attempts():
            current = self.store.get(path)
            if current is None:
                raise NotFoundError(f"no state handle {key!r} under {self.root}")
            handle = decode(key, current.stat.version, current.value, self.blobs)
            try:  # lock exactly the version read: a replace or removal in between makes us read again
                self.store.multi([Check(path, current.stat.version), Put(self._lock(key), b"", ephemeral=True)])
            except (BadVersionError, NotFoundError):
                continue
            return handle
        raise BadVersionError(f"state handle {key!r} changed {self.max_retries} times while being locked")

    def get_all_and_lock(self) -> list[StateHandle]:
        """Every handle, each locked for this holder, sorted by key. Handles removed meanwhile are left out,
        as are handles that cannot be decoded (logged)."""
        handles = []
        for key in self.get_all_handles():
            try:
                handles.append(self.get_and_lock(key))
            except NotFoundError:
                pass
            except CorruptStateError as e:
                log.warning("skipping state handle %s/%s: %s", self._handles, key, e)
        return handles

    def get_all_handles(self) -> list[str]:
        """The keys of all handles, sorted."""
        return self.store.get_children(self._handles)

    def release(self, key: str) -> None:
        """Release this holder's lock on ``key``; a no-op if not locked."""
        self._path(key)
        with contextlib.suppress(NotFoundError):
            self.store.delete(self._lock(key))

    def release_all(self) -> None:
        """Release this holder's locks on every handle."""
        for key in self.get_all_handles():
            self.release(key)

    def close(self) -> None:
        """Release all locks (best effort) and drop the leader's claim: this store writes no more.
        Does not close the metadata store."""
        try:
            self.release_all()
        except StatekeepError as e:  # the locks go with the session anyway
            log.warning("state handle store %s: locks not released: %s", self.root, e)
        self._fence.release()

    # ---- internals -----------------------------------------------------------------------------

    def _check_writable(self) -> None:
        """Fail before uploading anything if the write cannot succeed anyway."""
        if self.store.closed:
            raise StoreClosedError(f"the metadata store of state handle store {self.root} is closed")
        self._fence.check_local()

    def _write(self, ops: list[Op], what: str, key: str, new_blob: BlobRef | None) -> list[Stat | None]:
        """``ops`` in one ``multi`` after the fence's checks; returns their results (not the checks'). Maps a
        failure to the contract's errors and decides the new blob's fate."""
        fence = self._fence.ops()
        try:
            return self.store.multi([*fence, *ops])[len(fence):]
        except _AMBIGUOUS as e:
            raise self._possibly_written(what, key, new_blob, e) from e
        except _REFUSED as e:
            if new_blob is not None:
                self._discard(new_blob.url)
            error = self._fence.refused(e)
            if error is not e:
                raise error  # LeadershipLostError, chained to e
            if isinstance(e, AlreadyExistsError):
                raise AlreadyExistsError(f"state handle {key!r} already exists under {self.root}") from e
            if what == "replace" and isinstance(e, BadVersionError) and not self.store.exists(self._path(key)):
                # removed since replace() checked: the store reports a BadVersion (PIP-45), replace NotFound
                raise NotFoundError(f"no state handle {key!r} under {self.root} (removed meanwhile)") from e
            raise

    def _possibly_written(self, what: str, key: str, blob: BlobRef | None,
                          cause: Exception) -> PossibleInconsistentStateError:
        kept = f"; blob {blob.url} was kept" if blob is not None else "; its blob was kept"
        error = PossibleInconsistentStateError(
            f"{what} of state handle {key!r} under {self.root} may or may not have been applied ({cause}){kept}. "
            "Check with exists()/get_and_lock(); blobs no handle points to are reclaimed by 'statekeep handles gc'")
        error.key = key  # type: ignore[attr-defined]
        error.blob_url = blob.url if blob is not None else None  # type: ignore[attr-defined]
        return error

    def _remove(self, key: str, *, force: bool) -> bool:
        """Remove ``key``'s handle and its locks; True once it is gone. If another holder has it locked: with
        ``force`` remove it anyway and keep its blob (that holder may be reading it), else release this
        holder's lock and return False."""
        path = self._path(key)
        for _ in self._retry.attempts():
            current = self.store.get(path)
            if current is None:
                return True
            names = self.store.get_children(self._locks(key))  # the identities holding it locked
            holders = names if names or self.store.exists(self._locks(key)) else None  # None: no locks node
            others = bool(set(holders or ()) - {self.lock_identity})
            if others and not force:
                self.release(key)
                return False
            blob_url = self._old_blob(key, current)
            try:
                self._write(self._remove_ops(key, current, holders), "removal", key, None)
            except LeadershipLostError:
                self.release(key)
                raise
            except _REFUSED:
                continue  # locked, replaced or removed meanwhile: read again
            if blob_url is not None and not others:
                self._discard(blob_url)
            return True
        raise BadVersionError(f"state handle {key!r} changed {self.max_retries} times while being removed")

    def _remove_ops(self, key: str, current: GetResult, holders: list[str] | None) -> list[Op]:
        """The given locks and the locks node (if any), then the handle at the version read."""
        locks: list[Op] = []
        if holders is not None:
            locks = [Delete(f"{self._locks(key)}/{name}") for name in holders]
            locks.append(Delete(self._locks(key)))
        return [*locks, Delete(self._path(key), current.stat.version)]

    def _old_blob(self, key: str, current: GetResult) -> str | None:
        try:
            return decode(key, current.stat.version, current.value, None).blob_url
        except StatekeepError:  # an undecodable handle: its blob is unknown, gc decides
            return None

    def _discard_unless_locked(self, key: str, url: str) -> None:
        try:
            others = set(self.store.get_children(self._locks(key))) - {self.lock_identity}
        except StatekeepError as e:
            log.warning("old blob %s of %s kept for gc: %s", url, key, e)
            return
        if others:
            log.info("old blob %s of %s kept for gc: locked by %s", url, key, sorted(others))
        else:
            self._discard(url)

    def _discard(self, url: str) -> None:
        try:
            self.blobs.delete(url)
        except StatekeepError as e:  # an orphan, not a loss: gc reclaims it
            log.warning("blob %s not deleted (gc will reclaim it): %s", url, e)

    def _handle(self, key: str, stat: Stat | None, ref: BlobRef, attrs: dict[str, Any]) -> StateHandle:
        assert stat is not None
        return StateHandle(key, stat.version, ref.url, ref.size, ref.sha256, ref.created_ms, attrs, self.blobs)

    def __repr__(self) -> str:
        return f"StateHandleStore({self.root!r}, blobs={self.blobs.url!r}, identity={self.lock_identity!r})"
