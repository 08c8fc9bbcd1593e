"""Batches larger than one atomic write of ZooKeeper or etcd (:mod:`statekeep.state.metadata.staged`): a batch
of realistic size commits exactly once, and a process killed with SIGKILL while staging or while
applying leaves a state that the replay of the same batch completes exactly."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from statekeep.errors import StoreUnavailableError
from statekeep.state import open_provider
from statekeep.metadata import Put, open_store
from statekeep.testing import faults, wait_for

from conftest import BACKENDS
from support.state_worker import big_batch

WORKER = Path(__file__).parent / "support" / "state_worker.py"


@pytest.fixture(params=["zk", "etcd"])
def url(request, tmp_path) -> str:
    return BACKENDS[request.param](request, tmp_path)


@pytest.fixture
def state(url):
    provider = open_provider("metadata", {"metadata_url": url})
    yield provider.get_state_store("t", "n", "f")
    provider.close()


def assert_exactly_once(state, counters: int, values: int, size: int, marker: str) -> None:
    puts, deltas = big_batch(counters, values, size)
    assert state.has_marker(marker)
    assert {e.key: e.counter for e in state.scan_entries(prefix="c")} == deltas
    found = dict(state.scan(prefix="v"))
    assert found.keys() == puts.keys() and all(found[k] == v for k, v in puts.items())
    assert state.count_changelog() == counters + values  # one record per key: nothing applied twice
    store = state.metadata_store
    assert store.get_children(state.base + "/staging") == []  # finished batches leave no staging
    assert store.get(state.base + "/applied/" + marker).value == b""


def test_100k_keys_and_50_mb_in_one_batch(state):
    """One (batch, partition) touching 100,000 distinct keys and 50 MB of state changes."""
    counters, values, size = 99_000, 1_000, 50_000
    puts, deltas = big_batch(counters, values, size)
    assert state.apply_batch(puts, deltas, marker="7-0") is True
    assert state.apply_batch(puts, deltas, marker="7-0") is False
    assert_exactly_once(state, counters, values, size, "7-0")


def _kill_when(url: str, batch: tuple[int, int, int], moment, marker: str = "m1", *extra: str) -> bool:
    """Run the batch in another process and SIGKILL it once ``moment()`` holds; whether it held."""
    child = subprocess.Popen([sys.executable, str(WORKER), "batch", url, *map(str, batch), marker, *extra])
    try:
        seen = wait_for(lambda: moment() or child.poll() is not None, timeout=120, interval=0.002) and moment()
    finally:
        child.kill()
        child.wait()
    return seen


def test_sigkill_while_staging_then_replay_is_exact(url, state):
    batch = (5_000, 300, 40_000)  # 12 MB of values: many pieces to stage
    store = state.metadata_store
    staging, marker = state.base + "/staging", state.base + "/applied/m1"

    def staging_not_committed() -> bool:
        return any(store.get_children(f"{staging}/{s}") for s in store.get_children(staging)) \
            and not store.exists(marker)

    # the child stages its pieces but one, whose write waits: killed mid-staging whatever the machine's load
    assert _kill_when(url, batch, staging_not_committed, "m1", "hold-staging")
    assert not state.has_marker("m1") and state.get_counter("c000001") == 0  # nothing visible yet
    puts, deltas = big_batch(*batch)
    assert state.apply_batch(puts, deltas, marker="m1") is True  # the replay
    assert_exactly_once(state, *batch, "m1")


def test_sigkill_while_applying_then_replay_is_exact(url, state):
    batch = (20_000, 50, 1_000)
    store = state.metadata_store
    marker = state.base + "/applied/m1"

    def half_applied() -> bool:
        found = store.get(marker)
        return found is not None and bool(found.value) and state.count_changelog() > 0

    assert _kill_when(url, batch, half_applied)
    assert 0 < state.count_changelog() < sum(batch[:2])  # killed mid-apply
    puts, deltas = big_batch(*batch)
    assert state.apply_batch(puts, deltas, marker="m1") is False  # committed: finished, not redone
    assert_exactly_once(state, *batch, "m1")


def test_concurrent_finishers_apply_each_change_once(url, state):
    batch = (20_000, 0, 0)
    marker = state.base + "/applied/m1"

    def half_applied() -> bool:
        found = state.metadata_store.get(marker)
        return found is not None and bool(found.value) and state.count_changelog() > 0

    assert _kill_when(url, batch, half_applied)
    provider = open_provider("metadata", {"metadata_url": url})
    other = provider.get_state_store("t", "n", "f")
    results: list[bool] = []
    threads = [threading.Thread(target=lambda s=s: results.append(s.has_marker("m1"))) for s in (state, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    provider.close()
    assert results == [True, True]
    assert_exactly_once(state, *batch, "m1")


def test_a_late_applier_never_applies_a_group_of_a_finished_batch(url, state):
    """An applier that found a group unapplied but reads and writes it only after another applier
    finished the whole batch (and removed its progress counters) writes nothing: every group's
    write checks that the batch is still unfinished."""
    puts, deltas = big_batch(5_000, 0, 0)
    stores = [open_store(url), open_store(url)]
    first, late = (open_provider("metadata", {"store": s}).get_state_store("t", "n", "f") for s in stores)
    committed, go_on = faults.hold(stores[0], "multi", lambda ops: any(  # its first group's write
        isinstance(op, Put) and "/staging/" in op.path and op.expected_version == -1 for op in ops))
    read, late_go_on = faults.hold(stores[1], "get_many", lambda paths: "/kv/" in paths[0])  # a group's keys
    applier = threading.Thread(target=first.apply_batch, args=(puts, deltas), kwargs={"marker": "m1"})
    finisher = threading.Thread(target=late.has_marker, args=("m1",))
    try:
        applier.start()
        assert committed.wait(timeout=60)  # committed, nothing applied yet
        finisher.start()
        assert read.wait(timeout=60)  # the late applier found group 0 unapplied
        go_on.set()
        applier.join(timeout=120)
        assert_exactly_once(state, 5_000, 0, 0, "m1")  # the first applier finished the batch
    finally:
        go_on.set()
        late_go_on.set()
        applier.join(timeout=120)
        finisher.join(timeout=120)
    assert_exactly_once(state, 5_000, 0, 0, "m1")  # the late applier's write changed nothing
    for store in stores:
        store.close()


@pytest.mark.parametrize("kind", ["zk", "etcd"])
def test_store_unreachable_mid_batch_fails_clearly_and_the_rerun_is_exact(kind, request):
    """The server dies (SIGKILL) while a large batch is being applied: the batch fails with the
    contract's StoreUnavailableError, and once the server is back the replay completes it exactly."""
    server = request.getfixturevalue("start_zookeeper" if kind == "zk" else "start_etcd")()
    try:
        url = f"{kind}://{server.address}/down?timeout=3"
        provider = open_provider("metadata", {"metadata_url": url})
        state = provider.get_state_store("t", "n", "f")
        batch = (20_000, 0, 0)
        puts, deltas = big_batch(*batch)
        failure: list[BaseException] = []

        def run() -> None:
            try:
                state.apply_batch(puts, deltas, marker="m1")
            except BaseException as e:  # noqa: BLE001 - the test inspects it
                failure.append(e)

        thread = threading.Thread(target=run)
        thread.start()
        assert wait_for(lambda: state.count_changelog() > 0 or not thread.is_alive(), timeout=120, interval=0.002)
        server.kill()
        thread.join(timeout=120)
        assert failure and isinstance(failure[0], StoreUnavailableError), failure
        server.start()
        assert wait_for(lambda: _reachable(state), timeout=60)
        assert state.apply_batch(puts, deltas, marker="m1") is False  # committed before the outage
        assert_exactly_once(state, *batch, "m1")
        provider.close()
    finally:
        server.stop()


def _reachable(state) -> bool:
    try:
        state.has_marker("probe")
        return True
    except StoreUnavailableError:
        return False


def test_batch_without_marker_killed_mid_apply_is_finished_by_the_next_one(url, state):
    """No replay finishes a batch without a marker: the next large batch of the function (or
    finish_pending_batches) does, exactly once."""
    batch = (20_000, 0, 0)
    store = state.metadata_store
    staging = state.base + "/staging"

    def half_applied() -> bool:
        return bool(store.get_children(staging)) and state.count_changelog() > 0

    assert _kill_when(url, batch, half_applied, marker="-")
    assert 0 < state.count_changelog() < batch[0]
    assert state.finish_pending_batches() == 1 and state.finish_pending_batches() == 0
    puts, deltas = big_batch(*batch)
    assert {e.key: e.counter for e in state.scan_entries(prefix="c")} == deltas
    assert state.count_changelog() == batch[0] and store.get_children(staging) == []
    assert store.get_children(state.base + "/applied") == []  # its marker went with it
