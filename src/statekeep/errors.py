"""The one error tree of statekeep.

Every exception statekeep raises derives from :class:`StatekeepError`. A backend's own
exception is never leaked bare: it is chained as ``__cause__`` (``raise ... from e``).
Losing a race is reported as :class:`BadVersionError` (or a ``False`` result where an API says so);
an unreachable store raises :class:`StoreUnavailableError`.
"""

from __future__ import annotations


class StatekeepError(Exception):
    """Root of every statekeep error."""


class NotFoundError(StatekeepError):
    """The key (or function, lock, handle) does not exist."""


class BadVersionError(StatekeepError):
    """A compare-and-set lost: the stored version is not the expected one."""


class StateConflictError(BadVersionError):
    """State changed since a writer read it (another write committed first): the work that read it must
    be done again from the new state (the Spark runtime runs the partition's batch again)."""


class AlreadyExistsError(BadVersionError):
    """A create (``expected_version=-1``) found the key already present.

    It is a :class:`BadVersionError` too, so code that retries lost races catches both.
    """


class NotEmptyError(StatekeepError):
    """A key cannot be deleted while it has children; use ``delete_recursive``."""


class InvalidPathError(StatekeepError, ValueError):
    """A path is malformed; nothing was written."""


class InvalidArgumentError(StatekeepError, ValueError):
    """An argument has the wrong type or an out-of-range value; nothing was written."""


class ValueTooLargeError(StatekeepError, ValueError):
    """A value exceeds the store's size limit; nothing was written."""


class CounterOverflowError(InvalidArgumentError):
    """A counter update would leave the signed 64-bit range; the counter keeps its old value and nothing
    was written (counters never wrap)."""


class StoreUnavailableError(StatekeepError):
    """The store could not be reached in time. The operation may or may not have been applied
    only where :class:`PossibleInconsistentStateError` is raised instead."""


class StoreClosedError(StatekeepError):
    """The store (or session) was closed."""


class LockBusyError(StatekeepError):
    """The lock is held by another session."""


class LockLostError(StatekeepError):
    """The lock this handle held has been lost (session ended, key deleted or overwritten)."""


class LeadershipLostError(LockLostError):
    """A write that only the leader may make was refused: the caller's leadership has ended (its session
    expired, its lock was released or taken over, or a newer leader has claimed the state). Nothing was written."""


class ReadOnlyStoreError(StatekeepError):
    """A write was attempted on a read-only store (a follower); nothing was written."""


class PossibleInconsistentStateError(StoreUnavailableError):
    """The outcome of a write is unknown: it may or may not have been applied ("possibly written").
    A :class:`StoreUnavailableError`, so code that only cares about reachability catches it too."""


class CorruptStateError(StatekeepError):
    """Stored state failed verification: its blob is missing or truncated, its checksum differs from the
    one recorded in its handle, or the handle itself cannot be decoded."""


class BlobStorageError(StatekeepError):
    """Blob storage failed to write, read, list or delete a blob (an I/O error, or the storage is
    unreachable). The metadata store was not changed by the failed step."""


class UnauthorizedError(StatekeepError):
    """No valid credentials were presented."""


class ForbiddenError(StatekeepError):
    """The credentials do not grant access to this resource."""


class MissingDependencyError(StatekeepError, ImportError):
    """An optional dependency needed by a backend is not installed; the message names the package."""
