"""``CoordinationService``: locks, leader election and unique counters over any ``MetadataStore``.

Recipes in the style of kazoo/Curator, built only on the contract: a lock is an ephemeral key
created with ``expected_version=-1``; a counter is a key incremented by compare-and-set; leadership
is that lock on the election path, taken in order of arrival: each contender queues a sequential
ephemeral key under ``PATH.contenders`` and waits for the deletion of only the key just before its
own (the head waits for the lock key), so a release wakes exactly one contender, never a herd.
No backend-specific code.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
import uuid
import weakref
from typing import Any
from concurrent.futures import Future, InvalidStateError
from concurrent.futures import TimeoutError as FutureTimeout

from statekeep.background import Consumer
from statekeep.coordination.locks import ResourceLock, check_content
from statekeep.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    LockBusyError,
    NotFoundError,
    StatekeepError,
    StoreClosedError,
    StoreUnavailableError,
)
from statekeep.metadata.base import Closing, MetadataStore
from statekeep.metadata.types import Notification, NotificationType, SessionEvent, Stat, join, validate_path
from statekeep.retry import DEFAULT as _RETRY
from statekeep.validate import check_int, check_number

log = logging.getLogger(__name__)

_COUNTER = struct.Struct(">q")  # the design's counter encoding: 8-byte big-endian signed


class _Reservation:
    """Marks a lock path being acquired in this session; remembers notifications meanwhile."""

    __slots__ = ("dirty",)

    def __init__(self) -> None:
        self.dirty = False


# Lock paths held (or being acquired) per store instance, i.e. per session, across services:
# a second acquire in the same session must see the lock as busy, not as an orphan to adopt.
_held: weakref.WeakKeyDictionary[MetadataStore, dict[str, ResourceLock | _Reservation]] = (
    weakref.WeakKeyDictionary()
)
_held_lock = threading.Lock()


#: suffix of the sibling key under which an election's contenders queue
QUEUE_SUFFIX = ".contenders"
_SEQ_DIGITS = 10  # the contract's sequential suffix


def queue_path(path: str) -> str:
    """Where the contenders for the leadership at ``path`` queue (a sibling of ``path``)."""
    return path + QUEUE_SUFFIX


def _arrival(name: str) -> str:
    return name[-_SEQ_DIGITS:]


class _Election:
    """One contender: its queue key (``node``), the one key whose deletion wakes it (``watching``)."""

    __slots__ = ("path", "content", "future", "token", "node", "maybe_queued", "watching")

    def __init__(self, path: str, content: bytes) -> None:
        self.path = path
        self.content = content
        self.future: Future[ResourceLock] = Future()
        self.token = uuid.uuid4().hex  # in the queue key's name: finds a key whose create reply was lost
        self.node: str | None = None
        self.maybe_queued = False
        self.watching: str | None = None


class CoordinationService(Closing):
    """Locks, leader election and counters over ``store``. Thread-safe; call :meth:`close`.

    The session is the store's: a lock or leadership lasts until it is released, or until the store's
    session ends (closed, expired, or the holding process killed), whichever comes first.

    Options: ``recheck_interval`` (seconds between safety re-checks of held locks and waiting
    elections; notifications do the real work), ``max_counter_retries`` (compare-and-set attempts of
    :meth:`next_counter_value` before :class:`BadVersionError`).
    """

    def __init__(self, store: MetadataStore, *, recheck_interval: float = 5.0,
                 max_counter_retries: int = 1000) -> None:
        if not isinstance(store, MetadataStore):
            raise InvalidArgumentError(f"CoordinationService needs a MetadataStore, not {type(store).__name__}")
        check_number(recheck_interval, "recheck_interval", positive=True, unit=" of seconds")
        check_int(max_counter_retries, "max_counter_retries", minimum=1)
        self.store = store
        self.recheck_interval = float(recheck_interval)
        self.max_counter_retries = max_counter_retries
        self._counter_retry = _RETRY.bounded(attempts=max_counter_retries)
        self._mutex = threading.Lock()
        self._locks: dict[str, ResourceLock] = {}
        self._elections: dict[str, list[_Election]] = {}
        self._watches: dict[str, list[_Election]] = {}  # key -> contenders its deletion wakes
        self._leader_nodes: dict[str, str] = {}  # lock path -> the queue key of the election that won it
        self._stale_nodes: set[str] = set()  # queue keys to delete (a delete failed: retried on re-check)
        self._wakeups = 0
        self._closed = False
        # (kind, argument): a path, an _Election or an Event depending on the kind; with nothing queued
        # by the next re-check's time, the worker re-checks
        self._next_recheck = time.monotonic() + self.recheck_interval
        self._tasks: Consumer[tuple[str, Any]] = Consumer(
            "statekeep-coordination", self._run, what="coordination task", log=log, idle=("recheck", ""),
            idle_after=lambda: self._next_recheck - time.monotonic())
        with _held_lock:
            self._held = _held.setdefault(store, {})
        self._subscriptions = [store.add_listener(self._on_notification),
                               store.add_session_listener(self._on_session_event)]

    # ---- locks -------------------------------------------------------------------------------

    def acquire_lock(self, path: str, content: bytes, *, blocking: bool = False,
                     timeout: float | None = None) -> ResourceLock:
        """Take the lock at ``path`` (an ephemeral key holding ``content``). Use it as a context
        manager to release it: ``with coord.acquire_lock(path, b"me", blocking=True, timeout=10):``.

        ``blocking=False`` (the default) fails at once if the lock is taken. ``blocking=True`` waits, in
        order of arrival with other blocking acquirers (the election queue, so a release wakes one
        waiter), for at most ``timeout`` seconds (``None``: no limit).

        Raises :class:`LockBusyError` if another session (or another lock of this session) holds it,
        or a persistent key is there (blocking: still so when ``timeout`` passed; nothing is left
        queued); :class:`InvalidPathError` / :class:`InvalidArgumentError` for bad input (nothing
        written); :class:`StoreUnavailableError` if the store is unreachable (a key created anyway is
        this session's and is taken over by the next ``acquire_lock`` here).
        """
        validate_path(path, allow_root=False)
        content = check_content(content)
        if not isinstance(blocking, bool):
            raise InvalidArgumentError(f"blocking must be a bool, got {blocking!r}")
        check_number(timeout, "timeout", minimum=0, unit=" of seconds", optional=True)
        if blocking:
            return self._acquire_blocking(path, content, timeout)
        self._check_open()
        reservation = _Reservation()
        with _held_lock:
            if path in self._held:
                raise LockBusyError(f"lock {path} is already held in this session")
            self._held[path] = reservation
        lock = None
        try:
            lock = ResourceLock(self.store, path, content, self._create(path, content), self._forget)
        finally:
            with _held_lock, self._mutex:
                if lock is None or self._closed:
                    del self._held[path]
                else:
                    self._held[path] = self._locks[path] = lock
        if self._closed:
            lock.release()
            raise StoreClosedError("the coordination service was closed")
        if reservation.dirty:  # the key changed between our create and our registration
            self._tasks.put(("check", path))
        return lock

    def _acquire_blocking(self, path: str, content: bytes, timeout: float | None) -> ResourceLock:
        future = self.become_leader(path, content)
        try:
            return future.result(timeout)
        except FutureTimeout:
            if future.cancel():  # withdraws the queue key, on the worker: wait for it (never on itself)
                if threading.current_thread() is not self._tasks.thread:
                    self.sync(self.recheck_interval)
                raise LockBusyError(f"lock {path} still held by another session after {timeout}s") from None
            return future.result()  # won meanwhile

    def _create(self, path: str, content: bytes) -> Stat:
        for _ in _RETRY.bounded(attempts=3).attempts():  # the holder may release between our create and read
            try:
                return self.store.put(path, content, expected_version=-1, ephemeral=True)
            except AlreadyExistsError:
                existing = self.store.get(path)
            if existing is not None:
                break
        else:
            raise LockBusyError(f"lock {path} is changing hands quickly; try again")
        if not existing.stat.ephemeral:
            raise LockBusyError(f"{path} holds a persistent key, not a lock")
        if not existing.stat.created_by_self:
            raise LockBusyError(f"lock {path} is held by another session")
        # This session's key that no lock handle owns: a create whose reply was lost. Take it over.
        try:
            return self.store.put(path, content, expected_version=existing.stat.version)
        except BadVersionError as e:  # also when it went meanwhile
            raise LockBusyError(f"lock {path} changed while being taken over; try again") from e

    def read_lock(self, path: str) -> bytes | None:
        """Content of the lock at ``path``, or ``None`` if no lock (ephemeral key) is there."""
        validate_path(path)
        result = self.store.get(path)
        return result.value if result is not None and result.stat.ephemeral else None

    def list_locks(self, path: str) -> list[str]:
        """Sorted names of the children of ``path`` that are held locks (ephemeral keys).
        Reads every child (the contract's children carry no stats), in one ``get_many``."""
        validate_path(path)
        names = self.store.get_children(path)
        children = self.store.get_many([join(path, name) for name in names])
        return [name for name, child in zip(names, children) if child is not None and child.stat.ephemeral]

    # ---- leader election ---------------------------------------------------------------------

    def become_leader(self, path: str, content: bytes) -> Future[ResourceLock]:
        """A future completed with the leadership lock at ``path`` once this session holds it.

        Fair and herd-free (as kazoo's and Curator's recipes): the contender queues a sequential
        ephemeral key under :func:`queue_path` and waits for the deletion of only the key just before
        its own; the first in the queue takes the lock at ``path`` (waiting for that key if it is held
        outside the election). So leadership passes in order of arrival, and a release or a lost session
        wakes exactly one contender. A contender whose session ends re-queues at the back.
        ``future.cancel()`` withdraws from the election (its queue key is deleted).
        Callbacks added to the future run on the coordination thread: keep them short.
        Leadership is not re-sought by itself once lost (``lock.expired``): call this again.
        The future fails with :class:`StoreClosedError` if the store closes first; it is cancelled by
        :meth:`close`. Bad input raises at once (:class:`InvalidPathError`, :class:`InvalidArgumentError`).
        """
        validate_path(path, allow_root=False)
        validate_path(queue_path(path), allow_root=False)
        election = _Election(path, check_content(content))
        with self._mutex:
            self._check_open()
            self._elections.setdefault(path, []).append(election)
        election.future.add_done_callback(lambda f: self._on_election_done(election))
        self._tasks.put(("advance", election))
        return election.future

    def contenders(self, path: str) -> list[bytes]:
        """Contents of the contenders queued for the leadership at ``path``, in order of arrival (the
        first is the leader or next to lead). Reads every contender, in one ``get_many``."""
        validate_path(path, allow_root=False)
        queue = queue_path(path)
        names = sorted(self.store.get_children(queue), key=_arrival)
        nodes = self.store.get_many([f"{queue}/{name}" for name in names])
        return [node.value for node in nodes if node is not None]

    @property
    def election_wakeups(self) -> int:
        """How many times a waiting contender of this service looked at its queue (arrival, a wake-up by
        its predecessor's deletion, a re-check): shows that a release wakes one contender, not all."""
        return self._wakeups

    def sync(self, timeout: float | None = None) -> bool:
        """Wait until the coordination thread has acted on everything queued for it before this call
        (notifications already delivered to this service included). False on timeout."""
        done = threading.Event()
        self._tasks.put(("sync", done))
        return done.wait(timeout)

    def _advance(self, election: _Election) -> None:
        """Look at the queue once: lead if first and the lock is free, else watch the one key before.
        An unreachable store leaves the contender waiting for the re-check; any other store error (the
        store closed) fails its future."""
        if election.future.done():
            return  # cancelled, failed or won: the done-callback cleans up
        self._wakeups += 1
        try:
            self._advance_once(election)
        except StoreUnavailableError:
            log.info("election %s: store unreachable; trying again on the next re-check", election.path)
        except StatekeepError as e:
            _set(election.future, exception=e)

    def _advance_once(self, election: _Election) -> None:
        store, queue = self.store, queue_path(election.path)
        if election.node is None:
            election.node = self._enqueue(election, queue)
        names = sorted(store.get_children(queue), key=_arrival)
        mine = election.node.rpartition("/")[2]
        if mine not in names:  # our key went with a lost session: queue again, at the back
            election.node = None
            self._tasks.put(("advance", election))
            return
        index = names.index(mine)
        if index == 0:
            try:
                lock = self.acquire_lock(election.path, election.content)
            except LockBusyError:
                watch = election.path  # held outside the election, or not yet released by the last leader
            except StoreUnavailableError:
                return  # the re-check tries again
            except StatekeepError as e:
                _set(election.future, exception=e)
                return
            else:
                with self._mutex:
                    self._leader_nodes[lock.path] = election.node
                if not _set(election.future, result=lock):
                    lock.release()  # cancelled while we were acquiring
                return
        else:
            watch = f"{queue}/{names[index - 1]}"
        with self._mutex:
            election.watching = watch
            self._watches.setdefault(watch, []).append(election)
        if store.get(watch) is None:  # gone before we watched it: look again
            self._unwatch(election)
            self._tasks.put(("advance", election))

    def _enqueue(self, election: _Election, queue: str) -> str:
        """Create the contender's sequential key (or find the one a lost reply created)."""
        if election.maybe_queued and (found := self._queued(election)):
            return found[0]
        election.maybe_queued = True
        stat = self.store.put(f"{queue}/{election.token}-", election.content, sequential=True, ephemeral=True)
        return stat.path

    def _unwatch(self, election: _Election) -> None:
        with self._mutex:
            _discard(self._watches, election.watching or "", election)
            election.watching = None

    def _on_election_done(self, election: _Election) -> None:
        """Runs on whichever thread completed the future: only bookkeeping, the worker deletes keys."""
        with self._mutex:
            _discard(self._elections, election.path, election)
        self._unwatch(election)
        future = election.future
        if future.cancelled() or future.exception() is not None:
            self._tasks.put(("withdraw", election))

    def _withdraw(self, election: _Election) -> None:
        if election.node is not None:
            self._delete_node(election.node)
        elif election.maybe_queued:  # a create whose reply was lost may have left our key
            for node in self._queued(election):
                self._delete_node(node)

    def _queued(self, election: _Election) -> list[str]:
        """The queue keys named with ``election``'s token: its own, made by a create whose reply was lost."""
        queue = queue_path(election.path)
        return [f"{queue}/{name}" for name in self.store.get_children(queue) if name.startswith(election.token + "-")]

    def _delete_node(self, node: str) -> None:
        try:
            self.store.delete(node)
        except NotFoundError:
            pass  # gone with its session
        except StoreUnavailableError:
            self._stale_nodes.add(node)  # keeps its successor waiting: retried on every re-check
            return
        self._stale_nodes.discard(node)

    def _elect(self, path: str) -> None:
        """Re-check of every waiting contender for ``path`` (the safety timer, a session event)."""
        with self._mutex:
            waiting = [e for e in self._elections.get(path, ()) if not e.future.done()]
        for election in waiting:
            self._unwatch(election)
            self._advance(election)

    # ---- counters ----------------------------------------------------------------------------

    def next_counter_value(self, path: str) -> int:
        """The next value (1, 2, ...) of the counter at ``path``: unique among all callers of any
        process or machine using this store. The key holds an 8-byte big-endian signed integer.

        Raises :class:`BadVersionError` after ``max_counter_retries`` lost races,
        :class:`InvalidArgumentError` if ``path`` holds something that is not a counter,
        :class:`StoreUnavailableError` if the store is unreachable (a value may then be skipped).
        """
        validate_path(path, allow_root=False)
        for _ in self._counter_retry.attempts():
            current = self.store.get(path)
            if current is None:
                value, expected = 1, -1
            else:
                value, expected = _decode_counter(path, current.value) + 1, current.stat.version
            try:
                self.store.put(path, _COUNTER.pack(value), expected_version=expected)
                return value
            except BadVersionError:  # also a lost create, or the counter deleted meanwhile
                continue  # the policy spreads the contenders out
        raise BadVersionError(f"counter {path}: lost {self.max_counter_retries} races in a row")

    # ---- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel waiting elections, release held locks (best effort) and stop. Idempotent.
        Does not close the store."""
        with self._mutex:
            if self._closed:
                return
            self._closed = True
            elections = [e for pending in self._elections.values() for e in pending]
            self._elections.clear()
            locks = list(self._locks.values())
        for election in elections:
            election.future.cancel()
        for lock in locks:
            try:
                lock.release()
            except StatekeepError as e:  # it goes with the session anyway
                log.warning("could not release lock %s on close: %s", lock.path, e)
        for subscription in self._subscriptions:
            subscription.close()
        self._tasks.stop(timeout=5)

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError("the coordination service is closed")

    def _forget(self, lock: ResourceLock) -> None:
        with _held_lock, self._mutex:
            if self._locks.get(lock.path) is lock:
                del self._locks[lock.path]
            if self._held.get(lock.path) is lock:
                del self._held[lock.path]
            node = self._leader_nodes.pop(lock.path, None)
        if node is not None:  # leadership ended: leave the queue, which wakes the next contender
            self._tasks.put(("delete_node", node))

    # ---- events: listeners only enqueue, the worker talks to the store -------------------------

    def _on_notification(self, n: Notification) -> None:
        if n.type is NotificationType.ChildrenChanged:
            return
        if n.path in self._locks:
            self._tasks.put(("check", n.path))
        else:
            owner = self._held.get(n.path)
            if isinstance(owner, _Reservation):
                owner.dirty = True
        if n.type is NotificationType.Deleted and n.path in self._watches:
            with self._mutex:
                woken = self._watches.pop(n.path, [])
            for election in woken:  # only the contenders right behind the deleted key
                election.watching = None
                self._tasks.put(("advance", election))

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SessionLost:
            self._tasks.put(("session_lost", ""))
        elif event in (SessionEvent.Reconnected, SessionEvent.SessionReestablished):
            self._tasks.put(("recheck", ""))

    def _run(self, task: tuple[str, Any]) -> None:
        """One task, on the worker (its Consumer logs a failure and goes on: expiry detection must not stop)."""
        kind, path = task
        if kind == "check":
            lock = self._locks.get(path)
            if lock is not None:
                lock._revalidate()
        elif kind == "advance":
            self._advance(path)
        elif kind == "withdraw":
            self._withdraw(path)
        elif kind == "delete_node":
            self._delete_node(path)
        elif kind == "sync":
            path.set()
        else:
            if kind == "session_lost":  # the session's ephemeral keys are gone with it
                for lock in list(self._locks.values()):
                    lock._expire()
            unknown = self._recheck_all()
            # store unreachable: look again soon rather than after a full interval
            delay = min(0.5, self.recheck_interval) if unknown else self.recheck_interval
            self._next_recheck = time.monotonic() + delay

    def _recheck_all(self) -> bool:
        """Re-check every held lock and waiting election; True if the store was unreachable."""
        unknown = False
        for lock in list(self._locks.values()):
            unknown |= lock._revalidate() is None
        for node in list(self._stale_nodes):
            self._delete_node(node)
        for path in list(self._elections):
            self._elect(path)
        return unknown


def _discard(table: dict[str, list[_Election]], key: str, election: _Election) -> None:
    """Remove ``election`` from ``table[key]``, and ``key`` once its list is empty."""
    listed = table.get(key, [])
    if election in listed:
        listed.remove(election)
    if not listed:
        table.pop(key, None)


def _decode_counter(path: str, raw: bytes) -> int:
    if raw == b"":  # an ancestor key created implicitly by a put below it
        return 0
    if len(raw) != _COUNTER.size:
        raise InvalidArgumentError(f"{path} holds {len(raw)} bytes, not an 8-byte counter")
    value: int = _COUNTER.unpack(raw)[0]
    return value


def _set(future: Future[Any], *, result: object = None, exception: BaseException | None = None) -> bool:
    """Complete ``future`` unless it was cancelled meanwhile; True if this call completed it."""
    try:
        if exception is not None:
            future.set_exception(exception)
        else:
            future.set_result(result)
        return True
    except InvalidStateError:
        return False

