"""Coordination and the register under real failures of a real server (ZooKeeper, etcd): the server is
SIGKILLed and restarted on the same port and data while clients work. Ops that time out meanwhile
are ambiguous (``StoreUnavailableError``) and enter the linearizability check with an open end."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from statekeep.coordination import CoordinationService
from statekeep.metadata import SessionEvent, open_store
from statekeep.testing import wait_for
from statekeep.testing.linearizability import UNKNOWN, check, record_register_history

pytestmark = pytest.mark.slow

SERVERS = {"zk": "start_zookeeper", "etcd": "start_etcd"}


@pytest.fixture(scope="module", params=list(SERVERS))
def own_server(request):
    """(kind, a server of this module's own) for each real server: every test here kills it, so not the worker's
    shared one, which holds every earlier test's data (restarted, it once took over a minute to serve again)."""
    server = request.getfixturevalue(SERVERS[request.param])()
    yield request.param, server
    server.stop()


@pytest.fixture
def server_url(own_server):
    """(server, URL of a fresh namespace with a 2 s operation timeout) for each real server."""
    kind, server = own_server
    yield server, f"{kind}://{server.address}/f{uuid.uuid4().hex[:12]}?timeout=2"
    if server.process is None or server.process.poll() is not None:
        server.start()  # leave it running for the tests after this one


def crash_and_restart(server, down: float) -> None:
    server.kill()
    time.sleep(down)
    server.start()


def test_register_linearizable_across_server_crash(server_url):
    server, url = server_url
    history: list = []

    def record():
        history.extend(record_register_history(lambda client: open_store(url), "/register",
                                               clients=3, ops_per_client=120, seed=7))

    recorder = threading.Thread(target=record)
    recorder.start()
    time.sleep(0.3)
    crash_and_restart(server, down=1.0)
    recorder.join(timeout=300)
    assert not recorder.is_alive() and len(history) == 360
    ambiguous = sum(o.result == UNKNOWN for o in history)
    result = check(history)
    print(f"\n{url.partition(':')[0]}: {len(history)} ops across a server crash, {ambiguous} ambiguous: "
          f"linearizable={result.ok}")
    assert result.ok, f"not linearizable; stuck at {result.stuck_at} after {result.linearized} ops"


def test_lock_revalidated_and_kept_across_server_restart(server_url):
    server, url = server_url
    store = open_store(url)
    coord = CoordinationService(store)
    try:
        lock = coord.acquire_lock("/l", b"mine")
        events: list[SessionEvent] = []
        store.add_session_listener(events.append)
        crash_and_restart(server, down=0.5)
        assert wait_for(lambda: SessionEvent.Reconnected in events or SessionEvent.SessionReestablished in events,
                        timeout=60)
        # the coordination queue re-checks locks on the event, then runs this election
        coord.become_leader("/probe", b"").result(timeout=60)
        if SessionEvent.SessionLost in events:  # the server ended the session meanwhile
            assert lock.expired.done()
        else:  # same session: the key is still ours, and the lock says so
            assert lock.held and not lock.expired.done()
            lock.update_content(b"still mine")
            with open_store(url) as reader:
                assert reader.get("/l").value == b"still mine"
        print(f"\n{url.partition(':')[0]}: session events across the restart: {[e.value for e in events]}")
    finally:
        coord.close()
        store.close()
