"""zk:// beyond the contract suite: native layout, transaction planning, and faults on a real server
(kill -9 under load, session expiry, reconnection). Destructive tests use their own server."""

from __future__ import annotations

import random
import threading
import time
import uuid

import pytest
from conftest import need

from statekeep.errors import (AlreadyExistsError, InvalidArgumentError, NotFoundError,
                              PossibleInconsistentStateError, StatekeepError, StoreUnavailableError,
                              ValueTooLargeError)
from statekeep.metadata import Check, Delete, Notification, NotificationType, Put, SessionEvent, open_store
from statekeep.testing import servers, wait_for
from support.tcp_proxy import TcpProxy

kazoo_client = need("kazoo.client")

Created, Modified, Deleted = NotificationType.Created, NotificationType.Modified, NotificationType.Deleted


def _opener(address: str):
    chroot = f"/t{uuid.uuid4().hex[:12]}"
    opened = []

    def _open(**options):
        # a short timeout is also the first session's: on a loaded machine a just-started server may take
        # longer to give one, which is not what these tests check, so opening waits for a server that serves
        deadline = time.monotonic() + 60
        while True:
            try:
                store = open_store(f"zk://{address}{chroot}", **options)
                break
            except StoreUnavailableError:
                if time.monotonic() > deadline:
                    raise
        opened.append(store)
        return store

    _open.chroot = chroot
    return _open, opened


@pytest.fixture
def zk(zk_server):
    """Opens stores on one fresh chroot of the shared server; ``zk.chroot`` names it."""
    _open, opened = _opener(zk_server.address)
    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def raw(zk_server):
    client = kazoo_client.KazooClient(hosts=zk_server.address)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


# ---- layout --------------------------------------------------------------------------------------


def test_native_layout_is_what_zookeeper_tools_see(zk, raw):
    store = zk()
    store.put("/a/b", b"\x00raw\xff")
    assert raw.get(zk.chroot + "/a/b")[0] == b"\x00raw\xff"
    assert raw.get(zk.chroot + "/a")[0] == b""  # an ancestor is an empty znode
    eph = store.put("/e", b"", ephemeral=True)
    assert raw.exists(zk.chroot + "/e").ephemeralOwner != 0 and eph.created_by_self
    seq = store.put("/q/item-", b"s", sequential=True)
    assert raw.get_children(zk.chroot + "/q") == [seq.path.rsplit("/", 1)[1]]
    assert raw.get(zk.chroot + "/a/b")[1].version == store.get("/a/b").stat.version == 0


def test_changes_made_with_zookeeper_tools_are_seen(zk, raw):
    store = zk()
    events = []
    store.add_listener(events.append)
    raw.create(zk.chroot + "/native/k", b"v", makepath=True)
    raw.set(zk.chroot + "/native/k", b"w")
    assert store.get("/native/k").value == b"w" and store.get("/native/k").stat.version == 1
    raw.delete(zk.chroot + "/native/k")
    expected = [Notification(Created, "/native/k"), Notification(NotificationType.ChildrenChanged, "/native"),
                Notification(Modified, "/native/k"), Notification(Deleted, "/native/k")]
    assert wait_for(lambda: all(e in events for e in expected)), events


def test_children_under_an_ephemeral_key_are_refused_with_the_cause_chained(zk):
    store = zk()
    store.put("/eph", b"", ephemeral=True)
    with pytest.raises(InvalidArgumentError) as info:
        store.put("/eph/child", b"")
    assert type(info.value.__cause__).__module__.startswith("kazoo")


# ---- multi planning ------------------------------------------------------------------------------


def test_failed_multi_leaves_no_ancestors_behind(zk):
    store = zk()
    with pytest.raises(NotFoundError):
        store.multi([Put("/deep/x/y", b"1"), Put("/other/z", b"2", -1), Check("/absent", 0)])
    assert store.get_children("/") == []
    store.put("/set", b"")
    stats = store.multi([Put("/deep/x/y", b"1"), Put("/set", b"2"), Put("/other/z", b"3", -1)])
    assert [s.version for s in stats] == [0, 1, 0]
    assert stats[0].created_ms == stats[1].modified_ms == stats[2].created_ms  # one transaction, one time
    only_creates = store.multi([Put("/c1", b""), Put("/c2", b"", -1)])
    assert only_creates[0].created_ms == only_creates[1].modified_ms == store.get("/c2").stat.created_ms
    assert store.get("/deep/x").value == b"" and store.get_children("/") == ["c1", "c2", "deep", "other", "set"]


def test_multi_plans_again_when_a_parent_it_saw_was_deleted_by_another_client(zk):
    """A multi skips reading parents it saw before; another client deleting one costs a retry, not an error."""
    mine, other = zk(), zk()
    mine.multi([Put("/d/e/x", b"", -1), Put("/d/e/s-", b"", sequential=True)])
    other.delete_recursive("/d")
    stats = mine.multi([Put("/d/e/y", b"1", -1), Put("/d/e/s-", b"", sequential=True)])
    assert stats[0].version == 0 and mine.get_children("/d/e") == [stats[1].path.rpartition("/")[2], "y"]
    other.delete_recursive("/d")
    other.put("/d", b"", ephemeral=True)
    with pytest.raises(InvalidArgumentError):  # now an ephemeral: no children, as for a fresh plan
        mine.multi([Put("/d/e/z", b"", -1)])
    assert not mine.exists("/d/e")


def test_check_absent(zk):
    store, events = zk(), []
    store.put("/p/exists", b"")
    store.put("/eph", b"", ephemeral=True)
    store.add_listener(events.append)
    store.multi([Check("/p/absent", -1), Check("/no/such/parent", -1), Check("/eph/child", -1)])
    with pytest.raises(AlreadyExistsError):
        store.multi([Put("/p/new", b""), Check("/p/exists", -1)])
    assert not store.exists("/p/new") and not store.exists("/no")
    store.multi([Check("/p/k", -1), Put("/p/k", b"v")])  # create-if-absent: no probe
    with pytest.raises(AlreadyExistsError):
        store.multi([Check("/p/k", -1), Put("/p/k", b"w")])
    assert store.get("/p/k").value == b"v"
    assert wait_for(lambda: Notification(Created, "/p/k") in events)
    assert Notification(Deleted, "/p/k") not in events


def _snapshot(store, paths):
    out = {}
    for path in paths:
        result = store.get(path)
        out[path] = None if result is None else (result.value, result.stat.version, result.stat.ephemeral,
                                                 result.stat.created_by_self, store.get_children(path))
    return out, store.get_children("/")


def _outcome(call):
    try:
        result = call()
    except StatekeepError as e:
        return type(e).__name__
    if isinstance(result, list):
        return [None if s is None else (s.path, s.version, s.ephemeral, s.created_by_self) for s in result]
    return None if result is None else (result.path, result.version, result.ephemeral, result.created_by_self)


@pytest.mark.parametrize("seed", range(6))
def test_same_results_as_the_memory_backend(zk, seed):
    """Random single operations and multis on a small tree give the memory backend's answers."""
    parents, leaves = ["/a", "/a/b", "/e"], ["/a/b/c", "/a/d", "/e/f", "/g"]
    paths = parents + leaves
    rng = random.Random(seed)
    store, reference = zk(), open_store(f"memory://{uuid.uuid4().hex}")

    def random_op(path=None):
        path, kind = path or rng.choice(paths), rng.random()
        if kind < 0.55:
            return Put(path, rng.choice([b"", b"x", b"yy"]), rng.choice([None, None, -1, 0, 1, 2]),
                       ephemeral=path in leaves and rng.random() < 0.2)
        if kind < 0.8:
            return Delete(path, rng.choice([None, None, 0, 1]))
        return Check(path, rng.choice([-1, -1, 0, 1]))

    try:
        for step in range(150):
            if rng.random() < 0.5:
                what = [random_op(path) for path in rng.sample(paths, rng.randint(1, 4))]  # one write a path
                calls = [lambda s=s, ops=what: s.multi(ops) for s in (store, reference)]
            else:
                op = what = random_op()
                while isinstance(op, Check):
                    op = what = random_op()
                if isinstance(op, Put):
                    calls = [lambda s=s: s.put(op.path, op.value, op.expected_version, ephemeral=op.ephemeral)
                             for s in (store, reference)]
                else:
                    calls = [lambda s=s: s.delete(op.path, op.expected_version) for s in (store, reference)]
            got, want = _outcome(calls[0]), _outcome(calls[1])
            assert got == want, (step, what)
            assert _snapshot(store, paths) == _snapshot(reference, paths), step
    finally:
        reference.close()


def test_unconditional_writes_race_deletes_without_leaking_errors(zk):
    writers = [zk() for _ in range(3)]
    stop = threading.Event()
    failures = []

    def write(store, n):
        try:
            for i in range(60):
                store.put(f"/race/k{i % 3}", b"%d" % n)
                store.multi([Put(f"/race/m{i % 3}/v", b"%d" % n), Check(f"/race/m{i % 3}/never", -1)])
        except Exception as e:  # noqa: BLE001 - any error is a failure here
            failures.append(e)

    def delete(store):
        while not stop.is_set():
            store.delete_recursive("/race")

    deleter = threading.Thread(target=delete, args=(zk(),))
    deleter.start()
    threads = [threading.Thread(target=write, args=(s, n)) for n, s in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    deleter.join()
    assert failures == []


# ---- sizes and configuration ---------------------------------------------------------------------


def test_value_limit_fits_a_zookeeper_request(zk):
    store = zk()
    assert store.max_value_size == 1024 * 1024 - 1024
    long_path = "/" + "p" * 400 + "/" + "k" * 300
    store.put(long_path, b"v" * store.max_value_size)
    assert len(store.get(long_path).value) == store.max_value_size
    with pytest.raises(ValueTooLargeError):  # each value fits, the transaction would not
        store.multi([Put("/m1", b"x" * 600_000), Put("/m2", b"x" * 600_000)])
    assert not store.exists("/m1")


def test_unreachable_server_fails_within_the_timeout():
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        open_store(f"zk://127.0.0.1:{servers.free_port()}/x", timeout=1)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("query", ["timeout=0", "session_timeout=-1", "timeout=soon"])
def test_bad_options(zk_server, query):
    with pytest.raises(InvalidArgumentError):
        open_store(f"zk://{zk_server.address}/x?{query}")


def test_url_options_apply(zk_server):
    with open_store(f"zk://{zk_server.address}/opts?session_timeout=2&timeout=3") as store:
        assert store.timeout == 3.0 and store.session_timeout == 2.0


# ---- faults (their own server) -------------------------------------------------------------------


@pytest.fixture(scope="module")
def fault_server(start_zookeeper):
    server = start_zookeeper()
    yield server
    server.stop()


@pytest.fixture
def fz(fault_server):
    if fault_server.process.poll() is not None:  # a previous test failed while it was down
        fault_server.start()
    _open, opened = _opener(fault_server.address)
    yield _open
    for store in opened:
        store.close()


def test_kill_9_under_load(fz, fault_server):
    """While the server is down every operation fails within ``timeout``; after it restarts writes
    succeed again, and every acknowledged write is there. A write cut off in flight raises
    PossibleInconsistentStateError (a StoreUnavailableError): it may or may not be there."""
    store = fz(timeout=2, session_timeout=10)
    session_events = []
    store.add_session_listener(session_events.append)
    acked, failed = [], []
    stop = threading.Event()

    def load():
        i = 0
        while not stop.is_set():
            path = f"/load/{i:06d}"
            i += 1
            try:
                store.put(path, path.encode())
                acked.append(path)
            except StoreUnavailableError:
                failed.append(path)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        assert wait_for(lambda: len(acked) >= 200)
        fault_server.kill()
        assert wait_for(lambda: SessionEvent.ConnectionLost in session_events)
        for operation in (lambda: store.get("/load/000000"), lambda: store.exists("/x"),
                          lambda: store.get_children("/load"), lambda: store.put("/down", b""),
                          lambda: store.multi([Put("/down/m", b"")]), lambda: store.delete("/down")):
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError) as info:
                operation()
            assert time.monotonic() - started < 2 + 1.5
            assert not isinstance(info.value, PossibleInconsistentStateError)  # refused unsent: not written
        before_restart = len(acked)
        fault_server.restart()
        assert wait_for(lambda: len(acked) >= before_restart + 100, timeout=30)
    finally:
        stop.set()
        loader.join(timeout=30)
    assert failed, "the outage went unnoticed"
    assert wait_for(lambda: SessionEvent.Reconnected in session_events)
    checker = fz()
    missing = [path for path in acked if (r := checker.get(path)) is None or r.value != path.encode()]
    assert missing == []


def _exists_once_reachable(store, path: str) -> bool:
    try:
        return store.exists(path)
    except StoreUnavailableError:
        return False


def test_short_outage_keeps_the_session_and_the_watch(fz, fault_server):
    store, other, late, doomed = fz(session_timeout=10), fz(), fz(), fz()
    session_events, events, late_events = [], [], []
    store.add_session_listener(session_events.append)
    store.add_listener(events.append)
    store.put("/eph", b"", ephemeral=True)
    fault_server.kill()
    assert wait_for(lambda: SessionEvent.ConnectionLost in session_events)
    started = time.monotonic()
    late.add_listener(late_events.append)  # while down: returns at once, watches from the reconnection on
    doomed.close()  # while down: does not hang
    assert time.monotonic() - started < 3
    fault_server.restart()  # returns once the server serves
    # An attempt that reached the server while it was starting may go unanswered (see the next test): the
    # store tries again after a third of its session timeout. Reconnected, not SessionLost, comes then.
    assert wait_for(lambda: {SessionEvent.Reconnected, SessionEvent.SessionLost} & set(session_events), timeout=30)
    assert SessionEvent.SessionLost not in session_events, session_events
    assert store.get("/eph").stat.created_by_self  # same session: the ephemeral key stayed
    assert wait_for(lambda: _exists_once_reachable(late, "/eph"), timeout=30)  # late is connected again too
    other.put("/after-reconnect", b"")
    for seen in (events, late_events):
        assert wait_for(lambda: Notification(Created, "/after-reconnect") in seen)


def test_a_handshake_the_server_never_answers_is_tried_again_within_the_session(zk_server):
    """A server may accept a connection and never answer its handshake (ZooKeeper 3.8 while it starts up,
    ZOOKEEPER-5051). A store reconnecting through two such connections in a row keeps its session: each attempt
    waits for the answer a third of the session timeout (kazoo alone waits all of it: the session would be gone)."""
    with TcpProxy(zk_server.port) as proxy:
        _open, opened = _opener(proxy.address)
        try:
            store = _open(session_timeout=9)
            session_events = []
            store.add_session_listener(session_events.append)
            store.put("/eph", b"", ephemeral=True)  # the server heard from the session just now
            proxy.black_hole(2)
            proxy.drop()
            assert wait_for(lambda: {SessionEvent.Reconnected, SessionEvent.SessionLost} & set(session_events),
                            timeout=60)
            assert len(proxy.held) == 2  # both unanswered attempts were made, then a third was answered
            assert SessionEvent.SessionLost not in session_events, session_events
            assert store.get("/eph").stat.created_by_self  # the same session: its ephemeral key stayed
        finally:
            for opened_store in opened:
                opened_store.close()


def test_session_expiry(fz):
    owner, observer = fz(session_timeout=2), fz()
    session_events, owner_events, observed = [], [], []
    owner.add_session_listener(session_events.append)
    owner.add_listener(owner_events.append)
    observer.add_listener(observed.append)
    owner.put("/locks/me", b"owner", ephemeral=True)
    owner.expire_session()
    assert wait_for(lambda: SessionEvent.SessionReestablished in session_events)
    assert session_events.index(SessionEvent.SessionLost) < session_events.index(SessionEvent.SessionReestablished)
    assert wait_for(lambda: Notification(Deleted, "/locks/me") in observed)
    assert not observer.exists("/locks/me")
    assert owner.put("/locks/me", b"again", ephemeral=True).created_by_self  # the new session works
    observer.put("/after-expiry", b"")
    assert wait_for(lambda: Notification(Created, "/after-expiry") in owner_events)  # watch added again


def test_largest_values_survive_a_crash(fz, fault_server):
    store = fz()
    store.put("/big", b"b" * store.max_value_size)
    store.multi([Put("/half1", b"1" * 500_000), Put("/half2", b"2" * 500_000)])
    fault_server.kill()
    fault_server.restart()
    reader = fz()
    assert reader.get("/big").value == b"b" * store.max_value_size
    assert reader.get("/half2").value == b"2" * 500_000
