"""What is particular to etcd://: its native layout, the limits of etcd transactions, server crashes and lease
expiry. The contract itself runs against etcd in tests/contract through conftest.BACKENDS."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid

import pytest
from conftest import missing, need

need("aetcd")

from statekeep.errors import (  # noqa: E402
    InvalidArgumentError,
    PossibleInconsistentStateError,
    StoreUnavailableError,
    ValueTooLargeError,
)
from statekeep.metadata import Delete, Notification, NotificationType, Put, SessionEvent, open_store  # noqa: E402
from statekeep.metadata.etcd import EtcdStore  # noqa: E402
from statekeep.testing import servers, wait_for  # noqa: E402
from statekeep.testing.faults import stall_event_loop  # noqa: E402


@pytest.fixture
def prefix() -> str:
    return f"/t{uuid.uuid4().hex[:12]}"


@pytest.fixture
def url(etcd_server, prefix) -> str:
    return f"etcd://{etcd_server.address}{prefix}"


@pytest.fixture
def store_url(url) -> str:
    """This module's store: what ``open_url`` (the contract suites' fixture) opens by default."""
    return url


@pytest.fixture(scope="module")
def crash_server(start_etcd):
    """A server of its own for the tests that kill it."""
    server = start_etcd()
    yield server
    server.stop()


def raw_range(address: str, start: bytes, end: bytes | None = None) -> dict[bytes, tuple[bytes, int]]:
    """key -> (value, etcd version) for the keys in [start, end) (a prefix range if end is None), read by a
    plain aetcd client: what any etcd tool sees."""
    import aetcd
    from aetcd.utils import prefix_range_end

    async def read():
        host, port = address.rsplit(":", 1)
        async with aetcd.Client(host=host, port=int(port), timeout=5) as client:
            found = await client.get_range(start, end if end is not None else prefix_range_end(start))
            return {kv.key: (kv.value, kv.version) for kv in found}

    return asyncio.run(read())


def etcdctl(address: str, *args: str) -> str:
    if shutil.which("etcdctl") is None:
        missing("etcdctl is not installed (Debian's etcd-client)")
    env = dict(os.environ, ETCDCTL_API="3")
    return subprocess.run(["etcdctl", f"--endpoints={address}", *args], env=env, check=True,
                          capture_output=True, timeout=30).stdout.decode()


# ---- layout -------------------------------------------------------------------------------------


def test_keys_are_prefix_plus_path_holding_the_raw_bytes(open_url, url, etcd_server, prefix):
    store = open_url(url)
    raw = bytes(range(256))
    store.put("/a/b", raw)
    store.put("/a/b", raw + b"!")
    store.put("/a/c", b"plain")
    data = raw_range(etcd_server.address, f"{prefix}/".encode())
    assert data == {f"{prefix}/a".encode(): (b"", 1),  # the ancestor the put created
                    f"{prefix}/a/b".encode(): (raw + b"!", 2),  # etcd version 2 is contract version 1
                    f"{prefix}/a/c".encode(): (b"plain", 1)}
    assert store.get("/a/b").stat.version == 1
    assert etcdctl(etcd_server.address, "get", f"{prefix}/a/c", "--print-value-only").strip() == "plain"
    keys = etcdctl(etcd_server.address, "get", "--prefix", f"{prefix}/", "--keys-only").split()
    assert keys == [f"{prefix}/a", f"{prefix}/a/b", f"{prefix}/a/c"]


def test_children_index_holds_only_immediate_children(open_url, url, etcd_server, prefix):
    store = open_url(url)
    for path in ["/p/a", "/p/b", "/p/a/x/y", "/p-sibling", "/q/n-"]:
        store.put(path, b"", sequential=path.endswith("-"))
    index = lambda parent: sorted(raw_range(etcd_server.address, f"{prefix}\0c{parent}\0".encode()))  # noqa: E731
    assert index("/p") == [f"{prefix}\0c/p\0{name}".encode() for name in ("a", "b")]
    assert index("/p/a") == [f"{prefix}\0c/p/a\0x".encode()]
    assert store.get_children("/p") == ["a", "b"]
    # the sequence counter of /q lives outside the data range
    assert raw_range(etcd_server.address, f"{prefix}\0s/q".encode()) == {f"{prefix}\0s/q".encode(): (b"1", 1)}
    store.delete_recursive("/p")
    assert index("/p") == [] and index("/p/a") == []
    assert store.get_children("/") == ["p-sibling", "q"]


def test_writes_by_other_etcd_tools_are_read_and_notified(open_url, url, etcd_server, prefix):
    store = open_url(url)
    events: list[Notification] = []
    store.add_listener(events.append)
    etcdctl(etcd_server.address, "put", f"{prefix}/ext", "v1")
    etcdctl(etcd_server.address, "put", f"{prefix}/ext", "v2")
    result = store.get("/ext")
    assert result.value == b"v2" and result.stat.version == 1
    assert wait_for(lambda: Notification(NotificationType.Modified, "/ext") in events)
    assert events[:3] == [Notification(NotificationType.Created, "/ext"),
                          Notification(NotificationType.ChildrenChanged, "/"),
                          Notification(NotificationType.Modified, "/ext")]
    assert store.get_children("/") == []  # written without an index entry: documented, not listed


def test_internal_keys_never_notify(open_url, url):
    writer, observer = open_url(url), open_url(url)
    events: list[Notification] = []
    observer.add_listener(events.append)
    for _ in range(3):
        writer.put("/q/item-", b"", sequential=True, ephemeral=True)
    writer.multi([Put("/m/a", b""), Put("/m/b", b"")])
    writer.delete_recursive("/m")
    deleted, sentinel = Notification(NotificationType.Deleted, "/m"), Notification(NotificationType.Created, "/m")
    assert wait_for(lambda: deleted in events)
    # a sentinel instead of a sleep: etcd's one watch stream delivers in revision order, so once the
    # re-creation of /m has arrived, every event of the writes above has too (it adds no new path)
    writer.put("/m", b"sentinel")
    assert wait_for(lambda: sentinel in events[events.index(deleted):])
    assert all(e.path.startswith("/") and "\0" not in e.path for e in events), events
    assert {e.path for e in events if e.type is NotificationType.Created} == {
        "/q", "/q/item-0000000001", "/q/item-0000000002", "/q/item-0000000003", "/m", "/m/a", "/m/b"}


# ---- the limits of one etcd transaction ---------------------------------------------------------


def test_one_multi_cannot_write_a_key_twice(open_url, url):
    store = open_url(url)
    store.put("/k", b"0")
    for ops in ([Put("/k", b"1"), Put("/k", b"2")], [Delete("/k"), Put("/k", b"again")],
                [Put("/new", b"1"), Put("/new", b"2")]):
        with pytest.raises(InvalidArgumentError, match="at most once"):  # refused by the contract, before etcd
            store.multi(ops)
    with pytest.raises(InvalidArgumentError, match="twice"):  # /new is created as an ancestor, then put again
        store.multi([Put("/new/child", b""), Put("/new", b"1")])
    assert store.get("/k").value == b"0" and store.get("/k").stat.version == 0
    assert not store.exists("/new")


def test_multi_larger_than_max_txn_ops_is_refused_before_sending(open_url, url):
    store = open_url(url)
    store.multi([Put(f"/many/{i}", b"") for i in range(40)])  # 40 keys + 40 index entries + the parent
    with pytest.raises(InvalidArgumentError, match="max-txn-ops"):
        store.multi([Put(f"/more/{i}", b"") for i in range(100)])
    assert not store.exists("/more") and len(store.get_children("/many")) == 40


def test_value_limit_leaves_room_for_etcd_overhead(open_url, url):
    store = open_url(url, max_value_size=10 << 20)
    assert store.max_value_size == EtcdStore.backend_max_value_size < 1536 * 1024
    store.put("/edge", b"e" * store.max_value_size)  # the server takes the largest value allowed
    assert len(store.get("/edge").value) == store.max_value_size
    with pytest.raises(ValueTooLargeError):
        store.put("/over", b"e" * (store.max_value_size + 1))
    half = b"h" * (store.max_value_size // 2 + 1024)
    with pytest.raises(ValueTooLargeError, match="StateHandleStore"):  # each fits, together they do not
        store.multi([Put("/h1", half), Put("/h2", half), Put("/h3", half)])
    assert not store.exists("/h1")


# ---- reachability -------------------------------------------------------------------------------


def test_unreachable_server_raises_store_unavailable_quickly():
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as raised:
        open_store(f"etcd://127.0.0.1:{servers.free_port()}/x", timeout=1)
    assert time.monotonic() - started < 3
    assert raised.value.__cause__ is not None  # the gRPC error is chained, not leaked


def test_an_open_waits_within_its_timeout_for_a_server_still_starting(crash_server, prefix):
    """A store opened while its server is down, which comes up within the open's timeout, opens (the first call
    waits through failed connects, as a ZooKeeper store's open waits for its session)."""
    crash_server.kill()
    opened: list[object] = []
    opener = threading.Thread(target=lambda: opened.append(
        _open_or_error(f"etcd://{crash_server.address}{prefix}", timeout=30)))
    opener.start()
    time.sleep(1)  # the open's first connects are refused
    crash_server.start()
    opener.join(60)
    store = opened[0]
    assert isinstance(store, EtcdStore), store
    with store:
        store.put("/k", b"v")
        assert store.get("/k").value == b"v"


def _open_or_error(url: str, **options):
    try:
        return open_store(url, **options)
    except Exception as e:  # the test names it
        return e


def test_a_dead_endpoint_in_the_list_is_skipped(open_url, etcd_server, prefix):
    store = open_url(f"etcd://127.0.0.1:{servers.free_port()},{etcd_server.address}{prefix}", timeout=5)
    store.put("/k", b"v")
    assert store.get("/k").value == b"v"


def test_kill_during_load_loses_no_acknowledged_write(open_url, crash_server, prefix):
    url = f"etcd://{crash_server.address}{prefix}"
    timeout = 2
    store = open_url(url, timeout=timeout)
    sessions: list[SessionEvent] = []
    store.add_session_listener(sessions.append)
    events: list[Notification] = []
    store.add_listener(events.append)
    acked: dict[str, bytes] = {}
    failures: list[type] = []
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            path, value = f"/load/{i}", b"%d" % i
            try:
                store.put(path, value)
                acked[path] = value
            except (StoreUnavailableError, PossibleInconsistentStateError) as e:  # down, or killed mid-write
                failures.append(type(e))
                time.sleep(0.01)
            i += 1

    writer = threading.Thread(target=load, daemon=True)
    writer.start()
    try:
        assert wait_for(lambda: len(acked) >= 200, timeout=30)
        crash_server.kill()
        # while the server is down every operation raises StoreUnavailableError within the timeout
        for call in (lambda: store.get("/load/0"), lambda: store.put("/x", b""), lambda: store.exists("/x"),
                     lambda: store.get_children("/load"), lambda: store.delete("/load/0"),
                     lambda: store.multi([Put("/q/s-", b"", sequential=True)]), lambda: store.put("/q/e", b"", -1)):
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError) as raised:
                call()
            assert time.monotonic() - started < timeout + 1
            assert raised.value.__cause__ is not None
        assert wait_for(lambda: SessionEvent.ConnectionLost in sessions, timeout=10)
        before, tried = len(acked), len(failures)
        assert wait_for(lambda: len(failures) >= tried + 3, timeout=30)  # the writer kept trying meanwhile
        assert len(acked) == before  # nothing is acknowledged while down
        crash_server.restart()
        assert wait_for(lambda: len(acked) >= before + 200, timeout=30)
    finally:
        stop.set()
        writer.join(timeout=30)
    assert failures and set(failures) <= {StoreUnavailableError, PossibleInconsistentStateError}
    assert wait_for(lambda: SessionEvent.Reconnected in sessions, timeout=10)
    assert sessions.index(SessionEvent.ConnectionLost) < sessions.index(SessionEvent.Reconnected)
    assert SessionEvent.SessionLost not in sessions  # etcd keeps leases across a restart
    fresh = open_url(url)
    missing = [p for p, v in acked.items() if (r := fresh.get(p)) is None or r.value != v]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:5]}"
    assert len(fresh.get_children("/load")) >= len(acked)
    last = max(acked, key=lambda p: int(p.rsplit("/", 1)[1]))  # the watch resumed after the restart
    assert wait_for(lambda: Notification(NotificationType.Created, last) in events, timeout=10)


# ---- sessions -----------------------------------------------------------------------------------


def test_expire_session_removes_ephemeral_keys_and_reports_it(open_url, url):
    owner, observer = open_url(url, session_timeout=5), open_url(url)
    sessions: list[SessionEvent] = []
    owner.add_session_listener(sessions.append)
    owner.put("/eph", b"x", ephemeral=True)
    owner.put("/kept", b"x")
    assert observer.get("/eph").stat.ephemeral
    owner.expire_session()
    assert wait_for(lambda: not observer.exists("/eph"))
    assert observer.exists("/kept")
    assert wait_for(lambda: sessions == [SessionEvent.SessionLost, SessionEvent.SessionReestablished]), sessions
    stat = owner.put("/eph", b"y", ephemeral=True)  # on the new lease
    assert stat.ephemeral and stat.created_by_self


def test_lease_expiry_when_the_client_stalls(open_url, url):
    """The owner's event loop is blocked past the lease TTL (a stuck process): etcd expires the lease, a second
    store sees the ephemeral key go, and the owner reports SessionLost, then SessionReestablished."""
    owner, observer = open_url(url, session_timeout=2), open_url(url)
    sessions: list[SessionEvent] = []
    owner.add_session_listener(sessions.append)
    owner.put("/eph", b"x", ephemeral=True)
    stall_event_loop(owner, 5)  # no keep-alive for 5 s
    assert wait_for(lambda: not observer.exists("/eph"), timeout=10)
    assert wait_for(lambda: SessionEvent.SessionReestablished in sessions, timeout=15), sessions
    assert sessions.index(SessionEvent.SessionLost) < sessions.index(SessionEvent.SessionReestablished)
    assert owner.get("/eph") is None
    assert owner.put("/eph", b"y", ephemeral=True).created_by_self


def test_ephemeral_keys_of_a_killed_process_expire(open_url, url):
    code = (f"import sys, time; from statekeep.metadata import open_store\n"
            f"s = open_store({url!r}, session_timeout=2)\n"
            f"s.put('/owned', b'x', ephemeral=True); print('ready', flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        observer = open_url(url)
        assert observer.get("/owned").stat.ephemeral
        child.kill()
        child.wait()
        assert wait_for(lambda: not observer.exists("/owned"), timeout=10)
    finally:
        child.kill()
        child.wait()


def test_closed_store_revokes_its_lease_at_once(open_url, url):
    owner, observer = open_store(url, session_timeout=30), open_url(url)
    owner.put("/eph", b"x", ephemeral=True)
    owner.close()
    assert not observer.exists("/eph")  # no waiting for the 30 s TTL

