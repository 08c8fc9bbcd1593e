"""``zk://HOST:PORT[,HOST:PORT...]/CHROOT``: the metadata contract on Apache ZooKeeper 3.6+, via kazoo.

Layout (native, so ``zkCli.sh`` shows it): key ``/a/b`` is the znode ``CHROOT/a/b`` holding the raw
value; the version is the znode's data version, ``created_ms``/``modified_ms`` its ctime/mtime. Missing
ancestors are created as empty persistent znodes. Sequential keys are ZooKeeper's own (the 10-digit
suffix is the parent's child version), ephemeral keys are ephemeral znodes of this store's session.
ZooKeeper allows no children under an ephemeral znode: such a put raises :class:`InvalidArgumentError`.

``multi`` is one ZooKeeper transaction. What depends on current state (``expected_version=None``:
create or set; which ancestors are missing) is planned from one pipelined round of reads and sent
inside that transaction, so all-or-nothing holds, ancestors included; if a concurrent writer changed
that state, the transaction fails whole and is planned again. ``Check(path, -1)`` has no native form:
it becomes a create and a delete of ``path`` (or of its first missing ancestor) in the transaction, so
listeners then see a ``Created`` and a ``Deleted`` for that path (not when the next op of the multi
creates that path anyway, as in ``[Check(p, -1), Put(p, v)]``).

Notifications: one persistent recursive watch (``addWatch``, sent by hand: kazoo 2.11 lacks it) on the
chroot, added with the first listener and again after every reconnection; ``ChildrenChanged`` of the
parent is derived from each create and delete. Changes made while disconnected are not replayed:
listeners get ``Reconnected``/``SessionReestablished`` and should re-read.

Failures: an operation waits at most ``timeout`` seconds for a connection and an answer, then raises
:class:`StoreUnavailableError` (nothing was written). A connection attempt waits at most a third of the
session timeout for the server's answer to its handshake, then tries again: a server restarting accepts
connections before it can serve and may leave one unanswered (ZooKeeper 3.8 does, ZOOKEEPER-5051), and
kazoo's own wait (the whole session timeout) would leave a reconnecting session no time to be kept.
Reads retry across a reconnection within ``timeout``. A write whose connection broke, or whose answer
did not come in time, after it may have reached the server is not retried: it raises
:class:`PossibleInconsistentStateError` (a :class:`StoreUnavailableError`): it may or may not have been
applied.

Processes: a child forked while stores are open cannot use them (kazoo's threads stay in the parent): they raise
:class:`StoreClosedError` there, and closing them in the child leaves the parent's session alone. The child opens
its own store.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import namedtuple
from collections.abc import Callable, Iterable
from typing import Any

from statekeep.errors import (AlreadyExistsError, BadVersionError, ForbiddenError, InvalidArgumentError,
                              InvalidPathError, MissingDependencyError, NotEmptyError, NotFoundError,
                              PossibleInconsistentStateError, StatekeepError, StoreClosedError,
                              StoreUnavailableError, UnauthorizedError, ValueTooLargeError)
from statekeep.metadata.base import MetadataStore
from statekeep.retry import DEFAULT as RETRY
from statekeep.metadata.types import (Check, Delete, GetResult, NotificationType, Op, Put,
                                      SessionEvent, Stat, join, parent_of, validate_path)
from statekeep.validate import check_number
from statekeep.lru import cached

try:
    from kazoo import exceptions as zke
    from kazoo.client import KazooClient, KazooState
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.protocol.serialization import (CheckVersion, Connect, Create, MultiHeader, SetData, Transaction,
                                              Watch, ZnodeStat, int_struct, read_buffer, read_string,
                                              stat_struct, write_string)
    from kazoo.protocol.serialization import Delete as ZDelete
    from kazoo.retry import KazooRetry
    from kazoo.security import OPEN_ACL_UNSAFE
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingDependencyError("zk:// needs kazoo: pip install 'statekeep[zookeeper]'") from e

log = logging.getLogger(__name__)

#: ZooKeeper's default jute.maxbuffer: the server drops a connection whose request is larger.
JUTE_MAXBUFFER = 0xFFFFF
_OP_OVERHEAD = 96  # bytes per operation besides path and value: headers, lengths, ACL, flags (~60) + margin
_WATCH_EVENTS = {1: NotificationType.Created, 2: NotificationType.Deleted, 3: NotificationType.Modified}
_MAX_REPLANS = 20  # a multi whose plan concurrent writers keep invalidating gives up after this

_ERRORS = {  # a failed ZooKeeper operation -> the statekeep error it means
    zke.NoNodeError: (NotFoundError, "does not exist"),
    zke.NodeExistsError: (AlreadyExistsError, "already exists"),
    zke.BadVersionError: (BadVersionError, "is not at the expected version"),
    zke.NotEmptyError: (NotEmptyError, "has children; use delete_recursive"),
    zke.NoChildrenForEphemeralsError: (InvalidArgumentError, "cannot be created: ZooKeeper allows no "
                                                             "children under an ephemeral key"),
    zke.BadArgumentsError: (InvalidPathError, "is not a valid ZooKeeper path"),
    zke.NoAuthError: (ForbiddenError, "is not accessible with these credentials"),
    zke.AuthFailedError: (UnauthorizedError, ": ZooKeeper authentication failed"),
}


class _AddWatch(namedtuple("_AddWatch", "path mode")):
    """``addWatch`` (opcode 106). Without a ``watcher`` attribute kazoo registers nothing for it."""

    type = 106

    def serialize(self) -> bytes:
        return bytes(write_string(self.path)) + bytes(int_struct.pack(self.mode))

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> None:
        return None


def _multi_response(buffer: bytes, offset: int,
                    read_one: Callable[[int, bytes, int], tuple[Any, ...]]) -> list[Any]:
    """The results of a multi response, one per operation: ``read_one(type, buffer, offset)`` decodes
    a successful one; a failed one becomes its kazoo exception (an instance, not raised)."""
    results: list[Any] = []
    header, offset = MultiHeader.deserialize(buffer, offset)
    while not header.done:
        if header.type == -1:
            result = zke.EXCEPTIONS[int_struct.unpack_from(buffer, offset)[0]]()
            offset += int_struct.size
        else:
            result, offset = read_one(header.type, buffer, offset)
        results.append(result)
        header, offset = MultiHeader.deserialize(buffer, offset)
    return results


def _read_stat(buffer: bytes, offset: int) -> tuple[ZnodeStat, int]:
    return ZnodeStat._make(stat_struct.unpack_from(buffer, offset)), offset + stat_struct.size


class _Txn(Transaction):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's Transaction, decoding exactly one result per operation (kazoo drops falsy ones): the
    created path (kazoo strips the chroot), a ZnodeStat (set), None, or a failed op's kazoo exception."""

    @staticmethod
    def _read_one(kind: int, buffer: bytes, offset: int) -> tuple[Any, ...]:
        if kind == Create.type:
            return tuple(read_string(buffer, offset))
        if kind == SetData.type:
            return _read_stat(buffer, offset)
        return None, offset

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        return _multi_response(buffer, offset, cls._read_one)


class _MultiRead(namedtuple("_MultiRead", "paths")):
    """``multiRead`` (opcode 22, ZooKeeper 3.6+) of getData requests: one request, one answer, for many
    reads (kazoo 2.11 lacks it). Each result is ``(data, ZnodeStat)``, or None for a missing node."""

    type = 22
    _GET_DATA = 4

    def serialize(self) -> bytes:
        out = bytearray()
        for path in self.paths:
            out += MultiHeader(self._GET_DATA, False, -1).serialize() + write_string(path) + b"\0"  # no watch
        return bytes(out + MultiHeader(-1, True, -1).serialize())

    @staticmethod
    def _read_one(kind: int, buffer: bytes, offset: int) -> tuple[Any, ...]:
        data, offset = read_buffer(buffer, offset)
        stat, offset = _read_stat(buffer, offset)
        return (data, stat), offset

    @classmethod
    def deserialize(cls, buffer: bytes, offset: int) -> list[Any]:
        results = _multi_response(buffer, offset, cls._read_one)
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, zke.NoNodeError):
                raise result
        return [None if isinstance(r, Exception) else r for r in results]


#: open stores, so that a forked child can disown the ones it inherited
_stores: weakref.WeakSet[ZooKeeperStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # kazoo's threads did not come along, and closing the inherited client would end the parent's session
    # (it shares the parent's socket): refuse its use and make close() a no-op here.
    for store in list(_stores):
        store._forked = store._closed = True
    _stores.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


_Step = namedtuple("_Step", "request op_index racy")  # racy: failing may mean a concurrent change: plan again


@cached(4096)  # a multi asks up to three times per op (plan, steps, remembered dirs)
def _ancestors(path: str) -> tuple[str, ...]:
    """Proper ancestors of ``path`` top-down, without "/"."""
    parts = path.split("/")[1:-1]
    return tuple("/" + "/".join(parts[: i + 1]) for i in range(len(parts)))


class ZooKeeperStore(MetadataStore):
    """``zk://HOST:PORT[,HOST:PORT...]/CHROOT``; see the module docstring for layout and guarantees.

    Options (URL query or keywords): ``session_timeout`` (seconds, default 10: how long the server keeps
    this store's session, hence its ephemeral keys, once it hears nothing from it), ``timeout`` (seconds,
    default 10: the longest an operation waits before :class:`StoreUnavailableError`), ``max_value_size``.
    """

    scheme = "zk"
    capabilities = frozenset({"persistent", "multi_process", "sessions", "sequence_counters"})
    max_multi_ops, max_request_bytes = 4000, JUTE_MAXBUFFER  # ZooKeeper caps the request bytes, not the ops
    #: jute.maxbuffer (1 MiB - 1) less 1 KiB for path and framing: a value this large with a path of up to
    #: ~800 bytes still fits in one request. Bigger state belongs in blob storage (statekeep.handles).
    backend_max_value_size = 1024 * 1024 - 1024

    def __init__(self, connect: str, *, session_timeout: float = 10.0, timeout: float = 10.0,
                 **options: Any) -> None:
        super().__init__(**options)
        hosts, _, chroot = connect.partition("/")
        chroot = "/" + chroot.strip("/") if chroot.strip("/") else ""
        if not hosts:
            raise InvalidArgumentError(f"zk:// needs HOST:PORT[,HOST:PORT...]/CHROOT, got {connect!r}")
        if chroot:
            validate_path(chroot)
        for name, value in (("timeout", timeout), ("session_timeout", session_timeout)):
            check_number(value, name, positive=True, unit=" of seconds")
        self._hosts, self._chroot, self._timeout = hosts, chroot, float(timeout)
        self._closing = self._watching = False
        self._watch_lock = threading.Lock()
        self._last_state: str | None = None
        # persistent paths seen to exist: a multi's plan skips reading them (most creates go under parents
        # that exist). If one was deleted meanwhile, its child's create fails with NoNode, a race the multi
        # already replans for, with this cache emptied: a stale entry costs a round trip, never a wrong result.
        self._known_dirs: set[str] = set()
        try:  # reconnect forever (operations time out on their own), and quickly
            self._client = KazooClient(hosts=hosts, timeout=float(session_timeout),
                                       connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0))
        except (ValueError, zke.KazooException) as e:
            raise InvalidArgumentError(f"bad ZooKeeper hosts {hosts!r}: {e}") from e
        # kazoo hands events only to its one-shot watchers; the listeners must see every event. This and the
        # other private attributes used here (_invoke, _session_id, _session_timeout, _live, _call) have no public
        # equivalent: pyproject.toml pins the kazoo minor version they are tested with.
        self._kazoo_read_watch_event = self._client._connection._read_watch_event
        self._client._connection._read_watch_event = self._read_watch_event
        self._kazoo_invoke = self._client._connection._invoke
        self._client._connection._invoke = self._invoke_handshake
        self._client.add_listener(self._on_state)
        _stores.add(self)
        try:
            self._client.start(timeout=self._timeout)
        except KazooTimeoutError as e:
            raise StoreUnavailableError(f"ZooKeeper at {hosts} not reachable within {timeout}s") from e
        try:
            if chroot:
                self._run(lambda: self._client.ensure_path_async(chroot), chroot)
        except BaseException:
            self._close()
            raise
        self._client.chroot = chroot  # from here on kazoo prefixes every path with it

    @property
    def timeout(self) -> float:
        """Seconds an operation may take before :class:`StoreUnavailableError`."""
        return self._timeout

    @property
    def session_timeout(self) -> float:
        """Seconds the server keeps the session (and its ephemeral keys) without hearing from us."""
        return float(self._client._session_timeout) / 1000

    # ---- reads -------------------------------------------------------------------------------

    def _get(self, path: str) -> GetResult | None:
        if path == "/":  # the chroot is the namespace, not a key
            return None
        try:
            value, zstat = self._run(lambda: self._client.get_async(path), path)
        except NotFoundError:
            return None
        return GetResult(value, self._stat(path, zstat))

    def _get_many(self, paths: list[str]) -> list[GetResult | None]:
        """One ``multiRead`` request per thousand paths."""
        out: list[GetResult | None] = []
        for i in range(0, len(paths), 1000):
            chunk = paths[i:i + 1000]
            request = _MultiRead([self._z(p) for p in chunk])
            answers = self._run(lambda: self._call(request), chunk[0])
            out += [None if a is None or p == "/" else GetResult(a[0], self._stat(p, a[1]))
                    for p, a in zip(chunk, answers)]
        return out

    def _exists(self, path: str) -> bool:
        return path != "/" and self._run(lambda: self._client.exists_async(path), path) is not None

    def _get_children(self, path: str) -> list[str]:
        try:
            names = self._run(lambda: self._client.get_children_async(path), path)
        except NotFoundError:
            return []
        if path == "/" and not self._chroot:
            names = [n for n in names if n != "zookeeper"]  # ZooKeeper's own subtree
        return sorted(names)

    # ---- writes ------------------------------------------------------------------------------

    def _put(self, op: Put) -> Stat:
        self._check_size([op])
        client, path = self._client, op.path
        if op.sequential or op.expected_version == -1:
            return self._create(op)
        if op.expected_version is not None:
            try:
                return self._stat(path, self._run(lambda: client.set_async(path, op.value, op.expected_version),
                                                  path, write=True))
            except NotFoundError as e:  # PIP-45: a version that cannot match is a BadVersion, absent or not
                raise BadVersionError(f"{path} does not exist (expected version {op.expected_version})") from e
        # unconditional: set if present, else create; a concurrent create or delete flips it
        for _ in RETRY.attempts():
            try:
                return self._stat(path, self._run(lambda: client.set_async(path, op.value, -1), path, write=True))
            except NotFoundError:
                pass
            try:
                return self._create(op)
            except AlreadyExistsError:
                continue
        raise BadVersionError(f"{path} kept being created and deleted concurrently; the put was not applied")

    def _create(self, op: Put) -> Stat:
        created, zstat = self._run(lambda: self._client.create_async(
            op.path, op.value, ephemeral=op.ephemeral, sequence=op.sequential, makepath=True, include_data=True),
            op.path, write=True)
        return self._stat(created, zstat)

    def _delete(self, op: Delete) -> None:
        self._known_dirs.discard(op.path)
        version = -1 if op.expected_version is None else op.expected_version
        self._run(lambda: self._client.delete_async(op.path, version), op.path, write=True)

    def _multi(self, ops: list[Op]) -> list[Stat | None]:
        self._check_size(ops)
        self._known_dirs.difference_update(op.path for op in ops if isinstance(op, Delete))
        for attempt in RETRY.bounded(attempts=_MAX_REPLANS).attempts():
            steps = self._plan(ops)
            results = self._run(lambda: self._call(_Txn([s.request for s in steps])), ops[0].path, write=True)
            failed = next((i for i, r in enumerate(results) if isinstance(r, Exception)
                           and not isinstance(r, (zke.RolledBackError, zke.RuntimeInconsistency))), None)
            if failed is None:
                self._remember_dirs(ops)
                return self._multi_results(ops, steps, results)
            step, error = steps[failed], results[failed]
            racy = (step.racy and isinstance(error, (zke.NodeExistsError, zke.NoNodeError, zke.BadVersionError))
                    or isinstance(step.request, Create) and isinstance(error, zke.NoNodeError))
            if not racy or attempt == _MAX_REPLANS - 1:
                path = ops[step.op_index].path if step.op_index is not None else self._unchroot(step.request.path)
                if (isinstance(step.request, SetData) and isinstance(error, zke.NoNodeError)
                        and ops[step.op_index].expected_version is not None):
                    # a Put with an expected version: PIP-45 makes an absent path a BadVersion, as in put()
                    raise BadVersionError(f"{path} does not exist (expected version "
                                          f"{ops[step.op_index].expected_version})") from error
                raise self._error(error, path or "/") from error
            self._known_dirs = set()  # the plan may have trusted a parent that is gone
        raise AssertionError("unreachable")

    def _plan(self, ops: list[Op]) -> list[_Step]:
        """ZooKeeper operations for ``ops``, from one pipelined read of the paths whose state decides
        their form (less the ancestors of creates in ``_known_dirs`` or written by an earlier op of the
        multi); ``known`` tracks the effect of the multi's earlier operations."""
        dirs = self._known_dirs
        needed: set[str] = set()
        written: set[str] = set()  # exist once the multi's earlier ops ran (else the multi fails whole)
        for op in ops:
            if isinstance(op, Put) and (op.sequential or op.expected_version in (None, -1)):
                needed.update(a for a in _ancestors(op.path) if a not in dirs and a not in written)
                if not op.sequential:
                    written.add(op.path)
                    if op.expected_version is None:  # create or set? A create-only put (-1) is a Create
                        needed.add(op.path)           # either way: ZooKeeper fails it if the key exists
            elif isinstance(op, Check) and op.version == -1:
                needed.update(_ancestors(op.path), [op.path])
        paths = sorted(needed)
        stats = {}
        if paths:
            stats = dict(zip(paths, self._run(lambda: [self._client.exists_async(p) for p in paths], "/")))
        known: dict[str, tuple[bool, bool, int | None]] = {"/": (True, False, None)}  # exists, ephemeral, version

        def state(p: str) -> tuple[bool, bool, int | None]:
            if p not in known:
                z = stats.get(p)
                if z is None and p not in stats and p in dirs:
                    known[p] = (True, False, None)
                else:
                    known[p] = (False, False, None) if z is None else (True, z.ephemeralOwner != 0, z.version)
            return known[p]

        acl = self._client.default_acl or OPEN_ACL_UNSAFE
        steps: list[_Step] = []
        for i, op in enumerate(ops):
            z = self._z(op.path)
            if isinstance(op, Put):
                exists, ephemeral, version = state(op.path)
                if op.sequential or op.expected_version == -1 or op.expected_version is None and not exists:
                    for a in _ancestors(op.path):
                        if not state(a)[0]:
                            steps.append(_Step(Create(self._z(a), b"", acl, 0), None, True))
                            known[a] = (True, False, 0)
                    flags = (1 if op.ephemeral else 0) | (2 if op.sequential else 0)
                    steps.append(_Step(Create(z, op.value, acl, flags), i, op.expected_version is None))
                    if not op.sequential:
                        known[op.path] = (True, op.ephemeral, 0)
                else:
                    expected = -1 if op.expected_version is None else op.expected_version
                    steps.append(_Step(SetData(z, op.value, expected), i, op.expected_version is None))
                    known[op.path] = (True, ephemeral, None if version is None else version + 1)
            elif isinstance(op, Delete):
                steps.append(_Step(ZDelete(z, -1 if op.expected_version is None else op.expected_version), i, False))
                known[op.path] = (False, False, None)
            elif op.version >= 0:
                steps.append(_Step(CheckVersion(z, op.version), i, False))
            else:  # must be absent: create and delete its first missing component, which fails iff it exists
                first = next((p for p in [*_ancestors(op.path), op.path] if not state(p)[0]), op.path)
                _, parent_ephemeral, parent_version = state(parent_of(first))
                if parent_ephemeral:  # no children under an ephemeral: absent while that stays unchanged
                    if parent_version is not None:
                        steps.append(_Step(CheckVersion(self._z(parent_of(first)), parent_version), None, True))
                    continue
                after = ops[i + 1] if i + 1 < len(ops) else None
                if (not state(first)[0] and isinstance(after, Put)
                        and (after.sequential or after.expected_version in (None, -1))
                        and (after.path == first or after.path.startswith(first + "/"))):
                    continue  # the next op creates the absent `first`: that fails exactly when this would
                steps.append(_Step(Create(self._z(first), b"", acl, 0), i, first != op.path))
                steps.append(_Step(ZDelete(self._z(first), -1), None, True))
        return steps

    def _last_sequence(self, parent: str) -> int:
        # ZooKeeper numbers a sequential child after its parent's cversion (child creations and deletions so
        # far), so the numbers handed out are below it; deletions may make the next number lower than it
        zstat = self._run(lambda: self._client.exists_async(parent), parent)
        return 0 if zstat is None else max(zstat.cversion - 1, 0)

    def _raise_sequence(self, parent: str, at_least: int) -> int:
        # ZooKeeper offers no way to set a cversion: numbers are handed out for real, by creating sequential
        # scratch children in transactions and deleting them; the numbers they got say where the counter is.
        # The next number follows the cversion but not as a documented formula (a deletion counts in the
        # cversion, not always in the next number), so at least one scratch child is created to learn it.
        estimate = self._last_sequence(parent)
        scratch = self._z(join(parent, f".statekeep-sequence-{os.urandom(4).hex()}-"))
        per_txn = max(1, min(1000, (JUTE_MAXBUFFER - 1024) // (len(scratch.encode()) + 10 + _OP_OVERHEAD)))
        acl = self._client.default_acl or OPEN_ACL_UNSAFE
        while True:
            count = max(1, min(at_least - estimate, per_txn))
            created = self._scratch_txn([Create(scratch, b"", acl, 2) for _ in range(count)], parent)
            estimate = max(int(name[-10:]) for name in created)
            self._scratch_txn([ZDelete(self._z(name), -1) for name in created], parent)
            if estimate >= at_least:
                return estimate

    def _scratch_txn(self, requests: list[Any], parent: str) -> list[Any]:
        results: list[Any] = self._run(lambda: self._call(_Txn(requests)), parent, write=True)
        failed = next((r for r in results if isinstance(r, Exception) and not isinstance(r, zke.RolledBackError)),
                      None)
        if failed is not None:
            raise self._error(failed, parent) from failed
        return results

    def _remember_dirs(self, ops: list[Op]) -> None:
        """After a committed multi: the ancestors of its creates exist (created persistent if missing)."""
        if len(self._known_dirs) > 10_000:
            self._known_dirs = set()
        for op in ops:
            if isinstance(op, Put) and (op.sequential or op.expected_version in (None, -1)):
                self._known_dirs.update(_ancestors(op.path))

    def _multi_results(self, ops: list[Op], steps: list[_Step], results: list[Any]) -> list[Stat | None]:
        # A transaction's operations share its time, but a create inside a multi is answered with its
        # path only: take the time from a set in the same multi, else read a created key's ctime.
        txn_ms = next((r.mtime for r in results if isinstance(r, ZnodeStat)), None)
        created = [r for s, r in zip(steps, results)  # not a Check's probe: that one is gone
                   if isinstance(r, str) and (s.op_index is None or isinstance(ops[s.op_index], Put))]
        if txn_ms is None and created:
            try:
                zstat = self._run(lambda: self._client.exists_async(created[-1]), created[-1])
                txn_ms = zstat and zstat.ctime
            except StoreUnavailableError:
                pass
            txn_ms = txn_ms or int(time.time() * 1000)
        out: list[Stat | None] = [None] * len(ops)
        for step, result in zip(steps, results):
            if step.op_index is not None and isinstance(op := ops[step.op_index], Put):
                out[step.op_index] = (Stat(result, 0, txn_ms or 0, txn_ms or 0, op.ephemeral, op.ephemeral)
                                      if isinstance(result, str) else self._stat(op.path, result))
        return out

    # ---- notifications and sessions ----------------------------------------------------------

    def _on_listener_added(self) -> None:
        with self._watch_lock:
            if self._watching:
                return
            self._watching = True
        if not self._client.connected:
            return  # _on_state adds it on connection
        try:  # wait, so that every change made after add_listener returns is seen
            self._add_watch().get(timeout=self._timeout)
        except Exception as e:  # it is added again on the next connection
            log.warning("zk store %s%s: could not add the watch yet: %r", self._hosts, self._chroot, e)

    def _add_watch(self) -> Any:
        return self._call(_AddWatch(self._chroot or "/", 1))  # 1: persistent recursive

    def _invoke_handshake(self, timeout: float, request: Any, xid: int | None = None) -> Any:
        """kazoo's request during connection establishment (on its connection thread): the handshake
        (``Connect``) waits a third of the session timeout at most for its answer (see the module's
        Failures), leaving the rest of the session timeout for another attempt."""
        if isinstance(request, Connect):
            timeout = min(timeout, self._client._session_timeout / 1000 / 3)
        return self._kazoo_invoke(timeout, request, xid)

    def _read_watch_event(self, buffer: bytes, offset: int) -> None:
        """On kazoo's connection thread, for every watch event: must neither block nor raise."""
        self._kazoo_read_watch_event(buffer, offset)
        try:
            event, _ = Watch.deserialize(buffer, offset)
            path = self._unchroot(event.path)
            if path in (None, "/") or not self._chroot and (path + "/").startswith("/zookeeper/"):
                return
            if event.type in _WATCH_EVENTS:
                self._emit_change(_WATCH_EVENTS[event.type], path)
        except Exception:  # an exception here would end kazoo's connection thread
            log.exception("zk store %s%s: bad watch event", self._hosts, self._chroot)

    def _on_state(self, state: str) -> None:
        """kazoo state listener (connection thread; must not block) -> session events."""
        if self._closing:
            return
        if state == KazooState.SUSPENDED:
            self._last_state = "suspended"
            self._emit_session(SessionEvent.ConnectionLost)
        elif state == KazooState.LOST:
            self._last_state = "lost"
            self._emit_session(SessionEvent.SessionLost)
        elif state == KazooState.CONNECTED:
            previous, self._last_state = self._last_state, "connected"
            if self._watching:  # a new connection has no watches; this is queued before later requests
                self._add_watch().rawlink(self._log_watch_failure)
            if previous == "suspended":
                self._emit_session(SessionEvent.Reconnected)
            elif previous == "lost":
                self._emit_session(SessionEvent.SessionReestablished)

    @staticmethod
    def _log_watch_failure(result: Any) -> None:
        if result.exception:
            log.warning("zk: re-adding watch: %r", result.exception)

    def expire_session(self) -> None:
        """Test hook: have the server expire this store's session, as when the process stalls beyond
        ``session_timeout``: its ephemeral keys are deleted, ``ConnectionLost``, ``SessionLost`` and
        ``SessionReestablished`` follow. Returns once a new session is connected."""
        lost = threading.Event()
        def on_state(state: str) -> bool:
            if state == KazooState.LOST:
                lost.set()
            return False  # stay registered (removed below)

        self._client.add_listener(on_state)
        deadline = time.monotonic() + max(self._timeout, 30.0)
        try:
            while not lost.wait(0.05):
                if time.monotonic() > deadline:
                    raise StoreUnavailableError("could not expire the ZooKeeper session")
                if (client_id := self._client.client_id) is None:
                    continue
                # The classic trick: a second client takes over the session, then closes it.
                other = KazooClient(hosts=self._hosts, client_id=client_id,
                                    timeout=self._client._session_timeout / 1000)
                try:
                    other.start(timeout=self._timeout)
                    other.stop()
                except KazooTimeoutError:
                    pass
                finally:
                    other.close()
                lost.wait(2.0)
        finally:
            self._client.remove_listener(on_state)
        if not self._client._live.wait(self._timeout):
            raise StoreUnavailableError("no new ZooKeeper session after the expiry")

    def _close(self) -> None:
        self._closing = True
        _stores.discard(self)
        try:
            self._client.stop()
        except Exception:  # closing must not fail; the server ends the session after its timeout
            log.warning("zk store %s%s: unclean close", self._hosts, self._chroot, exc_info=True)
        finally:
            self._client.close()

    # ---- plumbing ----------------------------------------------------------------------------

    def _run(self, start: Callable[[], Any], path: str, *, write: bool = False) -> Any:
        """Start a request (or a list of them) and return its result(s) within ``timeout`` seconds.
        Requests that never reached the server are retried once reconnected, reads also when the
        connection broke under them; a write then raises PossibleInconsistentStateError."""
        deadline = time.monotonic() + self._timeout
        while True:
            if self._closed:
                raise StoreClosedError("ZooKeeperStore is closed")
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._client._live.wait(remaining):
                raise StoreUnavailableError(f"ZooKeeper at {self._hosts} not reachable within {self._timeout}s")
            try:
                started = start()
                if isinstance(started, list):
                    return [r.get(timeout=max(deadline - time.monotonic(), 0.001)) for r in started]
                return started.get(timeout=max(deadline - time.monotonic(), 0.001))
            except zke.ConnectionClosedError as e:
                raise StoreClosedError("ZooKeeperStore is closed") from e
            except zke.SessionExpiredError:  # refused unsent as the session ended: wait for the next one
                continue
            except zke.ConnectionLoss as e:
                if write:
                    raise PossibleInconsistentStateError(f"connection to ZooKeeper lost during a write to {path}; "
                                                         "it may or may not have been applied") from e
            except KazooTimeoutError as e:
                if write:
                    raise PossibleInconsistentStateError(f"no answer from ZooKeeper in {self._timeout}s on a write "
                                                         f"to {path}; it may or may not have been applied") from e
                raise StoreUnavailableError(f"no answer from ZooKeeper in {self._timeout}s on {path}") from e
            except zke.KazooException as e:
                raise self._error(e, path) from e

    def _call(self, request: Any) -> Any:
        result = self._client.handler.async_result()
        self._client._call(request, result)
        return result

    def _check_size(self, ops: Iterable[Op]) -> None:
        # An oversized request makes the server drop the connection: refuse it before sending.
        size = 16 + sum(len(self._z(op.path).encode()) + _OP_OVERHEAD
                        + (len(op.value) if isinstance(op, Put) else 0) for op in ops)
        if size > JUTE_MAXBUFFER:
            raise ValueTooLargeError(f"this request needs about {size} bytes; ZooKeeper takes at most "
                                     f"{JUTE_MAXBUFFER} (jute.maxbuffer) per request; keep large state in "
                                     "blob storage with statekeep.handles.StateHandleStore")

    def _stat(self, path: str, z: ZnodeStat) -> Stat:
        owner = z.ephemeralOwner
        return Stat(path, z.version, z.ctime, z.mtime, owner != 0, owner != 0 and owner == self._client._session_id)

    def _z(self, path: str) -> str:
        return self._chroot + path if path != "/" else (self._chroot or "/")

    def _unchroot(self, path: str) -> str | None:
        """The store path of the znode ``path``; None outside the chroot."""
        if not self._chroot:
            return path
        if path == self._chroot:
            return "/"
        return path[len(self._chroot):] if path.startswith(self._chroot + "/") else None

    @staticmethod
    def _error(e: Exception, path: str) -> StatekeepError:
        for kazoo_type, (error_type, message) in _ERRORS.items():
            if isinstance(e, kazoo_type):
                return error_type(f"{path} {message}")
        return StoreUnavailableError(f"ZooKeeper failed on {path}: {type(e).__name__} {e}")
