"""Partition-owned state (``statekeep.state.partitioned``) without Spark: commits, fencing, catch-up,
snapshots, rescaling, bad input and faults, on the coordination stores it runs on (local://, zk, etcd)
with a shared directory as state dir. The Spark runtime's use of it is in test_partitioned_spark.py."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid

import pytest

from statekeep.errors import (BlobStorageError, CorruptStateError, InvalidArgumentError, StateConflictError,
                              StatekeepError, StoreUnavailableError)
from statekeep.handles.blobs import BlobStore
from statekeep.testing import wait_for
from statekeep.state import open_provider
from statekeep.state.partitioned import partition as partition_module
from statekeep.state.keygroups import (group_range, key_group, owner, spark_hash_int, spark_routes,
                                                   validate_layout)
from statekeep.state.partitioned.partition import PartitionMovedError

from conftest import BACKENDS

COORDINATION = ["local", "zk", "etcd"]
G = 128


@pytest.fixture(params=COORDINATION)
def coordination_url(request, tmp_path) -> str:
    return BACKENDS[request.param](request, tmp_path)


@pytest.fixture
def open_partitioned(tmp_path, coordination_url):
    """Opens providers on one coordination store and one shared state dir; each call may name its own
    cache dir (another machine's local disk)."""
    opened = []
    shared = f"file://{tmp_path / 'shared'}"

    def _open(cache: str = "cache", **config):
        provider = open_provider("partitioned", {"state_dir": shared, "metadata_url": coordination_url,
                                                 "cache_dir": str(tmp_path / cache), **config})
        opened.append(provider)
        return provider

    yield _open
    for provider in opened:
        provider.close()


def mine(keys, partition, parallelism):
    return [k for k in keys if owner(key_group(k, G), parallelism, G) == partition]


def run_batch(state, batch, parallelism, keys, amount=1):
    """What the Spark runtime does for each partition of a batch: True per partition that applied it."""
    applied = []
    for p in range(parallelism):
        task = state.task(batch, p, parallelism)
        if task.has_marker(f"{batch}-{p}"):
            applied.append(False)
            continue
        own = mine(keys, p, parallelism)
        task.fetch_many(own)
        applied.append(task.apply_batch({}, {k: amount for k in own}, marker=f"{batch}-{p}"))
    return applied


def manifest(provider, fn, generation, p):
    result = provider.store.get(f"/statekeep/partitioned/public/default/{fn}/g{generation}-p{p}")
    return json.loads(result.value), result.stat.version


KEYS = [f"key-{i}" for i in range(300)]


def test_key_groups_and_spark_routes():
    assert validate_layout(128, 3) == (128, 3)
    with pytest.raises(InvalidArgumentError, match="parallelism 200 exceeds"):
        validate_layout(128, 200)
    for parallelism in (1, 2, 3, 7, 128):
        ranges = [group_range(p, parallelism, G) for p in range(parallelism)]
        assert [g for r in ranges for g in r] == list(range(G))  # every group owned once, in order
        assert all(owner(g, parallelism, G) == p for p, r in enumerate(ranges) for g in r)
        assert [spark_hash_int(v) % parallelism for v in spark_routes(parallelism)] == list(range(parallelism))
    # that spark_hash_int is Spark's own hash() is checked against Spark in test_partitioned_spark.py


def test_batches_are_exact_and_once(open_partitioned):
    state = open_partitioned().get_state_store("public", "default", "wc")
    for batch in range(3):
        assert run_batch(state, batch, 2, KEYS) == [True, True]
        assert run_batch(state, batch, 2, KEYS) == [False, False]  # a replay applies nothing
    assert {k: state.get_counter(k) for k in KEYS} == dict.fromkeys(KEYS, 3)
    assert [e.key for e in state.scan_entries("key-1", limit=5)] == sorted(k for k in KEYS if k.startswith("key-1"))[:5]
    assert state.get_entry("key-7").version == 2


def test_coordination_writes_per_commit_do_not_grow_with_keys(open_partitioned):
    provider = open_partitioned()
    state = provider.get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS[:2])
    _, before = manifest(provider, "wc", 0, 0)
    run_batch(state, 1, 2, KEYS[:4])
    _, small = manifest(provider, "wc", 0, 0)
    run_batch(state, 2, 2, [f"many-{i}" for i in range(5000)])
    data, large = manifest(provider, "wc", 0, 0)
    # one compare-and-set of the manifest per commit (plus one when a snapshot is taken)
    assert small - before == 1 and large - small in (1, 2)
    assert len(json.dumps(data)) < 4096


def test_a_second_attempt_of_a_batch_commits_nothing(open_partitioned):
    """A speculative task or a zombie driver: both attempts read the state, only one commits."""
    state = open_partitioned().get_state_store("public", "default", "wc")
    own = mine(KEYS, 0, 2)
    first, second = state.task(0, 0, 2), state.task(0, 0, 2)
    for task in (first, second):
        assert not task.has_marker("0-0")
        task.fetch_many(own)
    assert first.apply_batch({}, dict.fromkeys(own, 1)) is True
    assert second.apply_batch({}, dict.fromkeys(own, 1)) is False
    assert all(state.get_counter(k) == 1 for k in own)


def test_a_write_between_read_and_commit_makes_the_batch_run_again(open_partitioned):
    state = open_partitioned().get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS)
    own = mine(KEYS, 0, 2)
    task = state.task(1, 0, 2)
    task.fetch_many(own)
    state.put(own[0], b"written by REST")  # ordered before the batch: the batch must see it
    with pytest.raises(StateConflictError):
        task.apply_batch({own[1]: b"x"}, {})
    assert state.get(own[0]) == b"written by REST" and state.get_counter(own[1]) == 1
    again = state.task(1, 0, 2)
    assert again.fetch_many([own[0]])[own[0]] == (b"written by REST", None)
    assert again.apply_batch({own[1]: b"x"}, {}) is True
    assert state.get(own[0]) == b"written by REST" and state.get(own[1]) == b"x"


def test_another_machine_catches_up_with_what_it_missed_only(open_partitioned, monkeypatch):
    a = open_partitioned("cache-a").get_state_store("public", "default", "wc")
    b = open_partitioned("cache-b").get_state_store("public", "default", "wc")
    run_batch(a, 0, 2, KEYS)
    own = mine(KEYS, 0, 2)
    assert b.get_counter(own[0]) == 1  # b's copy of partition 0 built from shared storage
    for batch in (1, 2, 3):
        run_batch(a, batch, 2, KEYS)
    reads = []
    real_open = BlobStore.open
    monkeypatch.setattr(BlobStore, "open", lambda self, url, *a_: reads.append(url) or real_open(self, url, *a_))
    task = b.task(4, 0, 2)
    assert task.fetch_many(own)[own[0]][1] == 4
    assert len(reads) == 3  # the three segments b had not seen, not the history
    assert task.apply_batch({}, dict.fromkeys(own, 1))
    assert a.get_counter(own[0]) == 5  # and a, whose copy is now behind, catches up in turn


def test_snapshots_bound_restore_and_storage(open_partitioned, monkeypatch, tmp_path):
    monkeypatch.setattr(partition_module, "SNAPSHOT_MIN_ENTRIES", 100)
    provider = open_partitioned()
    state = provider.get_state_store("public", "default", "wc")
    for batch in range(12):
        run_batch(state, batch, 2, KEYS)
    data, _ = manifest(provider, "wc", 0, 0)
    assert data["snapshot"] is not None and len(data["segments"]) <= 1
    blobs = [f for _, _, files in os.walk(tmp_path / "shared") for f in files]
    assert len(blobs) <= 2 * 2  # per partition a snapshot and at most one segment after it: old ones deleted
    fresh = open_partitioned("cache-fresh").get_state_store("public", "default", "wc")
    assert {k: fresh.get_counter(k) for k in KEYS} == dict.fromkeys(KEYS, 12)
    # a damaged or missing snapshot is an error naming it, never a partial copy
    snapshot = data["snapshot"]["url"].removeprefix("file://")
    saved = open(snapshot, "rb").read()
    open(snapshot, "wb").write(saved[:len(saved) // 2])
    with pytest.raises(CorruptStateError, match=os.path.basename(snapshot)):
        open_partitioned("cache-2").get_state_store("public", "default", "wc").get_counter(mine(KEYS, 0, 2)[0])
    os.remove(snapshot)
    with pytest.raises(CorruptStateError, match="missing"):
        open_partitioned("cache-3").get_state_store("public", "default", "wc").get_counter(mine(KEYS, 0, 2)[0])
    open(snapshot, "wb").write(saved)
    assert open_partitioned("cache-4").get_state_store("public", "default", "wc").get_counter(KEYS[0]) == 12


def test_rescale_keeps_state_exact_and_fences_the_old_generation(open_partitioned, monkeypatch):
    monkeypatch.setattr(partition_module, "SNAPSHOT_MIN_ENTRIES", 100)
    provider = open_partitioned()
    state = provider.get_state_store("public", "default", "wc")
    for batch in range(3):
        run_batch(state, batch, 2, KEYS)
    zombie = state.task(3, 1, 2)  # a task of the old layout, still running somewhere
    zombie.fetch_many(mine(KEYS, 1, 2))
    assert state.prepare_batch(3) == 3
    with pytest.raises(PartitionMovedError):
        zombie.apply_batch({}, dict.fromkeys(mine(KEYS, 1, 2), 100))
    for batch in (3, 4):
        run_batch(state, batch, 3, KEYS)
    assert {k: state.get_counter(k) for k in KEYS} == dict.fromkeys(KEYS, 5)
    assert state.prepare_batch(1) == 1  # and down to one
    run_batch(state, 5, 1, KEYS)
    fresh = open_partitioned("cache-fresh").get_state_store("public", "default", "wc")
    assert {k: fresh.get_counter(k) for k in KEYS} == dict.fromkeys(KEYS, 6)
    assert state.collect_garbage(older_than_s=0) > 0  # the replaced generations' blobs
    assert {k: open_partitioned("cache-3").get_state_store("public", "default", "wc").get_counter(k)
            for k in KEYS} == dict.fromkeys(KEYS, 6)


def test_a_rescale_never_splits_a_batch(open_partitioned):
    state = open_partitioned().get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS)
    task = state.task(1, 0, 2)  # batch 1 applied by partition 0 only (the driver died)
    own = mine(KEYS, 0, 2)
    task.fetch_many(own)
    task.apply_batch({}, dict.fromkeys(own, 1))
    assert state.prepare_batch(3) == 2  # batch 1 is finished with 2 partitions first
    assert run_batch(state, 1, 2, KEYS) == [False, True]
    assert state.prepare_batch(3) == 3
    assert {k: state.get_counter(k) for k in KEYS} == dict.fromkeys(KEYS, 2)


def test_rest_style_writes(open_partitioned):
    state = open_partitioned().get_state_store("public", "default", "wc")
    assert state.get("a") is None and list(state.scan_entries()) == []
    assert state.put("a", b"1") == 0 and state.put("a", b"2", expected_version=0) == 1
    assert state.incr("n", 5) == 5 and state.incr("n", -2) == 3
    with pytest.raises(StatekeepError, match="version"):
        state.put("a", b"3", expected_version=0)
    with pytest.raises(InvalidArgumentError, match="not a counter"):
        state.incr("a")
    assert state.delete("a") is True and state.delete("a") is False
    assert [(e.key, e.counter) for e in state.scan_entries()] == [("n", 3)]
    state.apply_batch({"x": b"1", "y": None}, {"z": 2})
    assert state.get("x") == b"1" and state.get_counter("z") == 2


@pytest.mark.parametrize("bad", [{"k": "not bytes"}, {"": b"v"}, {"k" * 5000: b"v"}])
def test_bad_input_writes_nothing(open_partitioned, bad):
    provider = open_partitioned()
    state = provider.get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS)
    before = manifest(provider, "wc", 0, 0)
    task = state.task(1, 0, 2)
    with pytest.raises(InvalidArgumentError):
        task.apply_batch(bad, {})
    with pytest.raises(InvalidArgumentError, match="not in this partition's key groups"):
        task.apply_batch({}, {mine(KEYS, 1, 2)[0]: 1})
    with pytest.raises(InvalidArgumentError, match="not in this partition's key groups"):
        task.fetch_many([mine(KEYS, 1, 2)[0]])
    assert manifest(provider, "wc", 0, 0) == before and state.get_counter(KEYS[0]) == 1


@pytest.mark.parametrize("config, message", [
    ({"state_dir": None}, "needs 'state_dir'"), ({"key_groups": 0}, "key groups"),
    ({"bogus": 1}, "unknown: \\['bogus'\\]"), ({"storage_options": 3}, "storage_options")])
def test_bad_provider_config(tmp_path, config, message):
    base = {"state_dir": f"file://{tmp_path}/s", "metadata_url": "memory://"}
    with pytest.raises(InvalidArgumentError, match=message):
        open_provider("partitioned", {**base, **config})


def test_corrupt_or_missing_blobs_are_named(open_partitioned, tmp_path):
    provider = open_partitioned()
    state = provider.get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS)
    run_batch(state, 1, 2, KEYS)
    data, _ = manifest(provider, "wc", 0, 0)
    segment = data["segments"][-1]["url"]
    path = segment.removeprefix("file://")
    saved = open(path, "rb").read()
    open(path, "wb").write(saved[:-3] + b"xyz")
    fresh = open_partitioned("cache-1").get_state_store("public", "default", "wc")
    with pytest.raises(CorruptStateError, match=segment.rpartition("/")[2]):
        fresh.get_counter(mine(KEYS, 0, 2)[0])
    os.remove(path)
    with pytest.raises(CorruptStateError, match="missing"):
        open_partitioned("cache-2").get_state_store("public", "default", "wc").get_counter(mine(KEYS, 0, 2)[0])
    open(path, "wb").write(saved)  # repaired: exact again
    assert open_partitioned("cache-3").get_state_store("public", "default", "wc").get_counter(KEYS[0]) == 2


def test_unwritable_state_dir_fails_the_commit_and_changes_nothing(open_partitioned, tmp_path):
    provider = open_partitioned()
    state = provider.get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS)
    before = manifest(provider, "wc", 0, 0)
    shared = tmp_path / "shared"
    moved = tmp_path / "moved"
    shutil.move(shared, moved)
    shared.write_text("a file where the state dir was")
    task = state.task(1, 0, 2)
    with pytest.raises(BlobStorageError, match="shared"):
        task.apply_batch({}, dict.fromkeys(mine(KEYS, 0, 2), 1))
    assert manifest(provider, "wc", 0, 0) == before
    shared.unlink()
    shutil.move(moved, shared)
    assert run_batch(state, 1, 2, KEYS) == [True, True]  # the rerun is exact
    assert state.get_counter(KEYS[0]) == 2


FULL_DISK_CHILD = """
import json, resource, signal, sys
from statekeep.state import open_provider
config, keys = json.loads(sys.argv[1]), json.loads(sys.argv[2])
provider = open_provider("partitioned", config)
state = provider.get_state_store("public", "default", "wc")
task = state.task(0, 0, 1)
task.fetch_many(keys)
task.apply_batch({}, dict.fromkeys(keys, 1), marker="0-0")
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk's ENOSPC
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))
task = state.task(1, 0, 1)
task.fetch_many(keys)
try:
    task.apply_batch({k: b"x" * 2048 for k in keys}, {}, marker="1-0")
except Exception as e:
    print(json.dumps([type(e).__name__, str(e)]))
"""


def test_a_full_state_dir_fails_the_commit_and_changes_nothing(tmp_path):
    """A segment the OS refuses to write in full (a child process with a 64 KiB file-size limit, as a full disk
    refuses it): a clear error naming the blob, no manifest or local change; the rerun, with room, is exact."""
    import subprocess
    import sys

    config = {"state_dir": f"file://{tmp_path / 'shared'}", "metadata_url": f"local://{tmp_path / 'meta'}",
              "cache_dir": str(tmp_path / "cache")}
    keys = [f"key-{i}" for i in range(100)]
    child = subprocess.run([sys.executable, "-c", FULL_DISK_CHILD, json.dumps(config), json.dumps(keys)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    kind, message = json.loads(child.stdout)
    assert kind == "BlobStorageError" and str(tmp_path / "shared") in message and "too large" in message, message
    provider = open_provider("partitioned", config)
    try:
        state = provider.get_state_store("public", "default", "wc")
        assert {e.key: e.counter for e in state.scan_entries()} == dict.fromkeys(keys, 1)  # nothing half-written
        assert manifest(provider, "wc", 0, 0)[0]["batch"] == 0
        task = state.task(1, 0, 1)
        task.fetch_many(keys)
        assert task.apply_batch({k: b"x" * 2048 for k in keys}, {}, marker="1-0")
        assert {e.key: e.value for e in state.scan_entries()} == {k: b"x" * 2048 for k in keys}
    finally:
        provider.close()


def test_coordination_store_lost_mid_commit_changes_nothing_then_the_rerun_is_exact(tmp_path, start_zookeeper):
    """ZooKeeper (a server of this test's own) is SIGKILLed while a commit has uploaded its segment and is
    about to compare-and-set the manifest: the commit fails with StoreUnavailableError naming the store, the
    local copy does not move ahead; with the server back, the state is as before and the rerun exact."""
    import threading

    from statekeep.testing import faults

    zk = start_zookeeper()
    provider = open_provider("partitioned", {"state_dir": f"file://{tmp_path / 'shared'}",
                                             "metadata_url": f"zk://{zk.address}/c?timeout=10&session_timeout=10",
                                             "cache_dir": str(tmp_path / "cache")})
    try:
        state = provider.get_state_store("public", "default", "wc")
        run_batch(state, 0, 1, KEYS)
        held, release = faults.hold(provider.store, "put", lambda path: path.endswith("/g0-p0"))
        task = state.task(1, 0, 1)
        task.fetch_many(KEYS)
        failure: list[BaseException] = []

        def commit() -> None:
            try:
                task.apply_batch({}, dict.fromkeys(KEYS, 1), marker="1-0")
            except BaseException as e:  # the test inspects it
                failure.append(e)

        thread = threading.Thread(target=commit)
        thread.start()
        assert held.wait(60)
        zk.kill()
        release.set()
        thread.join(120)
        assert len(failure) == 1 and isinstance(failure[0], StoreUnavailableError), failure
        assert zk.address.split(":")[-1] in str(failure[0]) or "ZooKeeper" in str(failure[0]), str(failure[0])
        zk.start()

        def committed_batch() -> int | None:  # the store may stay unreachable a while as the server comes back
            try:
                return manifest(provider, "wc", 0, 0)[0]["batch"]
            except StoreUnavailableError:
                return None

        assert wait_for(lambda: committed_batch() is not None, timeout=120)
        assert committed_batch() == 0
        assert {e.key: e.counter for e in state.scan_entries()} == dict.fromkeys(KEYS, 1)
        assert run_batch(state, 1, 1, KEYS) == [True]
        assert {e.key: e.counter for e in state.scan_entries()} == dict.fromkeys(KEYS, 2)
    finally:
        provider.close()
        zk.stop()


def test_cleanup_and_garbage_collection(open_partitioned, tmp_path):
    provider = open_partitioned()
    state = provider.get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS)
    orphan = provider.blobs.write("public/default/wc", uuid.uuid4().hex, b"a fenced writer's segment")
    assert state.collect_garbage(older_than_s=3600) == 0  # young orphans stay (a writer may be mid-commit)
    time.sleep(0.01)  # the orphan's write time must be before "now" at millisecond precision
    assert state.collect_garbage(older_than_s=0) == 1 and not provider.blobs.exists(orphan.url)
    assert state.get_counter(KEYS[0]) == 1
    provider.cleanup("public", "default", "wc")
    assert provider.store.get("/statekeep/partitioned/public/default/wc") is None
    assert not [f for _, _, files in os.walk(tmp_path / "shared") for f in files]
    again = provider.get_state_store("public", "default", "wc")
    assert again.get_counter(KEYS[0]) == 0


def test_a_stale_reader_whose_blobs_a_snapshot_replaced_gets_a_conflict(open_partitioned, monkeypatch):
    """A task read the manifest, then another machine's commits snapshotted and deleted the blobs it
    names: the task's read is a conflict (run the batch again), not corruption."""
    monkeypatch.setattr(partition_module, "SNAPSHOT_MIN_ENTRIES", 10)
    a = open_partitioned("cache-a").get_state_store("public", "default", "wc")
    run_batch(a, 0, 2, KEYS)
    run_batch(a, 1, 2, KEYS)
    stale = open_partitioned("cache-b").get_state_store("public", "default", "wc").task(2, 0, 2)
    for batch in (2, 3, 4):
        run_batch(a, batch, 2, KEYS)
    with pytest.raises(StateConflictError):
        stale.fetch_many(mine(KEYS, 0, 2))
    fresh = open_partitioned("cache-c").get_state_store("public", "default", "wc")
    assert fresh.get_counter(mine(KEYS, 0, 2)[0]) == 5 and run_batch(fresh, 5, 2, KEYS) == [True, True]


def test_a_local_copy_shared_with_a_newer_writer_fails_the_older_commit(open_partitioned):
    """Two processes on one machine share the local copy: the one that read an older manifest cannot
    commit over what the other committed."""
    state = open_partitioned().get_state_store("public", "default", "wc")
    other = open_partitioned().get_state_store("public", "default", "wc")  # same cache dir
    run_batch(state, 0, 2, KEYS)
    own = mine(KEYS, 0, 2)
    task = state.task(1, 0, 2)
    task.fetch_many(own)
    other.incr(own[0], 10)
    with pytest.raises(StateConflictError):
        task.apply_batch({}, dict.fromkeys(own, 1))
    assert state.get_counter(own[0]) == 11 and run_batch(state, 1, 2, KEYS) == [True, True]
    assert state.get_counter(own[0]) == 12


def test_writes_to_other_keys_do_not_make_a_batch_run_again(open_partitioned):
    """A batch commits on top of writes made since it read the state when they touched none of the keys
    it read or wrote (a REST writer must not starve the function); a write to one of them is a conflict."""
    state = open_partitioned().get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS)
    own = mine(KEYS, 0, 2)
    task = state.task(1, 0, 2)
    task.fetch_many(own[:10])
    for i in range(3):
        state.put(own[20 + i], b"rest")
    assert task.apply_batch({}, dict.fromkeys(own[:10], 1)) is True
    assert [state.get_counter(k) for k in own[:10]] == [2] * 10 and state.get(own[20]) == b"rest"
    task = state.task(2, 0, 2)
    task.fetch_many(own[:10])
    state.put(own[5], b"rest")
    with pytest.raises(StateConflictError):
        task.apply_batch({}, dict.fromkeys(own[:4], 1))


def test_state_dir_on_s3(s3_server, tmp_path, monkeypatch):
    """The same on an S3 API (moto's server, through s3fs): exact batches, another machine's copy built
    from the bucket, snapshots, a rescale, cleanup of every object."""
    monkeypatch.setattr(partition_module, "SNAPSHOT_MIN_ENTRIES", 100)
    url = s3_server.url("partitioned")
    coordination = f"local://{tmp_path / 'meta'}"

    def open_on(cache):
        return open_provider("partitioned", {"state_dir": url, "metadata_url": coordination,
                                             "cache_dir": str(tmp_path / cache)})

    a, b = open_on("cache-a"), open_on("cache-b")
    try:
        state = a.get_state_store("public", "default", "wc")
        for batch in range(4):
            assert run_batch(state, batch, 2, KEYS) == [True, True]
        other = b.get_state_store("public", "default", "wc")
        assert {k: other.get_counter(k) for k in KEYS} == dict.fromkeys(KEYS, 4)
        assert state.prepare_batch(3) == 3 and run_batch(other, 4, 3, KEYS) == [True, True, True]
        assert {k: state.get_counter(k) for k in KEYS} == dict.fromkeys(KEYS, 5)
        assert a.blobs.list("public/default/wc")
        a.cleanup("public", "default", "wc")
        assert a.blobs.list("public/default/wc") == []
    finally:
        a.close()
        b.close()


def test_two_rescales_before_any_snapshot_stay_exact(open_partitioned, monkeypatch):
    """2 -> 3 -> 2 with commits but no snapshot in between (every snapshot fails): new partitions inherit
    lineages that several old ones inherited too; each counts once, for the groups it was the truth of."""
    monkeypatch.setattr(partition_module.Partition, "snapshot", lambda self, manifest: False)
    state = open_partitioned().get_state_store("public", "default", "wc")
    run_batch(state, 0, 2, KEYS)
    assert state.prepare_batch(3) == 3
    run_batch(state, 1, 3, KEYS)
    assert state.prepare_batch(2) == 2
    run_batch(state, 2, 2, KEYS)
    fresh = open_partitioned("cache-fresh").get_state_store("public", "default", "wc")
    assert {k: fresh.get_counter(k) for k in KEYS} == dict.fromkeys(KEYS, 3)


def test_server_with_a_state_dir(tmp_path):
    """A server started with a state dir: functions created there get partition-owned state (recorded in
    their config), REST reads and writes it, the console shows its changelog, a bad write is a
    400 changing nothing, and deleting the function deletes its state under the state dir."""
    import json as json_

    from fastapi.testclient import TestClient

    from statekeep.server import ServerConfig, create_app

    shared = tmp_path / "shared"
    app = create_app(ServerConfig(metadata_url=f"local://{tmp_path / 'data'}", state_dir=str(shared)))
    body = {"tenant": "public", "namespace": "default", "name": "wc", "inputs": ["in"], "py": "f.py",
            "keyField": "word"}
    code = b"def process(input, context):\n    context.incr_counter(input['word'], 1)\n"
    base = "/admin/v3/functions/public/default/wc"
    with TestClient(app) as client:
        r = client.post(base, files={"functionConfig": (None, json_.dumps(body), "application/json"),
                                     "data": ("f.py", code, "application/octet-stream")})
        assert r.status_code == 200, r.text
        config = client.get(base).json()
        assert config["stateStorage"] == {"provider": "partitioned", "config": {"state_dir": f"file://{shared}"}}
        assert client.post(f"{base}/state/k", json={"key": "k", "numberValue": 7}).status_code == 200
        assert client.get(f"{base}/state/k").json()["numberValue"] == 7
        bad = client.post(f"{base}/state/k", json={"key": "other", "numberValue": 8})
        assert bad.status_code == 400 and "key" in bad.json()["reason"]
        assert client.get(f"{base}/state/k").json()["numberValue"] == 7
        ui = client.get("/ui/api/functions/public/default/wc/changelog").json()
        # the console's changelog page reads partition-owned state's changelog per partition
        (record,) = ui["records"]
        assert (record["key"], record["numberValue"], record["partition"]) == ("k", 7, 0) and "reason" not in ui
        assert ui["position"]["lastOffset"] == record["offset"]
        assert list(shared.rglob("*.blob"))
        assert client.delete(base).status_code in (200, 204)
        assert not list(shared.rglob("*.blob"))
