"""The metadata store contract (after Pulsar PIP-45) and the base class every backend extends.

A public method validates its arguments, then calls one small private method that a backend
implements (``_get``, ``_get_children``, ``_exists``, ``_multi``; optionally ``_put``/``_delete``
and ``_delete_recursive`` for speed). Validation happens before anything is sent, so bad input
never writes anything.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Self

from statekeep.background import Consumer
from statekeep.errors import InvalidArgumentError, NotEmptyError, NotFoundError, StoreClosedError
from statekeep.metadata.types import (
    Check,
    Delete,
    GetResult,
    Notification,
    NotificationType,
    Op,
    Put,
    SessionEvent,
    Stat,
    _valid_paths,
    join,
    parent_of,
    validate_path,
    validate_value,
    validate_version,
)
from statekeep.retry import DEFAULT as RETRY
from statekeep.validate import check_int

log = logging.getLogger(__name__)

DEFAULT_MAX_VALUE_SIZE = 1024 * 1024  # ZooKeeper's own default jute.maxbuffer

NotificationListener = Callable[[Notification], None]
SessionListener = Callable[[SessionEvent], None]


class Closing(abc.ABC):
    """A context manager: leaving its ``with`` block calls :meth:`close`."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Subscription(Closing):
    """Returned by ``add_listener``; ``close()`` stops delivery to that callback: once it returns,
    the callback is not called again (a call under way on the dispatcher thread may still finish)."""

    def __init__(self, remove: Callable[[], None]) -> None:
        self._remove = remove
        self._closed = False

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._remove()


#: An event for the dispatcher: the callbacks listening when it was posted, the live list of them, the event.
_Delivery = tuple[tuple[Callable[[Any], None], ...], Sequence[Callable[[Any], None]], object]


def _deliver(item: _Delivery) -> None:
    callbacks, live, event = item
    for callback in callbacks:
        if callback not in live:  # unsubscribed since the event was posted
            continue
        try:
            callback(event)
        except Exception:  # a listener's bug must not stop delivery to the others
            log.exception("metadata listener %r failed on %r", callback, event)


class MetadataStore(Closing):
    """A versioned key-value store with compare-and-set, sorted children, notifications,
    ephemeral and sequential keys and atomic multi-operations. Thread-safe.

    Contract (every backend, checked by ``tests/contract``):

    - Paths are absolute and ``/``-separated, with no empty, ``.`` or ``..`` segment, no
      trailing ``/`` and no control characters; otherwise :class:`InvalidPathError`.
    - Versions start at 0 on create and rise by one per put.
    - ``put(expected_version=None)`` writes unconditionally; ``-1`` requires that the key does not
      exist (else :class:`AlreadyExistsError`, a :class:`BadVersionError`); ``N >= 0`` requires the
      current version to be N, else :class:`BadVersionError`, also when the key does not exist (as Pulsar's
      MetadataStore: a compare-and-set loop catches one error). The same holds for a ``Put`` in ``multi``.
      ``delete`` of an absent key, and ``Check(path, N)`` of one, raise :class:`NotFoundError`.
    - Values are ``bytes`` of at most ``max_value_size`` (:class:`ValueTooLargeError`).
    - A put that creates a key also creates its missing ancestors as empty persistent keys
      (version 0), as ZooKeeper requires, so every backend lists the same children.
      ``get_children`` of an absent path is ``[]``. Deleting a key never deletes its parent.
      An ephemeral key has no children (:class:`InvalidArgumentError`, as in ZooKeeper).
    - Notifications are delivered while connected; after ``Reconnected`` or
      ``SessionReestablished`` re-read what you watch, as changes made meanwhile are not replayed.
    - ``Check(path, -1)`` may be seen by listeners as a Created and Deleted of ``path`` on
      ZooKeeper, which has no native "absent" check; prefer ``Put(path, value, -1)``.
    - Deleting a key that has children raises :class:`NotEmptyError`.
    - ``multi`` applies all operations or none; its error is that of the first failing operation.
      It may write each path at most once (:class:`InvalidArgumentError` otherwise).
    - Listeners receive every change, made by this or any other client, in commit order per key.
    - An unreachable store raises :class:`StoreUnavailableError`; a closed one :class:`StoreClosedError`.
    """

    #: URL scheme of the backend, e.g. "local".
    scheme: ClassVar[str] = ""
    #: What the backend offers beyond the contract, so callers ask instead of branching on a scheme
    #: (a third-party backend opts in by declaring them): "persistent" (survives close and reopen),
    #: "multi_process" (several processes may open it), "sessions" (sessions can be lost),
    #: "nonblocking_reads" (a read answers from memory or local disk, never waits on a network, so it
    #: may run on an event loop), "embedded_state" (the embedded state provider can keep state in the
    #: store's own files: the default provider there; the store then has an ``embedded_engine``, see
    #: :mod:`statekeep.metadata.embedded`), "sequence_counters" (``last_sequence`` and
    #: ``raise_sequence`` work).
    capabilities: ClassVar[frozenset[str]] = frozenset()
    #: Most operations one ``multi`` may carry and the largest request in bytes the backend accepts;
    #: layers above size their batches by these. The defaults are etcd's, the strictest.
    max_multi_ops: ClassVar[int] = 128
    max_request_bytes: ClassVar[int] = 1536 * 1024
    #: A hard limit of the backend itself; the configured limit can only be lower.
    backend_max_value_size: ClassVar[int] = 1 << 62

    def __init__(self, *, max_value_size: int = DEFAULT_MAX_VALUE_SIZE) -> None:
        if not isinstance(max_value_size, int) or max_value_size <= 0:
            raise InvalidArgumentError(f"max_value_size must be a positive int, got {max_value_size!r}")
        self.max_value_size = min(max_value_size, self.backend_max_value_size)
        self._closed = False
        self._forked = False  # set with _closed in a child forked while the store was open: the parent's store
        self._listener_lock = threading.Lock()
        self._listeners: list[NotificationListener] = []
        self._session_listeners: list[SessionListener] = []
        # delivers events to callbacks on one thread, in the order they were posted, so a slow callback
        # never blocks a backend's I/O thread and never reorders events; started with the first listener
        self._dispatcher: Consumer[_Delivery] | None = None

    @classmethod
    def from_url(cls, rest: str, options: dict[str, Any]) -> MetadataStore:
        """Open from the part of a URL after ``scheme://`` (query removed) and its options. This default
        calls ``cls(rest, **options)``: a backend whose constructor takes the URL's rest first needs no
        override; one that does not (the base takes none) overrides this."""
        constructor: Callable[..., MetadataStore] = cls
        return constructor(rest, **options)

    # ---- reads -------------------------------------------------------------------------------

    def get(self, path: str) -> GetResult | None:
        """The value and stat at ``path``, or ``None`` if it does not exist."""
        if self._closed:
            self._check_open()
        if path.__class__ is not str or path not in _valid_paths:  # validate_path's fast path, inlined
            validate_path(path)
        return self._get(path)

    def get_many(self, paths: Sequence[str]) -> list[GetResult | None]:
        """``get`` of each path, in order, in as few round trips as the backend allows (each result is
        as of some moment during the call; the reads are not one snapshot). Every path is validated
        before anything is read."""
        self._check_open()
        for path in paths:
            if path.__class__ is not str or path not in _valid_paths:
                validate_path(path)
        return self._get_many(list(paths))

    def get_children(self, path: str) -> list[str]:
        """Names of the immediate children of ``path``, sorted; ``[]`` if there are none."""
        self._check_open()
        return self._get_children(validate_path(path))

    def exists(self, path: str) -> bool:
        self._check_open()
        return self._exists(validate_path(path))

    # ---- writes ------------------------------------------------------------------------------

    def put(
        self,
        path: str,
        value: bytes,
        expected_version: int | None = None,
        *,
        ephemeral: bool = False,
        sequential: bool = False,
    ) -> Stat:
        """Write ``value`` at ``path``; returns the new stat (its ``path`` is the created path for a
        sequential put: ``path`` followed by a zero-padded 10-digit number unique under the parent).

        An ephemeral key lives as long as this store's session. Raises as the class docstring says.
        """
        self._check_open()
        return self._put(self._valid_put(Put(path, value, expected_version, ephemeral, sequential)))

    def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete ``path``. :class:`NotFoundError` if absent, :class:`BadVersionError` on a version
        mismatch, :class:`NotEmptyError` if it has children."""
        self._check_open()
        self._delete(self._valid_delete(Delete(path, expected_version)))

    def delete_recursive(self, path: str) -> None:
        """Delete ``path`` and everything below it; a no-op if nothing is there.
        Not atomic as a whole on every backend: concurrent writers below ``path`` may race it."""
        self._check_open()
        validate_path(path, allow_root=True)
        self._delete_recursive(path)

    def multi(self, ops: Sequence[Op]) -> list[Stat | None]:
        """Apply ``ops`` atomically, in order (each sees the effects of those before it).
        Returns one entry per op: the :class:`Stat` of a :class:`Put`, ``None`` otherwise."""
        self._check_open()
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Sequence):
            raise InvalidArgumentError("multi() takes a sequence of Put, Delete and Check operations")
        valid = [self._valid_op(op) for op in ops]
        written = [op.path for op in valid if not isinstance(op, Check) and not getattr(op, "sequential", False)]
        if len(written) != len(set(written)):
            # etcd refuses two writes of one key in a transaction; refuse it everywhere alike
            raise InvalidArgumentError("a multi() may write each path at most once")
        return self._multi(valid) if valid else []

    # ---- sequential counters -----------------------------------------------------------------

    def last_sequence(self, parent: str) -> int:
        """An upper bound of the sequential numbers handed out so far under ``parent``: every sequential key
        created under it had a number <= this (0: none handed out, or, on ZooKeeper, whose counter is the
        parent's child version, ``parent`` is absent). Exact on memory://, local:// and etcd://, where the next
        number is one more; on ZooKeeper the next number may be lower than it after deletions: use
        :meth:`raise_sequence` to be sure of the next one. :class:`InvalidArgumentError` on a backend without the
        capability ``"sequence_counters"``."""
        self._check_open()
        return self._last_sequence(validate_path(parent, allow_root=True))

    def raise_sequence(self, parent: str, at_least: int) -> int:
        """Make every sequential key created under ``parent`` from now on get a number greater than ``at_least``
        (as when copying a tree whose numbers must not be handed out again); returns a number >= ``at_least``
        that no sequential key created later gets (on memory://, local:// and etcd://: the counter). A counter
        is never lowered, so a repeated call is harmless; nothing is written when it is already high enough,
        except on ZooKeeper, where numbers are handed out for real (at least one sequential scratch child is
        created and deleted under ``parent``, in two transactions; listeners see their Created/Deleted events).

        ``parent`` must exist (:class:`NotFoundError` otherwise); ``at_least`` must be an int >= 0
        (:class:`InvalidArgumentError`); :class:`InvalidArgumentError` on a backend without the capability
        ``"sequence_counters"``."""
        self._check_open()
        validate_path(parent, allow_root=True)
        check_int(at_least, "at_least", minimum=0)
        if parent != "/" and not self._exists(parent):
            raise NotFoundError(f"{parent} does not exist: cannot raise its sequential counter")
        return self._raise_sequence(parent, at_least)

    # ---- notifications -----------------------------------------------------------------------

    def add_listener(self, callback: NotificationListener) -> Subscription:
        """Call ``callback(Notification)`` for every change in the store, on a dispatcher thread."""
        return self._add(self._listeners, callback)

    def add_session_listener(self, callback: SessionListener) -> Subscription:
        """Call ``callback(SessionEvent)`` when the connection or session changes state."""
        return self._add(self._session_listeners, callback)

    def close(self) -> None:
        """Release the session (its ephemeral keys go) and connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._close()
        finally:
            if self._dispatcher is not None:
                self._dispatcher.stop()

    @property
    def closed(self) -> bool:
        return self._closed

    # ---- for backends ------------------------------------------------------------------------

    def _emit(self, notification: Notification) -> None:
        """Deliver a notification to this store's listeners (backends call this)."""
        self._post(self._listeners, notification)

    def _emit_change(self, kind: NotificationType, path: str) -> None:
        """Deliver ``kind`` at ``path`` and, for a create or delete, ChildrenChanged of its parent."""
        self._emit(Notification(kind, path))
        if kind is NotificationType.Created or kind is NotificationType.Deleted:
            self._emit(Notification(NotificationType.ChildrenChanged, parent_of(path)))

    def _emit_session(self, event: SessionEvent) -> None:
        self._post(self._session_listeners, event)

    def _post(self, callbacks: list[Any], event: object) -> None:
        """Queue ``event`` for the callbacks in ``callbacks`` now (one added later does not get it);
        a callback no longer in ``callbacks`` when its turn comes is skipped, so a closed
        subscription gets nothing after ``close()`` returns but a call already under way."""
        if callbacks and self._dispatcher is not None:
            self._dispatcher.put((tuple(callbacks), callbacks, event))

    def _check_open(self) -> None:
        if self._forked:
            raise StoreClosedError(f"this {self.scheme}:// store was opened before fork(); open a new one in the child")
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    @abc.abstractmethod
    def _get(self, path: str) -> GetResult | None: ...

    @abc.abstractmethod
    def _get_children(self, path: str) -> list[str]: ...

    def _get_many(self, paths: list[str]) -> list[GetResult | None]:
        return [self._get(path) for path in paths]

    def _exists(self, path: str) -> bool:
        return self._get(path) is not None

    @abc.abstractmethod
    def _multi(self, ops: list[Op]) -> list[Stat | None]: ...

    def _put(self, op: Put) -> Stat:
        stat = self._multi([op])[0]
        assert stat is not None
        return stat

    def _delete(self, op: Delete) -> None:
        self._multi([op])

    def _delete_recursive(self, path: str) -> None:
        for _ in RETRY.attempts():
            for child in self._get_children(path):
                self._delete_recursive(join(path, child))
            if path == "/":
                return
            try:
                return self._delete(Delete(path))
            except NotFoundError:
                return
            except NotEmptyError:  # a concurrent writer added a child: list again
                continue
        raise NotEmptyError(f"{path}: concurrent writers kept adding children; not deleted")

    def _close(self) -> None:
        """Backend-specific release of resources."""

    def _last_sequence(self, parent: str) -> int:
        raise InvalidArgumentError(f"{self.scheme}:// stores do not expose their sequential counters")

    def _raise_sequence(self, parent: str, at_least: int) -> int:
        """Raise the counter to ``at_least`` if lower (``parent`` exists, arguments valid); the new last number."""
        raise InvalidArgumentError(f"{self.scheme}:// stores do not expose their sequential counters")

    # ---- validation --------------------------------------------------------------------------

    def _valid_put(self, op: Put) -> Put:
        validate_path(op.path, allow_root=False)
        value = validate_value(op.value, self.max_value_size)
        version = validate_version(op.expected_version)
        if not isinstance(op.ephemeral, bool) or not isinstance(op.sequential, bool):
            raise InvalidArgumentError("ephemeral and sequential must be bool")
        if op.sequential and version not in (None, -1):
            raise InvalidArgumentError("a sequential put always creates a key: expected_version must be None or -1")
        return op if value is op.value else Put(op.path, value, version, op.ephemeral, op.sequential)

    def _valid_delete(self, op: Delete) -> Delete:
        validate_path(op.path, allow_root=False)
        validate_version(op.expected_version)
        return op

    def _valid_op(self, op: object) -> Op:
        if isinstance(op, Put):
            return self._valid_put(op)
        if isinstance(op, Delete):
            return self._valid_delete(op)
        if isinstance(op, Check):
            validate_path(op.path, allow_root=False)
            if validate_version(op.version) is None:
                raise InvalidArgumentError("Check needs a version (-1 for 'does not exist')")
            return op
        raise InvalidArgumentError(f"multi() accepts Put, Delete and Check, not {type(op).__name__}")

    def _add(self, listeners: list[Any], callback: Callable[[Any], None]) -> Subscription:
        if not callable(callback):
            raise InvalidArgumentError("listener must be callable")
        self._check_open()
        with self._listener_lock:
            if self._dispatcher is None:
                self._dispatcher = Consumer(f"statekeep-{self.scheme}-listeners", _deliver, what="event delivery",
                                            log=log)
            listeners.append(callback)

        def remove() -> None:
            with self._listener_lock:
                if callback in listeners:
                    listeners.remove(callback)

        self._on_listener_added()
        return Subscription(remove)

    def _on_listener_added(self) -> None:
        """Hook for backends that start watching only once someone listens."""
