"""CoordinationService and ResourceLock on every backend: API, bad input, expiry, and between real
processes (exclusivity seen by an observer outside the store, failover after SIGKILL, counters)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError

import pytest

from statekeep.coordination import CoordinationService
from statekeep.errors import (
    InvalidArgumentError,
    InvalidPathError,
    LockBusyError,
    LockLostError,
    StoreClosedError,
    StoreUnavailableError,
)
from statekeep.metadata import SessionEvent, open_store
from statekeep.metadata.registry import backend_class
from statekeep.testing import wait_for
from statekeep.testing.faults import inject_session_event, mute_notifications
from support.coordination import TIMEOUT, WORKER, go_when_ready, multi_process, run_workers

@pytest.fixture
def coord_for():
    """Creates CoordinationServices and closes them after the test."""
    made: list[CoordinationService] = []

    def make(store, **options) -> CoordinationService:
        made.append(CoordinationService(store, **options))
        return made[-1]

    yield make
    for c in made:
        c.close()


class TestLocks:
    def test_acquire_read_list_release(self, open_url, coord_for):
        coord = coord_for(open_url())
        other = coord_for(open_url())
        lock = coord.acquire_lock("/locks/a", b"me")
        assert (lock.path, lock.content, lock.held) == ("/locks/a", b"me", True)
        assert other.read_lock("/locks/a") == b"me"
        assert other.read_lock("/locks/none") is None
        coord.acquire_lock("/locks/b", b"")
        assert other.list_locks("/locks") == ["a", "b"]
        with pytest.raises(LockBusyError):
            other.acquire_lock("/locks/a", b"you")
        with pytest.raises(LockBusyError):  # not re-entrant, also within one session
            coord.acquire_lock("/locks/a", b"again")
        lock.release()
        lock.release()  # idempotent
        assert not lock.held and not lock.expired.done()
        assert other.read_lock("/locks/a") is None
        assert other.acquire_lock("/locks/a", b"you").content == b"you"

    def test_update_content_is_cas_and_visible(self, open_url, coord_for):
        store, reader = open_url(), open_url()
        lock = coord_for(store).acquire_lock("/l", b"v1")
        lock.update_content(b"v2")
        assert lock.content == b"v2" and lock.version == 1
        assert reader.get("/l").value == b"v2"
        lock.release()
        with pytest.raises(LockLostError):
            lock.update_content(b"v3")
        assert reader.get("/l") is None

    def test_orphan_of_own_session_is_taken_over(self, store, coord_for):
        # a create whose reply was lost leaves this session's key with no lock handle
        store.put("/l", b"lost reply", expected_version=-1, ephemeral=True)
        lock = coord_for(store).acquire_lock("/l", b"mine")
        assert lock.held and store.get("/l").value == b"mine"

    def test_update_with_lost_reply(self, store, coord_for):
        lock = coord_for(store).acquire_lock("/l", b"v1")
        real_put = store.put

        def put_then_lose_reply(*args, **kwargs):
            store.put = real_put
            real_put(*args, **kwargs)
            raise StoreUnavailableError("reply lost (injected)")

        store.put = put_then_lose_reply
        with pytest.raises(StoreUnavailableError):
            lock.update_content(b"v2")
        lock.update_content(b"v3")  # learns that v2 was applied, then goes on from there
        assert lock.held and not lock.expired.done() and lock.version == 2
        assert store.get("/l").value == b"v3"

    def test_list_locks_skips_persistent_children(self, open_url, coord_for):
        store = open_url()
        coord = coord_for(store)
        store.put("/locks/plain", b"x")
        coord.acquire_lock("/locks/held", b"")
        assert coord.list_locks("/locks") == ["held"]
        assert coord.list_locks("/absent") == []
        with pytest.raises(LockBusyError):  # a persistent key is never mistaken for a free lock
            coord.acquire_lock("/locks/plain", b"")
        assert coord.read_lock("/locks/plain") is None

    @pytest.mark.parametrize("path", ["", "relative", "/", "/a//b", "/a/", "/a/./b", "/a/\x00"])
    def test_invalid_paths_raise_and_write_nothing(self, store, coord_for, path):
        coord = coord_for(store)
        for call in (lambda: coord.acquire_lock(path, b""), lambda: coord.become_leader(path, b""),
                     lambda: coord.next_counter_value(path)):
            with pytest.raises(InvalidPathError):
                call()
        assert store.get_children("/") == []

    def test_wrong_types(self, store, coord_for):
        coord = coord_for(store)
        for path in (5, None, ["/l"], b"/l"):
            with pytest.raises(InvalidPathError):
                coord.acquire_lock(path, b"")
            with pytest.raises(InvalidPathError):
                coord.read_lock(path)
        for content in ("text", None, 5):
            with pytest.raises(InvalidArgumentError):
                coord.acquire_lock("/l", content)
            with pytest.raises(InvalidArgumentError):
                coord.become_leader("/l", content)
        lock = coord.acquire_lock("/l", b"ok")
        with pytest.raises(InvalidArgumentError):
            lock.update_content("text")
        assert lock.held and store.get("/l").value == b"ok"
        with pytest.raises(InvalidArgumentError):
            CoordinationService("not a store")


class TestExpiry:
    def test_deleted_by_someone_else(self, open_url, coord_for):
        store, intruder = open_url(), open_url()
        lock = coord_for(store).acquire_lock("/l", b"mine")
        intruder.delete("/l")
        lock.expired.result(timeout=TIMEOUT)
        assert not lock.held
        with pytest.raises(LockLostError):
            lock.update_content(b"x")
        lock.release()  # a no-op on a lost lock

    def test_overwritten_by_someone_else_is_left_alone(self, open_url, coord_for):
        store, intruder = open_url(), open_url()
        lock = coord_for(store).acquire_lock("/l", b"mine")
        intruder.put("/l", b"theirs")
        lock.expired.result(timeout=TIMEOUT)
        with pytest.raises(LockLostError):
            lock.update_content(b"x")
        lock.release()
        assert intruder.get("/l").value == b"theirs"  # nothing of theirs corrupted or deleted

    def test_lost_lock_detected_by_update_even_without_notification(self, open_url, coord_for):
        store, intruder = open_url(), open_url()
        coord = coord_for(store)
        lock = coord.acquire_lock("/l", b"mine")
        mute_notifications(coord)  # no notifications: only the CAS can tell
        intruder.put("/l", b"theirs")
        with pytest.raises(LockLostError):
            lock.update_content(b"x")
        assert lock.expired.done() and intruder.get("/l").value == b"theirs"

    def test_session_event_revalidates(self, open_url, coord_for):
        store, intruder = open_url(), open_url()
        coord = coord_for(store)
        kept = coord.acquire_lock("/kept", b"k")
        lost = coord.acquire_lock("/lost", b"l")
        mute_notifications(coord)  # notifications off: only the session event may tell
        intruder.delete("/lost")
        inject_session_event(store, SessionEvent.Reconnected)
        lost.expired.result(timeout=TIMEOUT)
        # the same task queue then runs this election: once it completes, the re-check has run too
        coord.become_leader("/probe", b"").result(timeout=TIMEOUT)
        assert kept.held and not kept.expired.done()

    def test_session_lost_expires_everything(self, store, coord_for):
        coord = coord_for(store)
        locks = [coord.acquire_lock(f"/l{i}", b"") for i in range(3)]
        inject_session_event(store, SessionEvent.SessionLost)
        for lock in locks:
            lock.expired.result(timeout=TIMEOUT)

    def test_real_session_expiry(self, open_url, coord_for):
        store = open_url()
        if not hasattr(store, "expire_session"):
            pytest.skip("this backend has no session-expiry hook (local://: the session is the process)")
        coord, other = coord_for(store), coord_for(open_url())
        lock = coord.acquire_lock("/l", b"mine")
        waiting = other.become_leader("/l", b"next")
        store.expire_session()
        lock.expired.result(timeout=TIMEOUT)
        assert waiting.result(timeout=TIMEOUT).content == b"next"
        if not store.closed:  # zk, etcd: the store goes on in a new session, and so does the service
            with pytest.raises(LockBusyError):
                coord.acquire_lock("/l", b"again")
            assert coord.acquire_lock("/l2", b"again").held

    def test_store_closed_under_the_lock(self, open_url, coord_for):
        store, other = open_url(), open_url()
        lock = coord_for(store, recheck_interval=0.05).acquire_lock("/l", b"")
        store.close()
        lock.expired.result(timeout=TIMEOUT)  # found by the safety re-check
        assert wait_for(lambda: not other.exists("/l"), timeout=TIMEOUT)

    def test_release_does_not_complete_expired(self, store, coord_for):
        lock = coord_for(store).acquire_lock("/l", b"")
        lock.release()
        assert not lock.expired.done()


class TestLeaderElection:
    def test_waiting_contender_takes_over_on_release(self, open_url, coord_for):
        first, second = coord_for(open_url()), coord_for(open_url())
        leader = first.become_leader("/election", b"first").result(timeout=TIMEOUT)
        waiting = second.become_leader("/election", b"second")
        # queued behind the leader (the barrier), and not granted while the leader holds
        assert wait_for(lambda: first.contenders("/election") == [b"first", b"second"], timeout=TIMEOUT)
        assert not waiting.done() and first.read_lock("/election") == b"first"
        leader.release()
        taken = waiting.result(timeout=TIMEOUT)
        assert taken.content == b"second" and first.read_lock("/election") == b"second"

    def test_takes_over_when_leader_session_ends(self, open_url, coord_for):
        leader_store = open_url()
        leader = coord_for(leader_store).become_leader("/election", b"old").result(timeout=TIMEOUT)
        waiting = coord_for(open_url()).become_leader("/election", b"new")
        leader_store.close()
        assert waiting.result(timeout=TIMEOUT).content == b"new"
        assert not leader.held

    def test_waiting_contender_fails_when_its_store_closes(self, open_url, coord_for):
        holder = coord_for(open_url())
        holder.become_leader("/election", b"leader").result(timeout=TIMEOUT)
        store = open_url()
        waiting = coord_for(store, recheck_interval=0.05).become_leader("/election", b"waiting")
        assert wait_for(lambda: len(holder.contenders("/election")) == 2, timeout=TIMEOUT)
        store.close()
        with pytest.raises(StoreClosedError):
            waiting.result(timeout=TIMEOUT)

    def test_cancel_and_close(self, open_url, coord_for):
        holder = coord_for(open_url())
        holder.acquire_lock("/election", b"")
        contender = CoordinationService(open_url())
        cancelled = contender.become_leader("/election", b"a")
        assert cancelled.cancel()
        pending = contender.become_leader("/election", b"b")
        contender.close()
        with pytest.raises(CancelledError):
            pending.result(timeout=TIMEOUT)
        with pytest.raises(StoreClosedError):
            contender.become_leader("/election", b"c")
        assert holder.read_lock("/election") == b""


class TestFairAndHerdFree:
    """Leadership passes in order of arrival, and each release wakes exactly one contender (counted by
    ``election_wakeups``; a sentinel write, seen by every store, then ``sync`` prove the others did not
    wake, without sleeping)."""

    def settle(self, coords, stores, tag):
        """Every notification committed before now has been acted on by every service."""
        seen = {id(s): threading.Event() for s in stores}
        subs = [s.add_listener(lambda n, e=seen[id(s)]: n.path == f"/sentinel-{tag}" and e.set()) for s in stores]
        try:
            stores[0].put(f"/sentinel-{tag}", b"")
            assert all(e.wait(TIMEOUT) for e in seen.values())
            assert all(c.sync(TIMEOUT) for c in coords)
        finally:
            for sub in subs:
                sub.close()

    def test_order_of_arrival_and_one_wakeup_per_release(self, open_url, coord_for):
        stores = [open_url() for _ in range(5)]
        coords = [coord_for(s, recheck_interval=3600) for s in stores]  # no timer re-checks in the count
        current = coords[0].become_leader("/e", b"c0").result(timeout=TIMEOUT)
        waiting = []
        # arrive in the order 3, 1, 4, 2: the order of leadership must follow it, not the service index
        for k, i in enumerate([3, 1, 4, 2]):
            waiting.append((i, coords[i].become_leader("/e", f"c{i}".encode())))
            assert wait_for(lambda: len(coords[0].contenders("/e")) == k + 2, timeout=TIMEOUT)
        assert coords[0].contenders("/e") == [b"c0", b"c3", b"c1", b"c4", b"c2"]
        self.settle(coords, stores, "start")
        for step, (i, future) in enumerate(waiting):
            before = [c.election_wakeups for c in coords]
            current.release()
            current = future.result(timeout=TIMEOUT)
            assert current.content == f"c{i}".encode() and coords[0].read_lock("/e") == current.content
            assert not any(f.done() for _, f in waiting[step + 1:])
            self.settle(coords, stores, str(step))
            woken = [after - b for after, b in zip((c.election_wakeups for c in coords), before)]
            assert woken == [int(j == i) for j in range(5)], f"release {step} woke {woken}"
        current.release()
        assert wait_for(lambda: coords[0].contenders("/e") == [], timeout=TIMEOUT)

    def test_withdrawn_contender_hands_its_place_on(self, open_url, coord_for):
        coords = [coord_for(open_url(), recheck_interval=3600) for _ in range(3)]
        leader = coords[0].become_leader("/e", b"a").result(timeout=TIMEOUT)
        middle = coords[1].become_leader("/e", b"b")
        assert wait_for(lambda: len(coords[0].contenders("/e")) == 2, timeout=TIMEOUT)
        last = coords[2].become_leader("/e", b"c")
        assert wait_for(lambda: len(coords[0].contenders("/e")) == 3, timeout=TIMEOUT)
        assert middle.cancel()
        assert wait_for(lambda: coords[0].contenders("/e") == [b"a", b"c"], timeout=TIMEOUT)
        leader.release()
        assert last.result(timeout=TIMEOUT).content == b"c"


class TestLockRecipe:
    def test_context_manager_releases(self, open_url, coord_for):
        coord, other = coord_for(open_url()), coord_for(open_url())
        with coord.acquire_lock("/l", b"me") as lock:
            assert lock.held and other.read_lock("/l") == b"me"
        assert not lock.held and other.read_lock("/l") is None

    def test_blocking_waits_for_release_and_times_out(self, open_url, coord_for):
        coord, other = coord_for(open_url()), coord_for(open_url())
        held = coord.acquire_lock("/l", b"first")
        with pytest.raises(LockBusyError):
            other.acquire_lock("/l", b"second", blocking=True, timeout=0.2)
        assert coord.contenders("/l") == []  # the timed-out waiter left no queue key behind
        got = []
        waiter = threading.Thread(target=lambda: got.append(other.acquire_lock("/l", b"second", blocking=True,
                                                                                timeout=TIMEOUT)))
        waiter.start()
        assert wait_for(lambda: coord.contenders("/l") == [b"second"], timeout=TIMEOUT)
        held.release()
        waiter.join(TIMEOUT)
        assert got and got[0].content == b"second" and coord.read_lock("/l") == b"second"

    @pytest.mark.parametrize("kwargs", [{"blocking": 1}, {"blocking": True, "timeout": -1},
                                        {"blocking": True, "timeout": "5"}])
    def test_bad_blocking_arguments(self, store, coord_for, kwargs):
        coord = coord_for(store)
        with pytest.raises(InvalidArgumentError):
            coord.acquire_lock("/l", b"", **kwargs)
        assert store.get("/l") is None and store.get_children("/") == []


class TestCounters:
    def test_sequence_and_bad_key(self, store, coord_for):
        coord = coord_for(store)
        assert [coord.next_counter_value("/c") for _ in range(3)] == [1, 2, 3]
        assert store.get("/c").value == (3).to_bytes(8, "big")
        store.put("/not-a-counter", b"hello")
        with pytest.raises(InvalidArgumentError):
            coord.next_counter_value("/not-a-counter")

    def test_distinct_across_threads_and_sessions(self, open_url, coord_for):
        coords = [coord_for(open_url()) for _ in range(4)]
        values: list[int] = []
        lock = threading.Lock()

        def run(coord):
            got = [coord.next_counter_value("/ids") for _ in range(25)]
            with lock:
                values.extend(got)

        threads = [threading.Thread(target=run, args=(c,)) for c in coords]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(values) == list(range(1, 101))


class TestBetweenProcesses:
    def test_lock_exclusivity(self, store_url, tmp_path):
        log = tmp_path / "holders.log"
        n, workers = 12, 3
        run_workers(store_url, [["lock", store_url, "/locks/x", str(log), str(n)] for _ in range(workers)],
                    go_when_ready(log, workers))
        holder = None
        lines = log.read_text().splitlines()
        for line in lines:
            event, who, _ = line.split()
            if event == "enter":
                assert holder is None, f"{who} entered while {holder} held the lock: {lines}"
                holder = who
            else:
                assert holder == who
                holder = None
        assert len(lines) == 2 * n * workers
        handovers = sum(a.split()[1] != b.split()[1] for a, b in zip(lines[1::2], lines[2::2]))
        print(f"\n[{store_url.partition(':')[0]}] lock holder changed {handovers} times in {n * workers} holds")

    def test_counters_distinct_across_processes(self, store_url, tmp_path):
        out = tmp_path / "values"
        run_workers(store_url, [["counter", store_url, "/ids", str(out), "30"] for _ in range(4)])
        values = [int(v) for v in out.read_text().split()]
        assert len(values) == 120 and len(set(values)) == 120

    def test_leader_failover_after_sigkill(self, store_url, tmp_path):
        if not multi_process(store_url):
            pytest.skip("memory:// lives in one process; see TestLeaderElection for its failover")
        out = tmp_path / "leaders"

        def lines(prefix):
            return [ln.split() for ln in (out.read_text().splitlines() if out.exists() else [])
                    if ln.startswith(prefix)]

        # a short session for the leader that gets killed, so the test waits seconds, not tens of them
        caps = backend_class(store_url.partition("://")[0]).capabilities
        leader_url = f"{store_url}?session_timeout=2" if "sessions" in caps else store_url
        old = subprocess.Popen([sys.executable, str(WORKER), "leader", leader_url, "/election", str(out), "hold"])
        new = None
        try:
            assert wait_for(lambda: lines("leader"), timeout=TIMEOUT)
            new = subprocess.Popen([sys.executable, str(WORKER), "leader", store_url, "/election", str(out), "exit"])
            assert wait_for(lambda: len(lines("waiting")) == 2, timeout=TIMEOUT)
            with open_store(store_url) as observer, CoordinationService(observer) as coord:
                assert wait_for(lambda: len(coord.contenders("/election")) == 2, timeout=TIMEOUT)  # both queued
            killed_at = time.time()
            os.kill(old.pid, signal.SIGKILL)
            assert new.wait(timeout=TIMEOUT) == 0
            (_, pid, led_at), = lines("leader")[1:]
            assert int(pid) == new.pid
            print(f"\n[{store_url.partition(':')[0]}] leader failover after SIGKILL: "
                  f"{float(led_at) - killed_at:.3f}s")
        finally:
            for p in (old, new):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.wait()
