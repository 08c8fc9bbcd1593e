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


class UnsupportedCapabilityError(InvalidArgumentError):
    """A call needs a capability the state provider declares it lacks (see
    :class:`statekeep.state.base.Capability`); nothing was read or written. ``capability`` and
    ``provider`` name them."""

    def __init__(self, capability: str, provider: str, detail: str = "") -> None:
        self.capability, self.provider, self.detail = capability, provider, detail
        super().__init__(f"the {provider!r} state provider does not offer {capability!r}"
                         + (f": {detail}" if detail else ""))

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:  # crosses to Spark's driver intact
        return type(self), (self.capability, self.provider, self.detail)


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


class CorruptRecordError(CorruptStateError):
    """A JSON record kept in a store (a function's config or status, a manifest, a handle, a follower's
    position...) is not what statekeep wrote there; ``key`` names where it is kept. Nothing was changed."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class BlobStorageError(StatekeepError):
    """Blob storage failed to write, read, list or delete a blob (an I/O error, or the storage is
    unreachable). The metadata store was not changed by the failed step."""


class UnauthorizedError(StatekeepError):
    """No valid credentials were presented."""


class ForbiddenError(StatekeepError):
    """The credentials do not grant access to this resource."""


class MissingDependencyError(StatekeepError, ImportError):
    """An optional dependency needed by a backend is not installed; the message names the package."""


#: The one mapping between errors and HTTP statuses (after Pulsar's admin API): an error answers with
#: the status of its most specific class listed here (:func:`http_status`); a client receiving a status
#: raises the first class listed for it (:func:`error_for_status`). A client error is never a 5xx:
#: malformed input 400, too large 413, unknown 404, a conflict 409, credentials 401/403; only an
#: unreachable store (503) or a bug (500) is a server error.
HTTP_STATUS: dict[type[StatekeepError], int] = {
    InvalidArgumentError: 400, InvalidPathError: 400,
    UnauthorizedError: 401, ForbiddenError: 403, NotFoundError: 404,
    BadVersionError: 409, AlreadyExistsError: 409, NotEmptyError: 409, LockBusyError: 409, ReadOnlyStoreError: 409,
    ValueTooLargeError: 413,
    StoreUnavailableError: 503, StoreClosedError: 503,
    StatekeepError: 500,
}


def http_status(error: BaseException) -> int:
    """The HTTP status of ``error``: that of its most specific class in :data:`HTTP_STATUS` (else 500)."""
    for cls in type(error).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


def error_for_status(status: int) -> type[StatekeepError]:
    """The error a client raises for an HTTP error ``status``: the first class :data:`HTTP_STATUS` lists
    for it (400 -> InvalidArgumentError, 409 -> BadVersionError, 503 -> StoreUnavailableError, ...);
    StatekeepError for a status it does not list."""
    return next((cls for cls, code in HTTP_STATUS.items() if code == status), StatekeepError)
