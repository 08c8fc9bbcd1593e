"""Followers, compaction and snapshots (KIP-813) in one process: every backend through the metadata
provider (store_url), the embedded provider on local://. Cross-process tests are in
test_followers_processes.py."""

from __future__ import annotations

import glob
import time

import pytest

from statekeep.changelog import Compactor, FollowerStore, SnapshotStore, compact
from statekeep.errors import CorruptStateError, NotFoundError, ReadOnlyStoreError
from statekeep.state import open_provider
from support.followers import entries, open_follower, write_mix


def test_follower_materializes_the_leader_and_refuses_writes(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    n = 300 if leader.store.scheme in ("zk", "etcd", "k8s") else 2000
    write_mix(state, n // 2)
    with open_follower(leader, tmp_path) as follower:
        write_mix(state, n // 2, seed=3)  # while it tails
        assert follower.wait_until_caught_up(60)
        assert entries(follower) == entries(state) and follower.lag == 0
        assert follower.get_counter("c1") == state.get_counter("c1")
        assert list(follower.scan(prefix="c")) == list(state.scan(prefix="c"))
        position, local = state.changelog_position(), entries(follower)
        for write in (lambda: follower.put("k1", b"x"), lambda: follower.delete("k2"), lambda: follower.incr("c1"),
                      lambda: follower.set_counter("c1", 5), lambda: follower.apply_batch({"k1": b"x"}, {}),
                      lambda: follower.replace_state([])):
            with pytest.raises(ReadOnlyStoreError):
                write()
        assert state.changelog_position() == position and entries(follower) == local  # nothing written anywhere


def test_follower_converges_over_batches_larger_than_a_transaction(leader, tmp_path):
    """A tailing follower sees each key's changes in commit order while a batch several times the
    backend's transaction is staged, committed and applied, and converges to the leader."""
    state = leader.get_state_store("t", "n", "f")
    n = min(3 * state.batch_limits.max_keys + 5, 3_005)
    state.apply_batch({f"k{i}": b"old" for i in range(n)}, {"c": 1})
    with open_follower(leader, tmp_path) as follower:
        assert follower.wait_until_caught_up(60)
        puts: dict[str, bytes | None] = {f"k{i}": (None if i % 3 == 0 else b"new%d" % i) for i in range(n)}
        assert state.apply_batch(puts, {f"c{i}": i for i in range(n)} | {"c": 2}, marker="big") is True
        assert follower.wait_until_caught_up(120)
        assert entries(follower) == entries(state) and follower.get_counter("c") == 3
        assert follower.get("k0") is None and follower.get("k1") == b"new1"


def test_follower_resumes_from_its_applied_offset(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    applied = []
    with open_follower(leader, tmp_path, on_apply=applied.extend) as follower:
        write_mix(state, 100)
        assert follower.wait_until_caught_up(30)
        offset = follower.applied_offset
    write_mix(state, 100, seed=5)  # while it is closed
    applied.clear()
    with open_follower(leader, tmp_path, on_apply=applied.extend) as follower:
        assert follower.wait_until_caught_up(30)
        assert entries(follower) == entries(state)
        assert applied and min(r.offset for r in applied) > offset  # resumed, not replayed


def test_compaction_shrinks_the_log_and_a_new_follower_converges(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    write_mix(state, 400)
    before = state.count_changelog()
    with open_follower(leader, tmp_path, name="f") as old:  # applied everything before compaction
        assert old.wait_until_caught_up(30)
        result = compact(state, tombstone_retention_s=3600)
        assert result.removed > 0 and state.count_changelog() == before - result.removed
        assert state.count_changelog() <= len(entries(state)) + 40  # ~ one record per key (+ tombstones)
        write_mix(state, 50, seed=9)
        assert old.wait_until_caught_up(30) and entries(old) == entries(state)
    with FollowerStore.open(leader, "t", "n", "f", local_dir=str(tmp_path / "fresh"), snapshots=False,
                            poll_interval=0.01) as fresh:
        assert fresh.wait_until_caught_up(30) and entries(fresh) == entries(state)


def test_a_follower_behind_dropped_tombstones_bootstraps_again(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    for i in range(30):
        state.put(f"k{i}", b"x")
    with open_follower(leader, tmp_path, snapshots=False) as follower:
        assert follower.wait_until_caught_up(30)
    for i in range(0, 30, 2):
        state.delete(f"k{i}")  # while the follower is away
    state.put("new", b"y")
    # measured one second from now, every tombstone is older than the retention of 0 s
    result = compact(state, tombstone_retention_s=0, now_ms=int(time.time() * 1000) + 1000)
    assert result.tombstones_dropped == 15 and state.changelog_position().purged_offset > 0
    with open_follower(leader, tmp_path, snapshots=False) as follower:
        assert follower.wait_until_caught_up(30)
        assert entries(follower) == entries(state) and follower.get("k0") is None
        assert follower.status()["generation"] == 2


def test_snapshot_round_trip_and_restore(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    write_mix(state, 200)
    state.put("é/ü key", b"\x00\xff" * 10)
    snapshots = SnapshotStore(leader.store, f"file://{tmp_path}/blobs")
    info = snapshots.create(state)
    saved = entries(state)
    assert info.number == 1 and info.offset == state.changelog_position().last_offset
    assert snapshots.verify(info) == len(saved)
    write_mix(state, 100, seed=4)
    state.put("later", b"z")
    assert snapshots.create(state).number == 2
    assert [s.number for s in snapshots.list("t", "n", "f")] == [1, 2]
    with open_follower(leader, tmp_path) as follower:
        assert follower.wait_until_caught_up(30)
        before = state.changelog_position().last_offset
        changed = snapshots.restore(state, info)
        assert changed > 0 and {k: v[:2] for k, v in entries(state).items()} == {k: v[:2] for k, v in saved.items()}
        assert state.count_changelog(before) == changed  # a record per change: followers see the restore
        assert follower.wait_until_caught_up(30) and entries(follower) == entries(state)
    assert snapshots.remove_older("t", "n", "f", keep=1) == [1]
    assert [s.number for s in snapshots.list("t", "n", "f")] == [2]


def test_follower_bootstraps_from_the_snapshot_not_the_history(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    for _ in range(5):
        write_mix(state, 100)
    SnapshotStore(leader.store, f"file://{tmp_path}/blobs").create(state)
    state.put("tail", b"1")
    applied = []
    with open_follower(leader, tmp_path, on_apply=applied.extend) as follower:
        assert follower.wait_until_caught_up(30)
        assert entries(follower) == entries(state)
        assert [r.key for r in applied] == ["tail"]  # only the tail was replayed


def test_corrupt_snapshot_restores_nothing_and_followers_fall_back(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    write_mix(state, 100)
    snapshots = SnapshotStore(leader.store, f"file://{tmp_path}/blobs")
    info = snapshots.create(state)
    (blob,) = glob.glob(str(tmp_path / "blobs" / "*" / info.key / "*.blob"))
    data = bytearray(open(blob, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(blob, "wb").write(bytes(data))
    write_mix(state, 50, seed=1)
    before = entries(state)
    with pytest.raises(CorruptStateError):
        snapshots.restore(state, info)
    assert entries(state) == before
    with open_follower(leader, tmp_path) as follower:
        assert follower.wait_until_caught_up(30) and entries(follower) == before


def test_deleted_function_gives_a_clear_error(tmp_path):
    from statekeep.functions.config.service import FunctionService

    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"},
                                b"def process(input, context):\n    return input\n")
        state = service.registry.state_store("t", "n", "f")
        state.put("k", b"v")
        with FollowerStore.open(url, "t", "n", "f", local_dir=str(tmp_path / "fol"), poll_interval=0.01) as follower:
            assert follower.wait_until_caught_up(30) and follower.get("k") == b"v"
            service.registry.delete("t", "n", "f")
            deadline = time.monotonic() + 10
            while follower.status()["error"] is None and time.monotonic() < deadline:
                time.sleep(0.02)
            for read in (lambda: follower.get("k"), lambda: follower.lag, lambda: list(follower.scan()),
                         lambda: follower.wait_until_caught_up(1)):
                with pytest.raises(NotFoundError, match="deleted"):
                    read()
        with pytest.raises(NotFoundError, match="does not exist"):
            FollowerStore.open(url, "t", "n", "f", local_dir=str(tmp_path / "fol"))


def test_recreated_function_is_not_mistaken_for_the_old_one(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    state.put("old", b"1")
    with open_follower(leader, tmp_path) as follower:
        assert follower.wait_until_caught_up(30)
    leader.cleanup("t", "n", "f")
    state.put("new", b"2")
    with pytest.raises(NotFoundError, match="deleted"):
        open_follower(leader, tmp_path)


def test_compactor_leaves_the_head_alone(tmp_path):
    provider = open_provider("embedded", {"metadata_url": f"local://{tmp_path / 'd'}"})
    try:
        state = provider.get_state_store("t", "n", "f")
        for i in range(10):
            state.put("a", b"%d" % i)
        compactor = Compactor([state], interval_s=3600, tombstone_retention_s=0)
        assert compactor.run_once() == {}  # first sight: the whole log is the head
        for i in range(10):
            state.put("a", b"x%d" % i)
        result = compactor.run_once()["t/n/f"]
        assert result.removed == 10 and state.count_changelog() == 10  # only what the previous pass saw
        with compactor:  # the thread starts and stops cleanly
            pass
    finally:
        provider.close()
