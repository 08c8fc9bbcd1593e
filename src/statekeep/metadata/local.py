"""``local://PATH``: the embedded default, a store in a directory on this machine.

Engine: LMDB. It is transactional (a multi-operation commits whole or not at all), keeps keys
sorted (children are one range scan), lets several processes open one store at once with a single
writer at a time, and cannot be left unreadable by a killed process: a commit flips one meta page,
so a SIGKILL leaves either the old or the new tree.

Layout under PATH: ``data/`` holds the LMDB environment, ``sessions/`` one file per open session.

- ``nodes``: key ``depth (2 bytes, big-endian) + path``, value ``version, created_ms, modified_ms,
  owner session`` (four 8-byte big-endian integers) followed by the raw value. Prefixing the depth
  makes the immediate children of a path one contiguous key range, so listing them never scans
  grandchildren.
- ``ephemeral``: ``session id + path`` for every ephemeral key, to remove a dead session's keys.
- ``sequences``: the last sequential number handed out under each parent.
- ``events``: a short-lived log of notifications (sequence number -> time, type, path), written in
  the same transaction as the change it describes; every process tails it to notify its listeners.
  ChildrenChanged is not stored: readers derive it from Created and Deleted.

Durability: ``put`` returns after its transaction is fsynced (LMDB's full sync: data pages, then
the meta page, so even a power loss leaves the old or the new tree). Concurrent writers in one
process share a commit (group commit, see ``_Engine.submit``): each request is applied in order in
one LMDB transaction (a failing request is skipped whole) and the batch commits once, so N waiting
writers cost one fsync.

Sessions: each store instance is a session that holds an exclusive ``flock`` on its own file in
``sessions/``. The kernel drops the lock when the process dies, so any other process can tell a dead
session from a live one without timeouts; the first to notice removes the dead session's
ephemeral keys (with notifications) and its file.

Processes: ``fork()`` (multiprocessing's fork start method) waits until no LMDB transaction is open in
this process (new ones wait for it), so a child never inherits one; there, stores opened before the
fork raise :class:`StoreClosedError`, and the child opens its own.

Other layers reach the engine only through :mod:`statekeep.metadata.embedded` (``embedded_engine(store)``,
its transactions and its fork gate), never through this module's private members.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import struct
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb

from statekeep.background import Periodic
from statekeep.errors import InvalidPathError, StatekeepError, StoreClosedError, StoreUnavailableError
from statekeep.lru import remember, memo
from statekeep.metadata._tree import _HEADER, Changes, Record
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.embedded import (FORK_GATE, FORK_WAIT_S, EmbeddedEngine, prefixed, transaction,
                                         uncounted_read)
from statekeep.metadata.types import (GetResult, NotificationType, Op, Stat)

log = logging.getLogger(__name__)

_U64 = struct.Struct(">Q")
_unpack_header = _HEADER.unpack_from
_new_tuple = tuple.__new__
_DEPTH = struct.Struct(">H")
_EVENT = struct.Struct(">qB")  # time ms, type code; the path follows
_EVENT_CODES = {t: i for i, t in enumerate(NotificationType)}
_EVENT_TYPES = list(NotificationType)

DEFAULT_MAP_SIZE = 64 << 30  # address space only; the file grows as data does
EVENT_RETENTION_MS = 60_000
NEW_SESSION_PREFIX = ".new-"
MAX_KEY_BYTES = 511  # LMDB's default key size limit
_HOT_ENTRIES = 4096  # per store: paths LocalStore.get keeps its last result of
_HOT_MAX_BYTES = 512 + 32  # larger values are not kept (the table stays under about 5 MiB)


def _depth(path: str) -> int:
    return 0 if path == "/" else path.count("/")


_node_keys: dict[str, bytes] = memo()


def node_key(path: str) -> bytes:
    key = _node_keys.get(path)
    if key is None:
        key = _DEPTH.pack(_depth(path)) + path.encode()
        if len(key) > MAX_KEY_BYTES:
            raise InvalidPathError(f"path of {len(key) - 2} bytes is longer than local:// allows "
                                   f"({MAX_KEY_BYTES - 2} bytes of UTF-8)")
        remember(_node_keys, path, key, 100_000)
    return key


# ---- fork() ------------------------------------------------------------------------------------
# The fork gate, counted transactions and uncounted reads are statekeep.metadata.embedded's (its docstring
# says why); this module adds the engines: fork() also waits for the engine registry, and the child closes
# the environments it inherited (see _after_fork_in_child).
_unusable_in_child: set[Path] = set()  # environments a transaction still held when this process forked


def _before_fork() -> None:
    _engines_lock.acquire()  # a child must not inherit it held, nor an engine half open
    drained = FORK_GATE.before_fork(FORK_WAIT_S)
    _unusable_in_child.clear()
    if not drained:  # e.g. this very thread is iterating a scan: the child cannot close what it inherits
        _unusable_in_child.update(_engines)
        log.warning("fork() with %d LMDB transactions still open after %ss: the child cannot open local stores "
                    "this process has open (%s)", len(FORK_GATE.open_txns), FORK_WAIT_S,
                    ", ".join(map(str, _engines)))


def _after_fork_in_parent() -> None:
    _unusable_in_child.clear()
    FORK_GATE.after_fork_in_parent()
    _engines_lock.release()


def children_prefix(path: str) -> bytes:
    return _DEPTH.pack(_depth(path) + 1) + (path if path == "/" else path + "/").encode()


class _TxnReader:
    """TreeReader over an open LMDB transaction."""

    def __init__(self, engine: _Engine, txn: lmdb.Transaction) -> None:
        self.engine = engine
        self.txn = txn

    def read(self, path: str) -> Record | None:
        raw = self.txn.get(node_key(path), db=self.engine.nodes)
        return None if raw is None else Record.decode(raw)

    def children(self, path: str) -> list[str]:
        return self.engine.children(self.txn, path)

    def has_children(self, path: str) -> bool:
        children = prefixed(self.txn.cursor(db=self.engine.nodes), children_prefix(path), values=False)
        return next(children, None) is not None

    def last_sequence(self, parent: str) -> int:
        raw = self.txn.get(parent.encode(), db=self.engine.sequences)
        return 0 if raw is None else _U64.unpack(raw)[0]


class _Request:
    __slots__ = ("build", "result", "error", "finished", "leads")

    def __init__(self, build: Callable[[_TxnReader, int], tuple[Any, Changes | None]]) -> None:
        self.build = build
        self.result: Any = None
        self.error: BaseException | None = None
        self.leads = False
        self.finished = threading.Lock()
        self.finished.acquire()


class _Engine:
    """One per (process, directory): the LMDB environment, the group committer and the
    thread that tails notifications and reaps dead sessions. Shared by all stores on PATH."""

    def __init__(self, directory: Path, map_size: int, poll_interval: float, reap_interval: float) -> None:
        self.directory = directory
        self.sessions_dir = directory / "sessions"
        self.sessions_dir.mkdir(parents=True, exist_ok=True)
        (directory / "data").mkdir(exist_ok=True)
        try:
            self.env = lmdb.open(
                str(directory / "data"), map_size=map_size, max_dbs=16, max_readers=1024,
                sync=True, metasync=True, readahead=False, lock=True,
            )
        except lmdb.Error as e:
            raise StoreUnavailableError(f"cannot open local store at {directory}: {e}") from e
        with transaction(self.env, write=True) as txn:
            self.nodes = self.env.open_db(b"nodes", txn=txn)
            self.ephemeral = self.env.open_db(b"ephemeral", txn=txn)
            self.sequences = self.env.open_db(b"sequences", txn=txn)
            self.events = self.env.open_db(b"events", txn=txn)
            self.meta = self.env.open_db(b"meta", txn=txn)
        self.pid = os.getpid()
        self.refcount = 0
        self.stores: weakref.WeakSet[LocalStore] = weakref.WeakSet()  # add, discard and iterate under _stores_lock
        self._stores_lock = threading.Lock()  # a WeakSet raises if another thread adds while one iterates
        self._own_sessions: set[int] = set()
        self._queue_lock = threading.Lock()
        self._extra_dbs: dict[bytes, Any] = {}
        self._queue: list[_Request] = []
        self._committing = False
        self._commits = 0
        self.reap_interval = reap_interval
        with transaction(self.env) as txn:
            self._last_event = self._last_event_in(txn)
        self._stopping = False
        self._reap()
        self._last_reap = time.monotonic()
        self.poll_interval = poll_interval
        self._events_lock = threading.Lock()  # _last_event: the watcher's, and a first listener's start
        self._delivering = True  # _last_event is current: the watcher delivers after it
        self._watcher = Periodic("statekeep-local-watch", poll_interval, self._watch, paced=True,
                                 what=f"local store {self.directory}: watcher", log=log)
        self._watcher.start()

    # ---- reads -------------------------------------------------------------------------------

    def children(self, txn: lmdb.Transaction, path: str) -> list[str]:
        prefix = children_prefix(path)
        return [key[len(prefix):].decode() for key in prefixed(txn.cursor(db=self.nodes), prefix, values=False)]

    # ---- writes: group commit ----------------------------------------------------------------

    def submit(self, build: Callable[[_TxnReader, int], tuple[Any, Changes | None]]) -> Any:
        """Run ``build`` inside a write transaction shared with other waiting writers and return
        its result once the transaction is durable. ``build`` raising means it wrote nothing.

        Group commit, leader/follower: a writer that finds no commit running commits every queued
        request itself; the others wait on their own lock. When a commit ends, the first writer
        that queued meanwhile is woken as the next leader, so a lone writer never pays a thread
        hand-off and N waiting writers share one transaction and one fsync."""
        request = _Request(build)
        with self._queue_lock:
            if self._stopping:
                raise StoreClosedError(f"local store {self.directory} is closed")
            self._queue.append(request)
            leading = not self._committing
            self._committing = True
        if not leading:
            request.finished.acquire()  # released when committed, or to make this writer lead
        if request.leads or leading:
            self._lead()
        if request.error is not None:
            raise request.error
        return request.result

    def _lead(self) -> None:
        with self._queue_lock:
            batch, self._queue = self._queue, []
        try:
            self._commit(batch)
        except BaseException as e:  # never leave a writer waiting forever
            for request in batch:
                if request.error is None:
                    request.error = StoreUnavailableError(f"local store commit failed: {e!r}")
        with self._queue_lock:
            if self._queue:
                successor = self._queue[0]
                successor.leads = True
                successor.finished.release()
            else:
                self._committing = False
        for request in batch:
            if request.finished.locked():
                request.finished.release()
        if self.listening:
            self._watcher.wake()  # deliver the new notifications now rather than at the next poll

    def _commit(self, batch: list[_Request]) -> None:
        now_ms = int(time.time() * 1000)
        try:
            with transaction(self.env, write=True) as txn:  # commits at the end, aborts on an error
                reader = _TxnReader(self, txn)
                next_event = self._last_event_in(txn) + 1
                for request in batch:
                    try:
                        request.result, changes = request.build(reader, now_ms)
                    except Exception as e:  # the request wrote nothing; the rest of the batch goes on
                        request.error = e
                        continue
                    if changes is not None:  # None: the request wrote its own databases only
                        next_event = self._flush(txn, changes, now_ms, next_event)
                self._commits += 1
                if self._commits % 64 == 0:
                    self._trim_events(txn, now_ms - EVENT_RETENTION_MS)
        except lmdb.Error as e:
            self._fail(batch, e)

    @staticmethod
    def _fail(batch: list[_Request], e: lmdb.Error) -> None:
        hint = " (the store is full: reopen it with a larger ?map_size=)" if isinstance(e, lmdb.MapFullError) else ""
        for request in batch:
            if request.error is None:
                request.error = StoreUnavailableError(f"local store write failed{hint}: {e}")
                request.error.__cause__ = e
                request.result = None

    def _last_event_in(self, txn: lmdb.Transaction) -> int:
        cursor = txn.cursor(db=self.events)
        return _U64.unpack(cursor.key())[0] if cursor.last() else 0

    def _flush(self, txn: lmdb.Transaction, changes: Changes, now_ms: int, next_event: int) -> int:
        for path, record in changes.writes.items():
            key = node_key(path)
            old = changes.originals[path]
            if record is None:
                txn.delete(key, db=self.nodes)
                if old is not None and old.owner:
                    txn.delete(_U64.pack(old.owner) + path.encode(), db=self.ephemeral)
            else:
                txn.put(key, record.encode(), db=self.nodes)
                if old is None and record.owner:
                    txn.put(_U64.pack(record.owner) + path.encode(), b"", db=self.ephemeral)
        for parent, seq in changes.sequences.items():
            txn.put(parent.encode(), _U64.pack(seq), db=self.sequences)
        for event in changes.events:
            txn.put(_U64.pack(next_event), _EVENT.pack(now_ms, _EVENT_CODES[event.type]) + event.path.encode(),
                    db=self.events, append=True)
            next_event += 1
        return next_event

    def _trim_events(self, txn: lmdb.Transaction, before_ms: int) -> None:
        """Delete the events older than ``before_ms`` but the newest: event ids go on from the last one in the
        log (:meth:`_last_event_in`), and a watcher delivers the ids after the last it saw, so an emptied log
        would number the next events from 1 again, and every watcher would miss them."""
        cursor = txn.cursor(db=self.events)
        if not cursor.last():
            return
        newest = cursor.key()
        cursor.first()
        while cursor.key() != newest and _EVENT.unpack_from(cursor.value())[0] < before_ms:
            cursor.delete()  # and on to the next event

    def open_db(self, name: bytes) -> Any:
        """A further named database in this environment (:meth:`EmbeddedEngine.open_db`)."""
        db = self._extra_dbs.get(name)
        if db is None:
            # in a write transaction of the group commit: lmdb's open_db without one waits for the writer lock
            # holding the GIL, so a thread of this process inside a write transaction could never finish it
            db = self.submit(lambda reader, now_ms: (self.env.open_db(name, txn=reader.txn), None))
            db = self._extra_dbs.setdefault(name, db)  # a racing opener got the same database
        return db

    def read(self, db: Any = None) -> transaction:
        """A counted read transaction (:meth:`EmbeddedEngine.read`)."""
        return transaction(self.env, db=db)

    # ---- sessions ----------------------------------------------------------------------------

    def open_session(self) -> tuple[int, int]:
        """A new session: returns (id, fd of its locked file)."""
        tmp = self.sessions_dir / f"{NEW_SESSION_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"
        fd = os.open(tmp, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)

        def allocate(reader: _TxnReader, now_ms: int) -> tuple[int, Changes]:
            raw = reader.txn.get(b"last_session", db=self.meta)
            session = (_U64.unpack(raw)[0] if raw else 0) + 1
            reader.txn.put(b"last_session", _U64.pack(session), db=self.meta)
            return session, Changes(reader, session, now_ms)

        session = self.submit(allocate)
        os.rename(tmp, self.sessions_dir / str(session))
        self._own_sessions.add(session)
        return session, fd

    def end_session(self, session: int, fd: int | None) -> None:
        """Remove the session's ephemeral keys, then its file (an orderly close or a reaped death)."""
        self.submit(lambda reader, now_ms: (None, self._expire(reader, session, now_ms)))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.sessions_dir / str(session))
        if fd is not None:
            os.close(fd)
        self._own_sessions.discard(session)

    def _expire(self, reader: _TxnReader, session: int, now_ms: int) -> Changes:
        changes = Changes(reader, session, now_ms)
        prefix = _U64.pack(session)
        for path in [key[8:].decode() for key in prefixed(reader.txn.cursor(db=self.ephemeral), prefix, values=False)]:
            record = changes.read(path)
            if record is not None and record.owner == session:
                changes.remove(path)
            else:  # a stale index entry: the key was deleted or recreated by someone else
                reader.txn.delete(prefix + path.encode(), db=self.ephemeral)
        return changes

    def _reap(self) -> None:
        """Expire the sessions whose owner process is gone (their file is no longer locked)."""
        try:
            names = os.listdir(self.sessions_dir)
        except FileNotFoundError:
            return
        for name in names:
            path = self.sessions_dir / name
            if name.startswith(NEW_SESSION_PREFIX):
                # being created right now, or left by a process that died while creating it
                try:
                    if time.time() - path.stat().st_mtime < 60:
                        continue
                except FileNotFoundError:
                    continue
            elif not name.isdigit() or int(name) in self._own_sessions:
                continue
            try:
                fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # alive
            if name.isdigit():
                log.info("local store %s: session %s ended with its process; expiring it", self.directory, name)
                self.end_session(int(name), fd)
            else:
                path.unlink(missing_ok=True)
                os.close(fd)
        self.env.reader_check()  # free reader slots of dead processes

    # ---- notifications -----------------------------------------------------------------------

    def _watch(self) -> float:
        """One poll: other processes' notifications, and now and then the dead sessions' keys. Returns the
        seconds to the next: ``poll_interval`` while a store of this process listens, else the time to the next
        reap (a process that only reads and writes, such as a Spark task's, does not wake every few ms)."""
        listening = self._deliver_events()
        now = time.monotonic()
        if now - self._last_reap >= self.reap_interval:
            self._last_reap = now
            self._reap()
        if listening:
            return self.poll_interval
        return max(self._last_reap + self.reap_interval - now, 0.0)

    def listener_added(self) -> None:
        """A store of this process got a listener: if none listened before, notifications start from the
        newest event (none written before ``add_listener`` returned is delivered) and the watcher polls
        every ``poll_interval`` from now on."""
        with self._events_lock:
            if not self._delivering:
                with transaction(self.env) as txn:
                    self._last_event = self._last_event_in(txn)
                self._delivering = True
        self._watcher.wake()

    @property
    def listening(self) -> list[LocalStore]:
        with self._stores_lock:
            return [s for s in self.stores if s._listeners]

    def attach(self, store: LocalStore) -> None:
        with self._stores_lock:
            self.stores.add(store)

    def detach(self, store: LocalStore) -> None:
        with self._stores_lock:
            self.stores.discard(store)

    def _deliver_events(self) -> bool:
        """Deliver the events after ``_last_event`` to this process's listening stores; whether any listens."""
        with self._events_lock:
            listening = self.listening
            self._delivering = bool(listening)
            if not listening:
                return False
            self._deliver_to(listening)
            return True

    def _deliver_to(self, listening: list[LocalStore]) -> None:
        with transaction(self.env, db=self.events) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(_U64.pack(self._last_event + 1)):
                return
            for key, value in cursor:
                seq = _U64.unpack(key)[0]
                if seq != self._last_event + 1 and self._last_event:
                    log.warning("local store %s: notifications %d..%d expired before delivery",
                                self.directory, self._last_event + 1, seq - 1)
                self._last_event = seq
                kind, path = _EVENT_TYPES[value[8]], value[_EVENT.size :].decode()
                for store in listening:
                    store._emit_change(kind, path)

    def close(self) -> None:
        with self._queue_lock:
            self._stopping = True
        self._watcher.stop(timeout=5)
        self.env.close()


_engines: dict[Path, _Engine] = {}
_engines_lock = threading.Lock()


def _after_fork_in_child() -> None:
    # The child opens its own environments on first use. Closing an inherited one is safe once no
    # transaction is open (_before_fork saw to that): LMDB then frees only reader slots of the child's
    # own pid, and fcntl locks (per process) are not inherited. Inherited session fds are closed
    # without unlocking: the flock stays with the parent's open file description.
    FORK_GATE.after_fork_in_child()
    for directory, engine in _engines.items():
        for store in list(engine.stores):
            store._forked = store._closed = True  # every call now raises StoreClosedError
            store._hot.clear()  # get()'s hits skip the closed check
            with contextlib.suppress(OSError):
                os.close(store._session_fd)
        if directory not in _unusable_in_child:
            engine.env.close()
    _engines.clear()
    _engines_lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


class LocalStore(MetadataStore):
    """``local://PATH``: see the module docstring. Options (URL query or keywords):
    ``max_value_size``, ``map_size`` (bytes of address space, default 64 GiB),
    ``poll_interval`` (seconds between checks for other processes' notifications while a store of this process
    has a listener, default 0.005; without one, the process wakes only to reap),
    ``reap_interval`` (seconds between checks for dead sessions, default 0.2)."""

    scheme = "local"
    capabilities = frozenset({"persistent", "multi_process", "nonblocking_reads", "embedded_state",
                              "sequence_counters"})
    max_multi_ops, max_request_bytes = 40_000, 64 << 20

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE,
                 poll_interval: float = 0.005, reap_interval: float = 0.2, **options: Any) -> None:
        super().__init__(**options)
        if not str(path):
            raise StoreUnavailableError("local:// needs a directory, e.g. local:///var/lib/statekeep")
        directory = Path(path).expanduser().resolve()
        if directory in _unusable_in_child:
            raise StoreUnavailableError(f"local store {directory}: this process was forked while a transaction on it "
                                        "was open (an unfinished scan?), so LMDB cannot be reopened here; finish "
                                        "scans before forking, or use the spawn start method")
        with _engines_lock:
            engine = _engines.get(directory)
            if engine is None:
                engine = _engines[directory] = _Engine(directory, map_size, poll_interval, reap_interval)
            engine.refcount += 1
        self._engine = engine
        self._hot: dict[str, tuple[bytes, bytes, GetResult]] = {}  # see get()
        self._env, self._nodes = engine.env, engine.nodes
        self.get = self._hot_get()  # type: ignore[method-assign,assignment]  # see get()
        self.directory = directory
        try:
            self.session_id, self._session_fd = engine.open_session()
        except BaseException:
            self._release_engine()
            raise
        engine.attach(self)

    @property
    def embedded_engine(self) -> EmbeddedEngine:
        """The LMDB engine of this store's directory (shared by its stores in this process); reach it through
        :func:`statekeep.metadata.embedded.embedded_engine`."""
        return self._engine

    @property
    def commit_count(self) -> int:
        """Write transactions the store's engine (shared by the stores of one directory in this process)
        has committed: each is one fsync, so group commit shows as fewer commits than writes."""
        return self._engine._commits

    def get(self, path: str) -> GetResult | None:
        """As :meth:`MetadataStore.get`: a fresh LMDB read on every call (what any process committed
        before the call is seen)."""
        # Each store answers get() with the function _hot_get() built for it in __init__ (this
        # method only serves calls through the class): the same read, with its state in closure
        # variables, which are cheaper than attribute loads on the hottest read path.
        return self._hot_get()(path)

    def _on_listener_added(self) -> None:
        self._engine.listener_added()

    def _hot_get(self) -> Callable[[str], GetResult | None]:
        # Building Stat and GetResult costs more than the LMDB read itself, so a path read before
        # keeps (its LMDB key, the stored bytes, the result): when this read finds the same bytes
        # (header included: version and times), the same immutable result is returned. The
        # comparison is with this very read, so it is never stale. Only valid paths of an open store
        # get an entry (close and fork empty the table), so a hit needs no other check.
        # The store only through a weak reference, on the miss paths: the store holds this function,
        # and a cycle would keep an unclosed store (and its engine registration) alive until a GC pass.
        hot_table, begin, nodes, ref, gate = self._hot, self._env.begin, self._nodes, weakref.ref(self), FORK_GATE

        def store() -> LocalStore:
            found = ref()
            if found is None:  # only this function was kept, not the store
                raise StoreClosedError("this local store was dropped (garbage-collected); keep the store, not its get")
            return found

        @uncounted_read
        def get(path: str) -> GetResult | None:
            try:
                hot = hot_table[path]  # subscript and positional db: measurably cheaper than .get() and db=
            except (KeyError, TypeError):  # not read before, or unhashable (not a path)
                return MetadataStore.get(store(), path)
            if gate.pending:
                return MetadataStore.get(store(), path)
            with begin(nodes) as txn:  # uncounted: fork() waits for this frame (embedded.uncounted_read)
                raw = txn.get(hot[0])
            if raw == hot[1]:
                return hot[2]
            return None if raw is None else store()._result(path, hot[0], raw)

        return get

    def _result(self, path: str, key: bytes, raw: bytes) -> GetResult:
        version, created, modified, owner = _unpack_header(raw)
        # tuple.__new__ skips the NamedTuple's Python-level __new__
        stat = _new_tuple(Stat, (path, version, created, modified, owner != 0,
                                 owner != 0 and owner == self.session_id))
        result = _new_tuple(GetResult, (raw[32:], stat))
        if len(raw) <= _HOT_MAX_BYTES:
            remember(self._hot, path, (key, raw, result), _HOT_ENTRIES)
        return result

    def _get(self, path: str) -> GetResult | None:
        key = node_key(path)
        with transaction(self._env, db=self._nodes) as txn:
            raw = txn.get(key)
        return None if raw is None else self._result(path, key, raw)

    def _exists(self, path: str) -> bool:
        with transaction(self._env, db=self._nodes) as txn:
            return txn.get(node_key(path)) is not None

    def _get_children(self, path: str) -> list[str]:
        with transaction(self._env) as txn:
            return self._engine.children(txn, path)

    def _multi(self, ops: list[Op]) -> list[Stat | None]:
        def build(reader: _TxnReader, now_ms: int) -> tuple[list[Stat | None], Changes]:
            changes = Changes(reader, self.session_id, now_ms)
            return [changes.apply(op) for op in ops], changes

        result: list[Stat | None] = self._engine.submit(build)
        return result

    def _last_sequence(self, parent: str) -> int:
        with transaction(self._env) as txn:
            return _TxnReader(self._engine, txn).last_sequence(parent)

    def _raise_sequence(self, parent: str, at_least: int) -> int:
        def build(reader: _TxnReader, now_ms: int) -> tuple[int, Changes | None]:
            last = reader.last_sequence(parent)  # read and raised in one transaction: a concurrent put is not lost
            if last >= at_least:
                return last, None
            changes = Changes(reader, self.session_id, now_ms)
            changes.sequences[parent] = at_least
            return at_least, changes

        result: int = self._engine.submit(build)
        return result

    def _close(self) -> None:
        self._hot.clear()  # get()'s hits skip the closed check
        self._engine.detach(self)
        try:
            if self._engine.pid == os.getpid():
                self._engine.end_session(self.session_id, self._session_fd)
        except StatekeepError:
            log.warning("local store %s: could not remove session %d cleanly; it will be reaped",
                        self.directory, self.session_id)
        finally:
            self._release_engine()

    def _release_engine(self) -> None:
        with _engines_lock:
            self._engine.refcount -= 1
            if self._engine.refcount == 0 and _engines.get(self.directory) is self._engine:
                del _engines[self.directory]
                self._engine.close()
