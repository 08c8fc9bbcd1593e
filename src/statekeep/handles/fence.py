"""Leader fencing of a handle store's writes.

``Check(lock.path, lock.version)`` alone is not a fence: a lock's version restarts at 0 each time it is
created, so a deposed leader whose lock was version 0 would pass the check against its successor's fresh
lock (version 0 too). So a leader first *claims* the handle store's root, in one atomic operation that
also checks its lock:

- ``ROOT/fence`` (persistent) is overwritten with the claimer's token: its version rises with every claim,
  so every earlier claimer's ``Check(ROOT/fence, its version)`` fails from then on;
- ``ROOT/fence-sessions/TOKEN`` is created as an ephemeral key of the claimer's session, with a token
  never used again: once that session ends (expiry, crash, close) the key is gone for good, even before
  a successor has claimed.

Every fenced write then carries three checks in its own ``multi``: the lock at its version, the fence at
the claimed version and the session key. A deposed leader fails at least one of them whatever it believes
locally. What remains open is only the moment between a successor taking the lock and claiming the root
(done when its ``StateHandleStore`` is created) while the deposed leader's session is still alive
(its lock key was deleted by someone else): a write landing then is ordered before the successor's claim,
so the successor reads it as if it had been written just before the handover.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Protocol

from statekeep import jsonrecords
from statekeep.errors import (
    BadVersionError,
    InvalidArgumentError,
    LeadershipLostError,
    NotFoundError,
    PossibleInconsistentStateError,
    StatekeepError,
    StoreUnavailableError,
)
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.types import Check, Put, Stat, validate_path

log = logging.getLogger(__name__)

FENCE = "fence"
FENCE_SESSIONS = "fence-sessions"


class Leadership(Protocol):
    """What fencing needs of a leadership: a :class:`~statekeep.coordination.ResourceLock` is one."""

    @property
    def path(self) -> str: ...

    @property
    def version(self) -> int: ...


class Fence:
    """The leadership check of one handle store; ``leadership=None`` makes an open (unfenced) store.

    ``leadership`` is a :class:`~statekeep.coordination.ResourceLock` or any object with ``path`` and
    ``version`` (and optionally ``held``/``expired`` for a fast local check).
    Raises :class:`LeadershipLostError` if the lock is not held at claim time.
    """

    def __init__(self, store: MetadataStore, root: str, leadership: Leadership | None) -> None:
        self.store = store
        self.leadership = leadership
        self.fence_path = f"{root.rstrip('/')}/{FENCE}"
        self.token = uuid.uuid4().hex
        self.session_path = f"{root.rstrip('/')}/{FENCE_SESSIONS}/{self.token}"
        self.epoch: int | None = None
        self.released = False
        if leadership is None:
            return
        lock_path = getattr(leadership, "path", None)
        if not isinstance(lock_path, str) or not isinstance(getattr(leadership, "version", None), int):
            raise InvalidArgumentError("leadership must be a ResourceLock (an object with .path and .version)")
        validate_path(lock_path, allow_root=False)
        for reserved in (self.fence_path, self.session_path.rpartition("/")[0]):
            if lock_path == reserved or lock_path.startswith(reserved + "/"):
                raise InvalidArgumentError(f"the leadership lock {lock_path} is inside the handle store's {reserved}")
        self.check_local()
        self.epoch = self._claim()

    def _claim(self) -> int:
        lock = self.leadership
        assert lock is not None  # only claimed with a leadership
        record = json.dumps({"token": self.token, "lock": lock.path, "claimed_ms": int(time.time() * 1000)}).encode()
        try:
            stats: list[Stat | None] = self.store.multi([
                Check(lock.path, lock.version),
                Put(self.fence_path, record),
                Put(self.session_path, b"", expected_version=-1, ephemeral=True),
            ])
        except (BadVersionError, NotFoundError) as e:
            raise LeadershipLostError(f"cannot claim the handle store: leadership {lock.path} at version "
                                      f"{lock.version} is not held") from e
        except (StoreUnavailableError, PossibleInconsistentStateError) as e:
            current = self.store.get(self.fence_path)  # did the claim apply? then it is ours
            if current is None or jsonrecords.decode(current.value or b"{}", self.fence_path,
                                                     "handle store fence").get("token") != self.token:
                raise StoreUnavailableError(f"could not claim the handle store ({e}); try again") from e
            return current.stat.version
        stat = stats[1]
        assert stat is not None
        return stat.version

    def ops(self) -> list[Check]:
        """The checks to put first in every fenced ``multi`` (none for an open store)."""
        if self.leadership is None:
            return []
        assert self.epoch is not None  # claimed in __init__ with a leadership
        return [Check(self.leadership.path, self.leadership.version), Check(self.fence_path, self.epoch),
                Check(self.session_path, 0)]

    def check_local(self) -> None:
        """Fail fast, before any upload, if the lock already knows it is lost."""
        lock = self.leadership
        if lock is None:
            return
        expired = getattr(lock, "expired", None)
        if self.released or getattr(lock, "held", True) is False or (expired is not None and expired.done()):
            raise LeadershipLostError(f"leadership {lock.path} has been lost; only the leader may change handles")

    def refused(self, error: StatekeepError) -> StatekeepError:
        """The error to raise for a definite refusal ``error`` of a fenced write: a
        :class:`LeadershipLostError` chained to it if the fence failed, else ``error`` itself."""
        if self.leadership is None:
            return error
        try:
            self.store.multi(self.ops())  # one atomic read of the checks: does the leadership still pass?
        except (BadVersionError, NotFoundError):
            lost = LeadershipLostError(f"leadership {self.leadership.path} has been lost (deposed or its session "
                                       "ended): the write was refused and not applied")
            lost.__cause__ = error
            return lost
        except StatekeepError:  # cannot tell: report what the store said
            pass
        return error

    def release(self) -> None:
        """Drop the claim's session key (best effort): this fence passes no more writes."""
        if self.leadership is None:
            return
        try:
            self.store.delete(self.session_path)
        except StatekeepError as e:
            log.debug("fence %s: session key not deleted: %s", self.session_path, e)
        self.released = True

