"""Stores and fork(): on local://, zk:// and etcd:// (real servers), a closed store leaves no client thread
behind, and a child forked by multiprocessing's fork start method (after a store was closed, or while stores
are open and busy) opens a new store and uses it; stores it inherited refuse use and leave the parent's
session alone; the parent's stores carry on (requests, ephemeral keys, notifications).

gRPC, under etcd://, is not fork-safe while any of its threads is alive: these tests fork for real."""

from __future__ import annotations

import multiprocessing
import os
import threading
import traceback

import pytest
from conftest import BACKENDS

from statekeep.errors import StoreClosedError
from statekeep.metadata import Notification, NotificationType, open_store
from statekeep.testing import wait_for

FORKING = ["local", "zk", "etcd"]
CHILD_TIMEOUT = 90  # seconds; a child that hangs in gRPC is killed and fails the test


@pytest.fixture(params=FORKING)
def url(request, tmp_path) -> str:
    return BACKENDS[request.param](request, tmp_path)


def _child(url: str, key: str, inherited: list) -> None:
    """In the forked child: inherited stores refuse use, closing them is harmless, a new store works."""
    try:
        for store in inherited:
            try:
                store.get("/k")
            except StoreClosedError:
                pass
            else:
                raise AssertionError(f"a store inherited across fork() answered: {store!r}")
            store.close()  # must not end the parent's session (its ephemeral keys stay)
        fresh = open_store(url)
        fresh.put(key, b"from the child")
        assert fresh.get(key).value == b"from the child"
        fresh.close()
    except BaseException:  # noqa: BLE001 - anything at all fails the child, with its traceback
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def _fork_child(url: str, key: str, inherited: list = ()) -> int:
    """Run :func:`_child` in a process forked by multiprocessing; its exit code (killed if it hangs)."""
    process = multiprocessing.get_context("fork").Process(target=_child, args=(url, key, list(inherited)))
    process.start()
    process.join(CHILD_TIMEOUT)
    if process.is_alive():
        process.kill()
        process.join()
        pytest.fail(f"the forked child hung for {CHILD_TIMEOUT}s opening {url}")
    return process.exitcode


def _new_threads(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in threading.enumerate() if t not in before and t.is_alive())


def test_close_leaves_no_thread_behind(url):
    before = set(threading.enumerate())
    store = open_store(url)
    events: list[Notification] = []
    store.add_listener(events.append)
    store.put("/k", b"v")
    store.put("/eph", b"", ephemeral=True)
    assert wait_for(lambda: Notification(NotificationType.Created, "/k") in events)
    other = open_store(url)
    other.get("/k")
    store.close()
    other.close()
    assert _new_threads(before) == []  # none of the client: no event loop, no gRPC poller, no kazoo thread


def test_child_forked_after_close_opens_the_store(url):
    store = open_store(url)
    store.add_listener(lambda n: None)
    store.put("/k", b"v")
    store.close()
    for i in range(3):
        assert _fork_child(url, f"/child/{i}") == 0
    with open_store(url) as check:
        assert check.get_children("/child") == ["0", "1", "2"]
        assert check.get("/child/2").value == b"from the child"


def test_child_forked_while_stores_are_busy_opens_its_own(url):
    store, other = open_store(url), open_store(url)
    events: list[Notification] = []
    store.add_listener(events.append)
    eph = store.put("/eph", b"mine", ephemeral=True)
    stop, errors, writes = threading.Event(), [], [0]

    def write() -> None:  # requests in flight when fork() comes: they must complete, not fail
        try:
            while not stop.is_set():
                other.put("/busy", b"%d" % writes[0])
                writes[0] += 1
        except BaseException as e:  # noqa: BLE001 - any failure of a request fails the test below
            errors.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert wait_for(lambda: writes[0] > 0 or errors)
        for i in range(3):
            assert _fork_child(url, f"/child/{i}", [store, other]) == 0
    finally:
        stop.set()
        writer.join()
    assert errors == [] and writes[0] > 0
    # the parent's stores carry on: same session (its ephemeral key is there), requests, notifications
    assert store.get("/eph").stat.version == eph.version and store.get("/eph").stat.created_by_self
    assert store.get_children("/child") == ["0", "1", "2"]
    store.put("/after-fork", b"")
    assert wait_for(lambda: Notification(NotificationType.Created, "/child/2") in events)
    assert wait_for(lambda: Notification(NotificationType.Created, "/after-fork") in events)
    other.close()
    store.close()
    with open_store(url) as check:
        assert check.get("/busy").value == b"%d" % (writes[0] - 1)
        assert wait_for(lambda: not check.exists("/eph"))  # the session ended with close(), not before


def test_fork_proceeds_only_once_grpc_runs_no_thread(etcd_server):
    """etcd:// only: gRPC's core threads (event engine, timer, lifeguard) end a little after the last channel
    closes. A fork while one of them runs can leave the child a lock nothing will release (a child's new store
    hung in gRPC), so the before-fork hook waits for all of them, native ones included, not just grpc.aio's
    poller. The hooks are called here as fork() calls them, to see the state fork() proceeds in."""
    from statekeep.metadata import etcd

    url = f"etcd://{etcd_server.address}/fork-threads"
    store, other = open_store(url), open_store(url)
    stop = threading.Event()

    def write() -> None:
        while not stop.is_set():
            other.put("/busy", b"")

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(5):
            assert wait_for(lambda: "event_engine" in etcd._grpc_threads())  # the core is busy...
            etcd._before_fork()
            try:
                assert etcd._grpc_threads() == []  # ...and has ended when fork() would proceed
            finally:
                etcd._after_fork_in_parent()
    finally:
        stop.set()
        writer.join()
        other.close()
        store.close()
