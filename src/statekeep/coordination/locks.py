"""``ResourceLock``: a lock held as an ephemeral key, with expiry detection.

A lock is one ephemeral key whose value is the holder's content. It is held as long as that key
exists, belongs to this store's session and still has the version this handle wrote; everything
else (the session ended, someone deleted or overwrote the key) means the lock is lost, and
``expired`` completes. Only the :class:`~statekeep.coordination.CoordinationService` creates locks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING

from statekeep.errors import (
    BadVersionError,
    InvalidArgumentError,
    LockLostError,
    NotFoundError,
    StoreClosedError,
    StoreUnavailableError,
)
from statekeep.metadata.types import GetResult, Stat

if TYPE_CHECKING:
    from statekeep.metadata.base import MetadataStore

log = logging.getLogger(__name__)

_HELD, _RELEASED, _EXPIRED = "held", "released", "expired"


def check_content(content: object) -> bytes:
    """``content`` as bytes, or :class:`InvalidArgumentError` for any other type."""
    if not isinstance(content, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"lock content must be bytes, not {type(content).__name__}")
    return bytes(content)


class ResourceLock:
    """A held lock: an ephemeral key at :attr:`path` holding :attr:`content`. Thread-safe.

    Guarantees:

    - While :attr:`expired` is not done and :meth:`release` was not called, the key at ``path`` was,
      at the last check, this session's ephemeral key at :attr:`version` with :attr:`content`.
      Checks happen on every notification for ``path``, after every session event and on a slow
      timer; writes that need fencing should also ``Check(lock.path, lock.version)`` in a ``multi``.
    - :attr:`expired` completes (with ``None``) once the lock is known lost: the session ended, or the
      key was deleted or overwritten by someone else. :meth:`release` never completes it.
    - :meth:`update_content` is a compare-and-set on the key's version; :class:`LockLostError` if the
      lock is lost or released (nothing is written then).
    - :meth:`release` is idempotent and never deletes a key that is not this lock's.
    - A context manager: ``with coord.acquire_lock(...) as lock:`` releases it on leaving the block.
    """

    def __init__(self, store: MetadataStore, path: str, content: bytes, stat: Stat,
                 on_done: Callable[[ResourceLock], None]) -> None:
        self._store = store
        self._path = path
        self._content = content
        self._version = stat.version
        # An update whose reply was lost: (version, content) it would have produced if applied.
        self._pending: tuple[int, bytes] | None = None
        self._state = _HELD
        self._mutex = threading.Lock()
        self._expired: Future[None] = Future()
        self._on_done = on_done  # unregisters the lock from its service

    @property
    def path(self) -> str:
        return self._path

    @property
    def content(self) -> bytes:
        return self._content

    @property
    def version(self) -> int:
        """Version of the lock key as this handle last wrote it (for fencing with ``Check``)."""
        return self._version

    @property
    def expired(self) -> Future[None]:
        """Completes when the lock is lost; not by :meth:`release`. Callbacks run on a
        coordination thread and must not block for long."""
        return self._expired

    @property
    def held(self) -> bool:
        """True until the lock is released or known to be lost (its store closed counts as lost)."""
        return self._state == _HELD and not self._store.closed

    def update_content(self, content: bytes) -> None:
        """Replace the lock's content by compare-and-set on its version.

        Raises :class:`LockLostError` if the lock was released or lost (then nothing is written),
        :class:`InvalidArgumentError` for non-bytes, :class:`StoreUnavailableError` if the store
        could not be reached (the update may or may not have applied; the lock is re-checked later).
        """
        content = check_content(content)
        with self._mutex:
            if self._state != _HELD:
                raise LockLostError(f"lock {self._path} was {self._state}")
            try:
                # learn whether an earlier update whose outcome was unknown applied
                if self._pending is not None and not self._matches(self._store.get(self._path)):
                    raise NotFoundError("lost before this update")
                stat = self._store.put(self._path, content, expected_version=self._version)
                self._version, self._content, self._pending = stat.version, content, None
                return
            except (BadVersionError, NotFoundError, StoreClosedError) as e:  # BadVersion also when the key is gone
                self._state = _EXPIRED
                error = e
            except StoreUnavailableError:
                self._pending = (self._version + 1, content)
                raise
        self._finish(expired=True)
        raise LockLostError(f"lock {self._path} is lost") from error

    def release(self) -> None:
        """Delete the lock key if it is still this lock's; a no-op if already released or lost.

        Raises :class:`StoreUnavailableError` if the store could not be reached: the lock is then
        still held (it goes with the session at the latest) and ``release`` may be called again.
        """
        with self._mutex:
            if self._state != _HELD:
                return
            try:
                if self._pending is not None and not self._matches(self._store.get(self._path)):
                    raise NotFoundError("lost before release")
                self._store.delete(self._path, expected_version=self._version)
                self._state = _RELEASED
            except (BadVersionError, NotFoundError):
                self._state = _EXPIRED  # someone else's key now: leave it alone
            except StoreClosedError:
                self._state = _RELEASED  # the session is over, and the ephemeral key with it
        self._finish(expired=self._state == _EXPIRED)

    # ---- used by the CoordinationService ------------------------------------------------------

    def _revalidate(self) -> bool | None:
        """Check the key against this lock; mark expired if it is no longer ours.
        Returns True (held), False (lost or released), None (store unreachable: unknown)."""
        with self._mutex:
            if self._state != _HELD:
                return False
            try:
                current = self._store.get(self._path)
            except StoreClosedError:
                current = None
            except StoreUnavailableError:
                return None
            if self._matches(current):
                return True
            self._state = _EXPIRED
        log.info("lock %s lost (key deleted, overwritten or its session ended)", self._path)
        self._finish(expired=True)
        return False

    def _expire(self) -> None:
        """Mark lost without asking the store (its session is known to have ended)."""
        with self._mutex:
            if self._state != _HELD:
                return
            self._state = _EXPIRED
        self._finish(expired=True)

    def _matches(self, current: GetResult | None) -> bool:
        """Is ``current`` this lock's key? Adopts a pending update that turns out applied."""
        if current is None or not current.stat.ephemeral or not current.stat.created_by_self:
            return False
        if current.stat.version == self._version and current.value == self._content:
            return True
        if self._pending is not None and (current.stat.version, current.value) == self._pending:
            self._version, self._content = self._pending
            self._pending = None
            return True
        return False

    def _finish(self, *, expired: bool) -> None:
        # Outside the mutex: future callbacks may call back into this lock.
        self._on_done(self)
        if expired and not self._expired.done():
            self._expired.set_result(None)

    def __enter__(self) -> ResourceLock:
        return self

    def __exit__(self, *exc: object) -> None:
        """Releases the lock (see :meth:`release`; a lost lock is left alone)."""
        self.release()

    def __repr__(self) -> str:
        return f"ResourceLock({self._path!r}, version={self._version}, {self._state})"
