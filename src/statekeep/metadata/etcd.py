"""``etcd://HOST:PORT[,HOST:PORT...]/PREFIX``: the metadata contract on etcd v3, through ``aetcd``.

Layout, under ``PREFIX`` (``/PREFIX`` from the URL), so ``etcdctl get --prefix /PREFIX/`` shows the data:

- ``PREFIX + path`` -> the raw value bytes, nothing else.
- ``PREFIX + "\\0c" + parent + "\\0" + name`` -> ``b""``: the children index, one entry per key, written and
  deleted in the same transaction as the key (on the same lease if ephemeral). NUL cannot occur in a path, so one
  parent's entries are exactly one key range: ``get_children`` is one range read that never touches grandchildren,
  and "has no children" is one compare over that range.
- ``PREFIX + "\\0s" + parent`` -> the last sequential number given out under ``parent`` (decimal); never deleted,
  not even by ``delete_recursive``, so numbers are never reused.

Internal keys sort outside ``PREFIX + "/"``, the one range the watch covers, so they never notify. Keys written by
other tools are readable but not listed as children (they have no index entry).

Versions: etcd's per-key ``version`` is 1 on create and rises by one per put (a delete resets it), so the contract
version is ``etcd version - 1``. Hence one ``multi`` cannot write one key twice (etcd gives a key one new version per
transaction and refuses a put and a delete of one key in one transaction): that raises :class:`InvalidArgumentError`.
Times: etcd keeps no timestamps (revisions count writes, not time), so ``created_ms`` and ``modified_ms`` are 0, as
in Pulsar's etcd store.

Writes: a put or delete of one existing key (or a create under an existing persistent parent) is one transaction
guarded by version compares (and, for a create, a compare that the parent has no lease: an ephemeral key has no
children). Otherwise (``multi``, sequential puts, creating ancestors) the store reads a snapshot at one
revision, applies the operations with ``_tree.Changes`` (the code that defines the contract for memory:// and
local://, so results and errors are the same) and commits in one transaction guarded by compares that nothing it
read has changed since; if another writer got there first it starts again, for at most ``timeout``.

Sessions: a lease (TTL ``session_timeout``) per store, granted on open and kept alive by a background task; ephemeral
keys are attached to it. Notifications: one watch on ``PREFIX + "/"``, started with the first listener and resumed
after errors from the last revision seen. An unreachable server raises :class:`StoreUnavailableError` within
``timeout``; a write that may have reached the server before its connection failed raises
:class:`PossibleInconsistentStateError`. The gRPC channel reconnects by itself when the server is back.

Processes: gRPC is not fork-safe while any of its threads runs. ``close()`` ends everything of the client (tasks,
channel, the event loop thread and, with the last store, gRPC's poller thread), so a child forked afterwards can open
``etcd://`` again. ``os.fork()`` while stores are open (multiprocessing's fork start method) is made safe too: just
before the fork every open store lets its in-flight requests finish (new ones wait), drops its channel, and the fork
waits until gRPC has no thread left (its core's native threads end a little after the last channel), and each store
reconnects right after in the parent (same lease, the watch resumes from the last revision seen). In
the child, stores inherited from the parent raise :class:`StoreClosedError` (their threads are not there) and
closing them touches nothing on the server; the child opens its own. Forks through ``subprocess`` never run these
hooks (they exec at once) and cost nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, cast

from statekeep.errors import (
    AlreadyExistsError, BadVersionError, ForbiddenError, InvalidArgumentError, MissingDependencyError,
    NotEmptyError, NotFoundError, PossibleInconsistentStateError, StatekeepError, StoreClosedError,
    StoreUnavailableError, UnauthorizedError, ValueTooLargeError,
)
from statekeep.metadata._tree import Changes, Record
from statekeep.metadata.base import MetadataStore
from statekeep.retry import DEFAULT as RETRY, RECONNECT
from statekeep.validate import check_int, check_number
from statekeep.metadata.types import (
    Check, Delete, GetResult, NotificationType, Op, Put, SessionEvent, Stat, parent_of, validate_path,
)

try:
    import grpc
    from aetcd import rpc
    from aetcd.utils import prefix_range_end
except ImportError as e:  # pragma: no cover - depends on the installation
    raise MissingDependencyError("etcd:// needs the 'aetcd' package: pip install 'statekeep[etcd]'") from e

log = logging.getLogger(__name__)

_C = rpc.Compare
ETCD_MAX_REQUEST_BYTES = 1536 * 1024  # etcd's default --max-request-bytes
ETCD_MAX_TXN_OPS = 128  # etcd's default --max-txn-ops
_CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
    # reconnect soon after the server is back (gRPC's default backoff grows to two minutes)
    ("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    # notice a dead connection under a long-lived watch; etcd refuses pings more often than every 5 s
    ("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
]


#: open stores, for the fork hooks; _fork_lock keeps opening, closing and forking from interleaving
_stores: weakref.WeakSet[EtcdStore] = weakref.WeakSet()
_fork_lock = threading.Lock()


#: names (as the kernel shows them, cut to 15 characters) of the threads gRPC's core starts: its event engine's
#: pool, timer, lifeguard and the thread that shuts it down once its last object is gone
_GRPC_NATIVE_THREADS = ("event_engine", "grpc_global_tim", "lifeguard", "grpc_shutdown", "default-executo",
                        "resolver-execut")


def _grpc_threads(native: bool = True) -> list[str]:
    """The names of gRPC's threads still running: grpc.aio's completion queue poller (a Python thread) and, with
    ``native``, the core's own threads (seen only in ``/proc``). They end once no channel or call is left."""
    names = [thread.name for thread in threading.enumerate() if "_poll_wrapper" in thread.name]
    tasks: list[str] = []
    if native:
        with contextlib.suppress(OSError):  # no /proc: only the Python thread is seen
            tasks = os.listdir("/proc/self/task")
    for task in tasks:
        with contextlib.suppress(OSError), open(f"/proc/self/task/{task}/comm") as comm:  # ended meanwhile
            if (name := comm.read().strip()).startswith(_GRPC_NATIVE_THREADS):
                names.append(name)
    return names


def _release_grpc(wait: float, native: bool = True) -> None:
    """Make sure gRPC's threads have ended once no store has a channel: a fork while one runs can leave the child
    a lock no thread will release (seen: a child's new store hung in gRPC). They end when the last gRPC object is
    freed: objects in reference cycles (a call in an exception's traceback) wait for a collection, a cancelled
    call's last references go a few loop iterations after its channel closed, and the core's threads then stop
    on their own, so wait up to ``wait`` seconds (only while threads outlive the channels). ``native=False``
    waits for the poller only: the core's threads run as long as any other gRPC user in the process has a
    channel, which a store's close must not wait for; a fork waits for them (see _before_fork)."""
    if not all(store._channel is None for store in _stores):
        return
    deadline = time.monotonic() + wait
    while _grpc_threads(native) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.005)


def _before_fork() -> None:
    _fork_lock.acquire()
    try:
        for store in list(_stores):
            store._pause_for_fork()
        _release_grpc(wait=10.0)
        if running := _grpc_threads():
            log.warning("fork() while gRPC still runs threads %s (a gRPC user other than statekeep's etcd:// "
                        "stores?): a child process may fail to use gRPC", sorted(set(running)))
    except BaseException:
        _fork_lock.release()
        raise


def _after_fork_in_parent() -> None:
    try:
        for store in list(_stores):
            store._resume_after_fork()
    finally:
        _fork_lock.release()


def _after_fork_in_child() -> None:
    # The parent's stores have no threads here: refuse their use, and never revoke the parent's lease.
    for store in list(_stores):
        store._forked = store._closed = True
        store._gate = threading.Condition()
    _stores.clear()
    _fork_lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)


class _Retry(Exception):
    """The attempt lost a race that is resolved by starting again (a concurrent write, the lease gone)."""


def _version_is(key: bytes, result: int, version: int, range_end: bytes = b"") -> rpc.Compare:
    """Compare the etcd version of ``key`` (of every key in ``[key, range_end)``; an absent key has 0)."""
    return rpc.Compare(key=key, range_end=range_end, target=_C.VERSION, result=result, version=version)


def _lease_is(key: bytes, lease: int) -> rpc.Compare:
    """Compare the lease of ``key`` (0: none, a persistent key; an absent key compares as having lease 0)."""
    return rpc.Compare(key=key, target=_C.LEASE, result=_C.EQUAL, lease=lease)


def _mod_is(key: bytes, result: int, revision: int, range_end: bytes = b"") -> rpc.Compare:
    return rpc.Compare(key=key, range_end=range_end, target=_C.MOD, result=result, mod_revision=revision)


def _put(key: bytes, value: bytes, lease: int = 0, *, keep_lease: bool = False) -> rpc.RequestOp:
    return rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=value, lease=lease, ignore_lease=keep_lease,
                                                    prev_kv=True))


def _delete(key: bytes, range_end: bytes = b"") -> rpc.RequestOp:
    return rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key, range_end=range_end))


def _range(key: bytes, range_end: bytes = b"", **options: Any) -> rpc.RequestOp:
    return rpc.RequestOp(request_range=rpc.RangeRequest(key=key, range_end=range_end, **options))


def _record(kv: Any) -> Record:
    return Record(kv.version - 1, 0, 0, kv.lease, kv.value)  # contract version = etcd version - 1


def _grpc_target(endpoints: str) -> str:
    """One endpoint goes to gRPC's DNS resolver; several are resolved once to IPv4 addresses, which gRPC's
    pick_first policy tries in turn, moving on when a server fails."""
    hosts = [h.strip().rpartition(":") for h in endpoints.split(",") if h.strip()]
    if not hosts or not all(host and port.isdigit() for host, _, port in hosts):
        raise InvalidArgumentError(f"etcd:// needs HOST:PORT[,HOST:PORT...], got {endpoints!r}")
    if len(hosts) == 1:
        return endpoints.strip()
    try:
        return "ipv4:" + ",".join(f"{socket.gethostbyname(host)}:{port}" for host, _, port in hosts)
    except OSError as e:
        raise StoreUnavailableError(f"cannot resolve the etcd endpoints {endpoints!r}: {e}") from e


class _Snapshot:
    """A TreeReader over the store at one revision: what ``ops`` will read is fetched in one request, anything
    else later at the same revision. ``guards()`` are compares that hold only while none of it has changed."""

    def __init__(self, store: EtcdStore, ops: list[Op]) -> None:
        self.store, self.revision = store, 0
        # ("r", path) -> (Record | None, mod revision); ("c", path) -> (number of children, 0);
        # ("s", parent) -> (last sequence number, mod revision). Mod revision 0: absent.
        self.seen: dict[tuple[str, str], tuple[Any, int]] = {}
        reads: dict[tuple[str, str], None] = {}
        sequential = [op for op in ops if isinstance(op, Put) and op.sequential]
        for op in ops:
            if isinstance(op, Put) and op.sequential:
                reads[("s", parent_of(op.path))] = None
            else:
                reads[("r", op.path)] = None
            if isinstance(op, Delete):
                reads[("c", op.path)] = None
            parent = parent_of(op.path)
            while isinstance(op, Put) and parent != "/":  # the ancestors it may have to create
                reads[("r", parent)] = None
                parent = parent_of(parent)
        # the paths sequential puts will take: guessed from this store's last commit under the same
        # parent (a writer appending a log), so they are read in the same request
        reads.update(dict.fromkeys(self._sequence_paths(sequential, store._sequence_hints)))
        self._fetch(*reads)
        if sequential:  # a wrong guess (another writer appended meanwhile) costs one more request
            taken = [read for read in self._sequence_paths(sequential, None) if read not in self.seen]
            if taken:
                self._fetch(*taken)

    def _sequence_paths(self, ops: list[Put], hints: dict[str, int] | None) -> list[tuple[str, str]]:
        """The paths sequential ``ops`` take after the last numbers in ``hints`` (None: as read)."""
        numbers: dict[str, int] = {}
        paths = []
        for op in ops:
            parent = parent_of(op.path)
            last = numbers.get(parent, self.seen["s", parent][0] if hints is None else hints.get(parent))
            if last is None:
                continue
            numbers[parent] = last + 1
            paths.append(("r", f"{op.path}{last + 1:010d}"))
        return paths

    def _fetch(self, *reads: tuple[str, str]) -> None:
        for i in range(0, len(reads), ETCD_MAX_TXN_OPS):  # a transaction reads at most --max-txn-ops ranges
            self._fetch_some(reads[i:i + ETCD_MAX_TXN_OPS])

    def _fetch_some(self, reads: tuple[tuple[str, str], ...]) -> None:
        store = self.store
        ops = [_range(*store._children(path), count_only=True, revision=self.revision) if kind == "c"
               else _range(store._data(path) if kind == "r" else store._counter(path), revision=self.revision)
               for kind, path in reads]
        response = store._call(store._txn(rpc.TxnRequest(success=ops)))
        self.revision = self.revision or response.header.revision
        for (kind, path), result in zip(reads, response.responses):
            found = result.response_range
            kv = found.kvs[0] if found.kvs else None
            if kind == "c":
                self.seen[kind, path] = (found.count, 0)
            elif kv is None:
                self.seen[kind, path] = (None if kind == "r" else 0, 0)
            else:
                self.seen[kind, path] = (_record(kv) if kind == "r" else int(kv.value), kv.mod_revision)

    def _get(self, kind: str, path: str) -> Any:
        if (kind, path) not in self.seen:
            self._fetch((kind, path))
        return self.seen[kind, path][0]

    # TreeReader
    def read(self, path: str) -> Record | None:
        return None if path == "/" else self._get("r", path)

    def has_children(self, path: str) -> bool:
        return bool(self._get("c", path) > 0)

    def children(self, path: str) -> list[str]:
        self.has_children(path)  # so the commit guards this range
        return self.store._child_names(path, self.revision)

    def last_sequence(self, parent: str) -> int:
        return int(self._get("s", parent))

    def guards(self) -> list[rpc.Compare]:
        guards, store = [], self.store
        for (kind, path), (_, mod) in self.seen.items():
            if kind == "c":  # no child created since: every index entry is older than the snapshot
                start, end = store._children(path)
                guards.append(_mod_is(start, _C.LESS, self.revision + 1, end))
            else:
                guards.append(_mod_is(store._data(path) if kind == "r" else store._counter(path), _C.EQUAL, mod))
        return guards


class EtcdStore(MetadataStore):
    """``etcd://HOST:PORT[,HOST:PORT...]/PREFIX``: see the module docstring. Options (URL query or keywords):
    ``timeout`` (seconds an operation may take, default 10), ``session_timeout`` (lease TTL in whole seconds,
    default 10), ``max_value_size``. Opening raises :class:`StoreUnavailableError` if no server answers within
    ``timeout``. A multi over the server's ``--max-txn-ops`` (default 128 operations; a created key takes two)
    raises :class:`InvalidArgumentError`, over ``--max-request-bytes`` :class:`ValueTooLargeError`."""

    scheme = "etcd"
    capabilities = frozenset({"persistent", "multi_process", "sessions", "sequence_counters"})
    max_multi_ops, max_request_bytes = ETCD_MAX_TXN_OPS, ETCD_MAX_REQUEST_BYTES
    # etcd refuses requests over 1.5 MiB by default; 64 KiB of that is left for the key, its index entry, compares
    # and framing, so the server never refuses a single value under this limit.
    backend_max_value_size = ETCD_MAX_REQUEST_BYTES - 64 * 1024

    def __init__(self, endpoints: str, prefix: str = "", *, timeout: float = 10.0, session_timeout: int = 10,
                 **options: Any) -> None:
        super().__init__(**options)
        prefix = prefix.strip("/")
        if prefix:
            validate_path("/" + prefix)
        check_number(timeout, "timeout", positive=True, unit=" of seconds")
        check_int(session_timeout, "session_timeout", minimum=1)
        self.endpoints, self.timeout, self.session_timeout = endpoints, float(timeout), session_timeout
        self._retry = RETRY.bounded(seconds=self.timeout)
        self.prefix = "/" + prefix if prefix else ""
        self._p = self.prefix.encode()
        self._target = _grpc_target(endpoints)
        self._lease = 0  # the current session's lease; 0 while there is none
        self._sequence_hints: dict[str, int] = {}  # parent -> last sequence number this store committed
        self._tasks: list[asyncio.Task[Any]] = []
        self._watch_lock = threading.Lock()
        self._watching = False  # set on the loop, with the watch task
        self._watch_revision = 0  # where the watch resumes: the revision after the last event delivered
        self._session_running = False
        self._channel: Any = None
        self._disconnected = False  # the channel was dropped for a fork and is to be rebuilt
        # in-flight requests, counted so a fork can wait for them; while paused, new ones wait
        self._gate = threading.Condition()
        self._inflight = 0
        self._paused = False
        self._loop = asyncio.new_event_loop()
        # not a background.Periodic/Consumer: the thread runs the asyncio loop every etcd call and task is on
        self._thread = threading.Thread(target=self._loop.run_forever, name="statekeep-etcd", daemon=True)
        with _fork_lock:
            self._thread.start()
            _stores.add(self)
        try:
            self._start()
        except BaseException:
            # the error raised holds the failed call, so gRPC's poller runs until it is freed: no wait for it here
            # (a fork still waits for it)
            self._close(release_wait=0.0)
            raise

    @classmethod
    def from_url(cls, rest: str, options: dict[str, Any]) -> EtcdStore:
        endpoints, _, prefix = rest.partition("/")
        return cls(endpoints, prefix, **options)

    # ---- keys --------------------------------------------------------------------------------

    def _data(self, path: str) -> bytes:
        return self._p + path.encode()

    def _index(self, path: str) -> bytes:
        parent, _, name = path.rpartition("/")
        return self._p + b"\0c" + (parent or "/").encode() + b"\0" + name.encode()

    def _children(self, path: str) -> tuple[bytes, bytes]:
        start = self._p + b"\0c" + path.encode() + b"\0"
        return start, prefix_range_end(start)

    def _counter(self, parent: str) -> bytes:
        return self._p + b"\0s" + parent.encode()

    def _stat(self, path: str, kv: Any, version: int) -> Stat:
        return Stat(path, version, 0, 0, kv.lease != 0, kv.lease != 0 and kv.lease == self._lease)

    # ---- the event loop thread and errors ----------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, Any], *, write: bool = False) -> Any:
        """Run ``coro`` on the store's loop within ``timeout``; gRPC failures become the contract's errors."""
        with self._gate:
            while self._paused:  # a fork is under way: the channel is back right after it
                self._gate.wait()
            self._inflight += 1
        try:
            if self._forked:
                coro.close()
                raise StoreClosedError("this etcd:// store was opened before fork(); open a new one in the child")
            try:
                future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, self.timeout), self._loop)
            except RuntimeError as e:  # the loop is gone: close() won a race with this call
                coro.close()
                raise StoreClosedError("the store is closed") from e
            try:
                return future.result(self.timeout + 5)
            except grpc.aio.AioRpcError as e:
                raise self._error(e.code(), e.details() or "", write) from e
            except TimeoutError as e:
                future.cancel()
                raise self._error(grpc.StatusCode.DEADLINE_EXCEEDED, f"no answer within {self.timeout}s",
                                  write) from e
            except concurrent.futures.CancelledError as e:
                raise StoreClosedError("the store is closed") from e
        finally:
            with self._gate:
                self._inflight -= 1
                if not self._inflight:
                    self._gate.notify_all()

    def _error(self, code: grpc.StatusCode, details: str, write: bool) -> Exception:
        if self._closed:
            return StoreClosedError("the store is closed")
        if code == grpc.StatusCode.NOT_FOUND and "lease not found" in details:
            self._loop.call_soon_threadsafe(self._lost, self._lease)  # expired before we noticed: retry on a new one
            return _Retry(details)
        if code == grpc.StatusCode.OUT_OF_RANGE:  # a snapshot's revision was compacted away
            return _Retry(details)
        if "too large" in details or "larger than max" in details:
            return ValueTooLargeError(f"etcd refused the request ({details}); keep large state in blob storage "
                                      "with statekeep.handles.StateHandleStore and store only its handle here")
        if code == grpc.StatusCode.INVALID_ARGUMENT and "too many operations" in details:
            return InvalidArgumentError(f"{details}: this needs more operations than the server's --max-txn-ops "
                                        f"(default {ETCD_MAX_TXN_OPS}; each created key is two); split it")
        if code == grpc.StatusCode.UNAUTHENTICATED:
            return UnauthorizedError(f"etcd: {details}")
        if code == grpc.StatusCode.PERMISSION_DENIED:
            return ForbiddenError(f"etcd: {details}")
        self._loop.call_soon_threadsafe(self._wake.set)  # let the session task notice the outage now
        # "failed to connect": the request never left this process; otherwise it may have reached the server
        if write and "failed to connect" not in details:
            return PossibleInconsistentStateError(
                f"etcd at {self.endpoints}: {code.name} {details}; the write may or may not have been applied")
        return StoreUnavailableError(f"etcd at {self.endpoints} is unavailable: {code.name} {details}")

    def _start(self) -> None:
        """Connect and begin the session. The first lease is asked again through failed connects for up to
        ``timeout`` (as a ZooKeeper store's open waits for its session): a server still starting, or one refused
        handshake, is not an outage; :class:`StoreUnavailableError` once ``timeout`` has passed."""
        self._call(self._open_channel())
        RECONNECT.bounded(seconds=self.timeout).repeat(lambda: self._call(self._grant()))
        self._call(self._spawn(self._keep_session()))
        self._session_running = True

    async def _open_channel(self) -> None:
        self._wake, self._granted = asyncio.Event(), asyncio.Event()
        self._connect()

    def _connect(self) -> None:
        """Create the channel and stubs (on the loop: gRPC binds them to it). Connects lazily."""
        self._channel = rpc.insecure_channel(self._target, options=_CHANNEL_OPTIONS)
        self._kv, self._leases = rpc.KVStub(self._channel), rpc.LeaseStub(self._channel)
        self._watcher = rpc.WatchStub(self._channel)

    async def _disconnect(self) -> None:
        """Stop the tasks and close the channel, dropping every reference to gRPC objects, so that gRPC's
        poller thread can end (it runs while any channel or call exists)."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        channel, self._channel = self._channel, None
        self._kv = self._leases = self._watcher = None
        if channel is not None:
            await channel.close()
        del tasks, channel
        await asyncio.sleep(0)  # let the calls' own done-callbacks run and release them

    async def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._tasks.append(asyncio.ensure_future(coro))

    async def _txn(self, request: rpc.TxnRequest) -> Any:
        return await self._kv.Txn(request, timeout=self.timeout)

    # ---- sessions ----------------------------------------------------------------------------

    async def _grant(self) -> None:
        reply = await self._leases.LeaseGrant(rpc.LeaseGrantRequest(TTL=self.session_timeout), timeout=self.timeout)
        self._lease = reply.ID
        self._granted.set()

    def _lost(self, lease: int) -> None:
        """The lease is gone on the server (expired or revoked), and with it the ephemeral keys."""
        if lease and lease == self._lease:
            self._lease = 0
            self._granted.clear()
            self._wake.set()
            self._emit_session(SessionEvent.SessionLost)

    async def _keep_session(self) -> None:
        """Renews the lease every TTL/3 (every 0.2 s while disconnected) and reports changes: ConnectionLost when
        a renewal fails, Reconnected when one works again on the same lease, SessionLost when the server says the
        lease is gone, SessionReestablished once a new one is granted."""
        interval, connected = self.session_timeout / 3, True
        while True:
            try:
                if not self._lease:
                    await self._grant()
                    self._emit_session(SessionEvent.SessionReestablished)
                lease, ttl = self._lease, 0
                # one request and one reply per renewal; write/read (no request iterator, no async generator)
                # leave no task or generator holding the call once it is cancelled
                call = self._leases.LeaseKeepAlive(timeout=min(self.timeout, interval))
                try:
                    await call.write(rpc.LeaseKeepAliveRequest(ID=lease))
                    reply = await call.read()
                    ttl = 0 if reply is grpc.aio.EOF else reply.TTL
                finally:
                    call.cancel()
                    del call
                if not connected and ttl > 0:
                    self._emit_session(SessionEvent.Reconnected)
                connected = True
                if ttl <= 0:
                    self._lost(lease)
                    continue
            except Exception as e:  # an RPC error or timeout; anything else must not end the session either
                if connected:
                    log.warning("etcd at %s: connection lost (%s)", self.endpoints,
                                e.details() if isinstance(e, grpc.aio.AioRpcError) else repr(e))
                    self._emit_session(SessionEvent.ConnectionLost)
                connected = False
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval if connected else 0.2)

    async def _session_lease(self) -> int:
        if not self._lease:
            self._wake.set()
            await self._granted.wait()  # bounded by _call's timeout
        return self._lease

    def expire_session(self) -> None:
        """Test hook: revoke this store's lease as if it had expired. Its ephemeral keys vanish, session listeners
        get SessionLost, then SessionReestablished when a new lease is granted."""
        self._check_open()
        self._call(self._expire(), write=True)

    async def _expire(self) -> None:
        lease = self._lease
        try:
            await self._leases.LeaseRevoke(rpc.LeaseRevokeRequest(ID=lease), timeout=self.timeout)
        except grpc.aio.AioRpcError as e:
            if e.code() != grpc.StatusCode.NOT_FOUND:  # NOT_FOUND: it had expired already
                raise
        self._lost(lease)

    # ---- notifications -----------------------------------------------------------------------

    def _on_listener_added(self) -> None:
        with self._watch_lock:
            if self._watching or self._closed:
                return
            try:  # watch from the revision after now: nothing written after add_listener returns is missed
                revision = self._call(self._txn(rpc.TxnRequest())).header.revision + 1
            except StatekeepError as e:
                log.warning("etcd at %s: notifications start once the server answers (%s)", self.endpoints, e)
                revision = 0
            self._call(self._start_watch(revision))

    async def _start_watch(self, revision: int) -> None:
        # on the loop, like _disconnect and _reconnect: a fork never sees a watch task without the flag
        self._watch_revision, self._watching = revision, True
        await self._spawn(self._watch())

    async def _watch(self) -> None:
        """One watch on ``PREFIX/``; after an error it resumes at the revision after the last event delivered
        (``_watch_revision``, 0: from now)."""
        start, failures = self._p + b"/", 0
        while True:
            call = self._watcher.Watch()
            try:
                await call.write(rpc.WatchRequest(create_request=rpc.WatchCreateRequest(
                    key=start, range_end=prefix_range_end(start), start_revision=self._watch_revision)))
                while (response := await call.read()) is not grpc.aio.EOF:
                    failures = 0
                    if response.created and not self._watch_revision:
                        self._watch_revision = response.header.revision + 1
                    if response.compact_revision:
                        log.warning("etcd at %s: notifications before revision %d were compacted away",
                                    self.endpoints, response.compact_revision)
                        self._watch_revision = response.compact_revision
                        break
                    if response.canceled:
                        log.warning("etcd at %s: watch canceled: %s", self.endpoints, response.cancel_reason)
                        break
                    for event in response.events:
                        self._notify(event)
                        self._watch_revision = event.kv.mod_revision + 1
            except grpc.aio.AioRpcError as e:
                log.debug("etcd at %s: watch interrupted (%s); resuming at %d", self.endpoints, e.details(),
                          self._watch_revision)
            except Exception:  # never let a surprise end notifications for good
                log.exception("etcd at %s: watch failed; resuming at %d", self.endpoints, self._watch_revision)
            finally:
                call.cancel()
                del call
            failures += 1
            await asyncio.sleep(RECONNECT.delay(failures))

    def _notify(self, event: Any) -> None:
        path = event.kv.key[len(self._p):].decode("utf-8", "replace")
        if event.type == rpc.Event.DELETE:
            self._emit_change(NotificationType.Deleted, path)
        else:  # etcd version 1 is a create
            self._emit_change(NotificationType.Modified if event.kv.version > 1 else NotificationType.Created, path)

    # ---- reads -------------------------------------------------------------------------------

    def _read(self, op: rpc.RequestOp) -> Any:
        return self._call(self._txn(rpc.TxnRequest(success=[op]))).responses[0].response_range

    def _get(self, path: str) -> GetResult | None:
        return self._result(path, self._read(_range(self._data(path))).kvs)

    def _result(self, path: str, kvs: Any) -> GetResult | None:
        return GetResult(kvs[0].value, self._stat(path, kvs[0], kvs[0].version - 1)) if kvs else None

    def _get_many(self, paths: list[str]) -> list[GetResult | None]:
        """Range reads in transactions of ``--max-txn-ops`` reads, several in flight at once."""
        chunks = [paths[i:i + ETCD_MAX_TXN_OPS] for i in range(0, len(paths), ETCD_MAX_TXN_OPS)]

        async def read(some: list[list[str]]) -> list[Any]:
            return await asyncio.gather(*(self._txn(rpc.TxnRequest(success=[_range(self._data(p)) for p in chunk]))
                                          for chunk in some))

        responses = []
        for i in range(0, len(chunks), 16):  # 16 in flight; each group within its own timeout
            responses += self._call(read(chunks[i:i + 16]))
        return [self._result(path, result.response_range.kvs)
                for chunk, response in zip(chunks, responses) for path, result in zip(chunk, response.responses)]

    def _exists(self, path: str) -> bool:
        return bool(self._read(_range(self._data(path), count_only=True)).count > 0)

    def _get_children(self, path: str) -> list[str]:
        return self._child_names(path)

    def _child_names(self, path: str, revision: int = 0) -> list[str]:
        """The children of ``path`` as of ``revision`` (0: now)."""
        start, end = self._children(path)
        kvs = self._read(_range(start, end, keys_only=True, revision=revision)).kvs
        return [kv.key[len(start):].decode() for kv in kvs]

    # ---- writes ------------------------------------------------------------------------------

    def _retrying(self, attempt: Callable[[], Any]) -> Any:
        """``attempt()`` until it neither raises nor returns ``_Retry``, for at most ``timeout``
        (the shared retry policy); then :class:`StoreUnavailableError`."""
        for _ in self._retry.attempts():
            try:
                if (result := attempt()) is not _Retry:
                    return result
            except _Retry:
                pass
        raise StoreUnavailableError(f"etcd at {self.endpoints}: other writers or session changes kept this "
                                    f"write from committing for {self.timeout}s; nothing was written")

    def _put(self, op: Put) -> Stat:
        if op.sequential:
            return super()._put(op)  # as a multi
        return cast(Stat, self._retrying(lambda: self._put_once(op)))

    def _put_once(self, op: Put) -> Any:
        key, expected = self._data(op.path), op.expected_version
        lease = self._call(self._session_lease()) if op.ephemeral else 0
        if expected is not None and expected >= 0:  # compare-and-set, the common write: build only what it sends
            request = rpc.TxnRequest(compare=[_version_is(key, _C.EQUAL, expected + 1)],
                                     success=[_put(key, op.value, keep_lease=True)], failure=[_range(key)])
            return self._put_result(op, expected, lease, self._call(self._txn(request), write=True))
        parent = parent_of(op.path)
        # a create needs its parent present and persistent (an ephemeral key has no children: a parent with a lease is
        # ephemeral); both compares are in the transaction, so a racing create of an ephemeral parent cannot slip in.
        # If they fail, _multi decides: it creates missing ancestors or raises the contract's error.
        parent_ok = [] if parent == "/" else [_version_is(self._data(parent), _C.GREATER, 0),
                                              _lease_is(self._data(parent), 0)]
        creates = [_put(key, op.value, lease), _put(self._index(op.path), b"", lease)]
        if expected is None:  # update if present, else create if the parent exists
            if 2 * len(op.value) + 65536 > ETCD_MAX_REQUEST_BYTES:  # too big to send in both branches
                return self._multi([op])[0]
            nested = rpc.RequestOp(request_txn=rpc.TxnRequest(compare=parent_ok, success=creates))
            update = _put(key, op.value, keep_lease=True)  # an update keeps the key's lease, as _tree does
            request = rpc.TxnRequest(compare=[_version_is(key, _C.GREATER, 0)], success=[update], failure=[nested])
        else:
            request = rpc.TxnRequest(compare=[_version_is(key, _C.EQUAL, 0)] + parent_ok, success=creates,
                                     failure=[_range(key, count_only=True)])
        return self._put_result(op, expected, lease, self._call(self._txn(request), write=True))

    def _put_result(self, op: Put, expected: int | None, lease: int, response: Any) -> Any:
        first = response.responses[0]
        if response.succeeded and expected != -1:  # updated: the new etcd version is the previous one + 1
            return self._stat(op.path, first.response_put.prev_kv, first.response_put.prev_kv.version)
        if response.succeeded or (expected is None and first.response_txn.succeeded):
            return Stat(op.path, 0, 0, 0, lease != 0, lease != 0)
        if expected is None or (expected == -1 and first.response_range.count == 0):
            return self._multi([op])[0]  # a missing ancestor has to be created too
        if expected == -1:
            raise AlreadyExistsError(f"{op.path} already exists")
        if not first.response_range.kvs:  # PIP-45: a version that cannot match is a BadVersion, absent or not
            raise BadVersionError(f"{op.path} does not exist (expected version {expected})")
        raise BadVersionError(f"{op.path} is at version {first.response_range.kvs[0].version - 1}, not {expected}")

    def _delete(self, op: Delete) -> None:
        self._retrying(lambda: self._delete_once(op))

    def _delete_once(self, op: Delete) -> Any:
        key, expected = self._data(op.path), op.expected_version
        start, end = self._children(op.path)
        present = (_version_is(key, _C.GREATER, 0) if expected is None
                   else _version_is(key, _C.EQUAL, expected + 1))
        response = self._call(self._txn(rpc.TxnRequest(
            compare=[present, _version_is(start, _C.EQUAL, 0, end)],  # and it has no children
            success=[_delete(key), _delete(self._index(op.path))],
            failure=[_range(key), _range(start, end, count_only=True)])), write=True)
        if response.succeeded:
            return None
        kvs = response.responses[0].response_range.kvs
        if not kvs:
            raise NotFoundError(f"{op.path} does not exist")
        if expected is not None and kvs[0].version != expected + 1:
            raise BadVersionError(f"{op.path} is at version {kvs[0].version - 1}, not {expected}")
        if response.responses[1].response_range.count:
            raise NotEmptyError(f"{op.path} has children; use delete_recursive")
        return _Retry  # unreachable within one transaction; kept so a surprise retries instead of passing

    def _delete_recursive(self, path: str) -> None:
        """One transaction of range deletes: the key, everything below it and their index entries (counters stay)."""
        def below(key: bytes) -> rpc.RequestOp:
            return _delete(key, prefix_range_end(key))

        if path == "/":
            ops = [below(self._p + b"/"), below(self._p + b"\0c")]
        else:
            ops = [_delete(self._data(path)), below(self._data(path) + b"/"), _delete(self._index(path)),
                   _delete(*self._children(path)), below(self._p + b"\0c" + path.encode() + b"/")]
        self._call(self._txn(rpc.TxnRequest(success=ops)), write=True)

    def _multi(self, ops: list[Op]) -> list[Stat | None]:
        blind = self._multi_blind(ops)
        return blind if blind is not None else self._retrying(lambda: self._multi_once(ops))

    def _multi_blind(self, ops: list[Op]) -> list[Stat | None] | None:
        """One round trip, no read, for the shape a compare-and-set writer appending a log sends: puts
        and deletes at expected versions, checks of a version, and persistent sequential puts under a
        parent whose last number this store committed. Everything the general path would read is a
        compare instead; None (nothing written) if the shape does not fit or a compare fails: then the
        general path decides."""
        writes: list[rpc.RequestOp] = []
        guards: list[rpc.Compare] = []
        results: list[Stat | None] = []
        numbers: dict[str, int] = {}
        parents: set[str] = set()
        checked: set[str] = set()
        for op in ops:
            if isinstance(op, Check):
                if op.version < 0:
                    return None
                checked.add(op.path)
                guards.append(_version_is(self._data(op.path), _C.EQUAL, op.version + 1))
                results.append(None)
                continue
            if isinstance(op, Put) and not op.ephemeral and op.sequential:
                parent = parent_of(op.path)
                if parent not in self._sequence_hints:
                    return None
                numbers[parent] = numbers.get(parent, self._sequence_hints[parent]) + 1
                path, expected = f"{op.path}{numbers[parent]:010d}", -1
            elif isinstance(op, (Put, Delete)) and op.expected_version is not None and \
                    not (isinstance(op, Put) and op.ephemeral):
                path, expected = op.path, op.expected_version
            else:
                return None
            key = self._data(path)
            guards.append(_version_is(key, _C.EQUAL, expected + 1))
            if isinstance(op, Delete):
                start, end = self._children(path)
                guards.append(_version_is(start, _C.EQUAL, 0, end))  # no children
                writes += [_delete(key), _delete(self._index(path))]
                results.append(None)
            elif expected == -1:
                parents.add(parent_of(path))
                writes += [_put(key, op.value), _put(self._index(path), b"")]
                results.append(Stat(path, 0, 0, 0, False, False))
            else:
                writes.append(_put(key, op.value, keep_lease=True))
                results.append(Stat(path, expected + 1, 0, 0, False, False))
        written = {s.path for s in results if s is not None} | {op.path for op in ops if isinstance(op, Delete)}
        if len(written) < len(ops) - sum(isinstance(op, Check) for op in ops):
            return None  # a path twice: the general path says why
        if checked & written:
            return None  # compares see the state before the transaction, a check after a write would not
        for parent in parents - {"/"}:  # it exists and is persistent (an ephemeral key has no children)
            guards += [_version_is(self._data(parent), _C.GREATER, 0), _lease_is(self._data(parent), 0)]
        for parent, last in numbers.items():
            guards.append(rpc.Compare(key=self._counter(parent), target=_C.VALUE, result=_C.EQUAL,
                                      value=str(self._sequence_hints[parent]).encode()))
            writes.append(_put(self._counter(parent), str(last).encode()))
        if len(guards) > ETCD_MAX_TXN_OPS:
            return None
        if not self._call(self._txn(rpc.TxnRequest(compare=guards, success=writes)), write=True).succeeded:
            return None
        self._sequence_hints.update(numbers)
        return results

    def _multi_once(self, ops: list[Op]) -> Any:
        ephemeral = any(isinstance(op, Put) and op.ephemeral for op in ops)
        session = self._call(self._session_lease()) if ephemeral else self._lease
        snapshot = _Snapshot(self, ops)
        changes = Changes(snapshot, session, 0)
        results = [changes.apply(op) for op in ops]  # raises the contract's error of the first failing op
        writes: list[rpc.RequestOp] = []
        for path, record in changes.writes.items():
            original = changes.originals[path]
            if record is None:
                if original is not None:
                    writes += [_delete(self._data(path)), _delete(self._index(path))]
            elif record.version != (0 if original is None else original.version + 1):
                raise InvalidArgumentError(f"etcd:// cannot write {path} twice in one multi (etcd gives a key one "
                                           "new version per transaction); split the operations")
            elif original is None:
                writes += [_put(self._data(path), record.value, record.owner),
                           _put(self._index(path), b"", record.owner)]
            else:
                writes.append(_put(self._data(path), record.value, keep_lease=True))
        writes += [_put(self._counter(parent), str(seq).encode()) for parent, seq in changes.sequences.items()]
        if not writes:
            return results  # nothing to write: the snapshot answered at one revision
        # etcd itself refuses a transaction over --max-txn-ops or --max-request-bytes, before applying anything
        request = rpc.TxnRequest(compare=snapshot.guards(), success=writes)
        if not self._call(self._txn(request), write=True).succeeded:
            return _Retry
        if changes.sequences:
            if len(self._sequence_hints) > 1000:
                self._sequence_hints.clear()
            self._sequence_hints.update(changes.sequences)
        return results

    def _last_sequence(self, parent: str) -> int:
        kvs = self._read(_range(self._counter(parent))).kvs
        return int(kvs[0].value) if kvs else 0

    def _raise_sequence(self, parent: str, at_least: int) -> int:
        key = self._counter(parent)

        def attempt() -> Any:
            kvs = self._read(_range(key)).kvs
            if kvs and int(kvs[0].value) >= at_least:
                return int(kvs[0].value)
            # compare-and-set against the counter as read: a concurrent sequential put is never lost
            guard = _mod_is(key, _C.EQUAL, kvs[0].mod_revision) if kvs else _version_is(key, _C.EQUAL, 0)
            request = rpc.TxnRequest(compare=[guard], success=[_put(key, str(at_least).encode())])
            return at_least if self._call(self._txn(request), write=True).succeeded else _Retry

        last: int = self._retrying(attempt)
        self._sequence_hints.pop(parent, None)  # its guess of the last number is stale now
        return last

    # ---- closing and forking -----------------------------------------------------------------

    def _close(self, release_wait: float = 2.0) -> None:
        """Revoke the lease (ephemeral keys go at once), stop the tasks, close the channel, end the thread.
        Nothing of the client stays alive: with the last store, gRPC's own poller thread ends too (waited for up
        to ``release_wait`` s)."""
        with _fork_lock:
            _stores.discard(self)
            if self._loop.is_running():
                try:
                    asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(self.timeout + 5)
                except Exception as e:  # the lease then expires by itself after session_timeout
                    log.warning("etcd at %s: not closed cleanly (%s)", self.endpoints, e)
                    self._channel = self._kv = self._leases = self._watcher = None
                self._loop.call_soon_threadsafe(self._loop.stop)
            if threading.current_thread() is not self._thread:
                self._thread.join(timeout=5)
            if not self._thread.is_alive():
                self._loop.close()
            _release_grpc(wait=release_wait, native=False)

    async def _shutdown(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._lease and self._channel is not None:
            try:
                await self._leases.LeaseRevoke(rpc.LeaseRevokeRequest(ID=self._lease), timeout=self.timeout)
            except grpc.aio.AioRpcError as e:
                log.info("etcd at %s: lease not revoked (%s); it expires in %ss", self.endpoints, e.details(),
                         self.session_timeout)
        await self._disconnect()

    def _pause_for_fork(self) -> None:
        """Before ``fork()`` (under ``_fork_lock``): let in-flight requests finish (new ones wait), then drop the
        channel. Requests still running after ``timeout`` are cancelled: a child that hangs in gRPC is worse."""
        with self._gate:
            self._paused = True
            deadline = time.monotonic() + self.timeout + 6
            while self._inflight and (left := deadline - time.monotonic()) > 0:
                self._gate.wait(left)
        if self._channel is None or threading.current_thread() is self._thread or not self._loop.is_running():
            return
        self._disconnected = True
        try:
            asyncio.run_coroutine_threadsafe(self._disconnect(), self._loop).result(self.timeout + 5)
        except Exception as e:  # noqa: BLE001 - a fork hook must not fail the fork; the child opens its own
            log.warning("etcd at %s: could not pause for fork() (%s)", self.endpoints, e)

    def _resume_after_fork(self) -> None:
        """In the parent after ``fork()``: rebuild the channel, restart the session and the watch, let requests
        through. Nothing is lost: the lease outlives the pause and the watch resumes at its revision."""
        try:
            if self._disconnected and self._loop.is_running():
                self._disconnected = False
                asyncio.run_coroutine_threadsafe(self._reconnect(), self._loop).result(self.timeout + 5)
        except Exception as e:  # noqa: BLE001 - nor the parent's: requests then fail and the store can be reopened
            log.warning("etcd at %s: could not resume after fork() (%s)", self.endpoints, e)
        finally:
            with self._gate:
                self._paused = False
                self._gate.notify_all()

    async def _reconnect(self) -> None:
        self._connect()
        if self._session_running:
            await self._spawn(self._keep_session())
        if self._watching:
            await self._spawn(self._watch())
