"""Followers (KIP-813) of partition-owned state (``statekeep.changelog.partitioned_follower``), through the
same ``FollowerStore.open`` as every follower: exact after batches driven like the Spark runtime drives
them (``PartitionedStateStore.task``), incremental catch-up, a follower process, subsets, a rescale,
SIGKILL and resume, read-only, a deleted function, a corrupt blob, and the server's followers. Real
stores: the coordination store on local:// and ZooKeeper, a shared directory as state dir."""

from __future__ import annotations

import json
import os

import pytest
from conftest import BACKENDS, need

from statekeep.changelog import FollowerStore
from statekeep.changelog.partitioned_follower import PartitionedFollowerStore, PartitionedReplica
from statekeep.errors import CorruptStateError, NotFoundError, ReadOnlyStoreError
from statekeep.functions.config.service import FunctionService
from statekeep.handles.blobs import BlobStore
from statekeep.state.partitioned import partition as partition_module
from statekeep.state.partitioned import state_storage
from statekeep.state.keygroups import key_group, owner
from statekeep.testing import wait_for

from support.followers import CODE, Follower

G = 128
KEYS = [f"a-{i}" for i in range(150)] + [f"b-{i}" for i in range(150)]
COUNTERS = [f"n-{i}" for i in range(100)]


@pytest.fixture(params=["local", "zk"])
def leader(request, tmp_path, monkeypatch):
    """``(url, service, state)``: function t/n/f with partition-owned state under a shared directory."""
    monkeypatch.setenv("STATEKEEP_STATE_CACHE", str(tmp_path / "leader-cache"))
    url = BACKENDS[request.param](request, tmp_path)
    service = FunctionService.open(url, default_storage=state_storage(str(tmp_path / "shared")))
    service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}, CODE)
    state = service.registry.state_store("t", "n", "f")
    assert type(state).__name__ == "PartitionedStateStore"
    yield url, service, state
    service.close()


def mine(keys, partition, parallelism):
    return [k for k in keys if owner(key_group(k, G), parallelism, G) == partition]


def run_batch(state, batch, parallelism):
    """One micro-batch as the Spark runtime runs it, partition by partition: every value key set (every
    7th deleted instead) and every counter +1."""
    for p in range(parallelism):
        task = state.task(batch, p, parallelism)
        own, counters = mine(KEYS, p, parallelism), mine(COUNTERS, p, parallelism)
        task.fetch_many([*own, *counters])
        puts = {k: (None if (i + batch) % 7 == 0 else b"v%d-%s" % (batch, k.encode())) for i, k in enumerate(own)}
        assert task.apply_batch(puts, dict.fromkeys(counters, 1), marker=f"{batch}-{p}")


def run_counts(state, batch, parallelism, keys):
    """A batch of counter increments only (every key of ``keys`` +1)."""
    for p in range(parallelism):
        task = state.task(batch, p, parallelism)
        own = mine(keys, p, parallelism)
        task.fetch_many(own)
        task.apply_batch({}, dict.fromkeys(own, 1), marker=f"{batch}-{p}")


def entries(store, prefix=""):
    return {e.key: (e.kind, bytes(e.value), e.version) for e in store.scan_entries(prefix)}


def open_follower(url, tmp_path, name="follower", **options):
    options.setdefault("poll_interval", 0.01)
    return FollowerStore.open(url, "t", "n", "f", local_dir=str(tmp_path / name), **options)


def replace(path, data):
    """Write ``data`` at ``path`` in one step (a follower reading it meanwhile sees the old or the new)."""
    with open(path + ".new", "wb") as f:
        f.write(data)
    os.replace(path + ".new", path)


def manifest(service, generation, p):
    result = service.registry.store.get(f"/statekeep/partitioned/t/n/f/g{generation}-p{p}")
    return json.loads(result.value)


def test_follower_is_exact_after_batches_and_catches_up_incrementally(leader, tmp_path, monkeypatch):
    url, service, state = leader
    for batch in range(3):
        run_batch(state, batch, 2)
    follower = open_follower(url, tmp_path, start=False)
    try:
        assert isinstance(follower, PartitionedFollowerStore) and isinstance(follower, FollowerStore)
        assert follower.lag > 0 and follower.get("a-1") is None  # nothing applied yet
        follower.step()  # the bootstrap
        assert entries(follower) == entries(state) and follower.lag == 0
        assert follower.status()["partitions"] == {"generation": 0, "seqs": [3, 3]}
        # the newest record of the partitions, as the leader's changelog offsets count
        newest = max(state.read_partition_changelog(p)[-1].offset for p in range(2))
        assert follower.applied_offset == state.changelog_position().last_offset == newest
        reads = []
        real_open = BlobStore.open
        monkeypatch.setattr(BlobStore, "open", lambda self, u, *a: reads.append(u) or real_open(self, u, *a))
        run_batch(state, 3, 2)
        run_counts(state, 4, 2, mine(COUNTERS, 0, 2)[:5])  # partition 1 changes nothing in batch 4
        new = [s for p in (0, 1) for s in manifest(service, 0, p)["segments"] if s["seq"] > 3]
        assert len(new) == 3  # batch 3 in both partitions, batch 4 in partition 0
        assert follower.lag == sum(s["entries"] for s in new) > 5  # entries of the segments not applied
        reads.clear()
        assert follower.step() > 0
        assert len(reads) == 3 and all("/shared/" in u for u in reads)  # the new segments only
        assert entries(follower) == entries(state) and follower.lag == 0
        assert follower.step() == 0 and len(reads) == 3  # nothing new: manifests read, no blob
    finally:
        follower.close()
    follower = open_follower(url, tmp_path)  # the same local_dir: resumes from its positions
    try:
        generation = follower.status()["generation"]
        run_batch(state, 5, 2)
        assert follower.wait_until_caught_up(60)
        assert entries(follower) == entries(state) and follower.status()["generation"] == generation
        for batch in range(6, 9):  # tailing while the leader runs
            run_batch(state, batch, 2)
        assert follower.wait_until_caught_up(60) and entries(follower) == entries(state)
        assert follower.get_counter("n-1") == state.get_counter("n-1") >= 8
    finally:
        follower.close()


def test_a_partition_behind_its_snapshot_is_rebuilt_in_place(leader, tmp_path, monkeypatch):
    monkeypatch.setattr(partition_module, "SNAPSHOT_MIN_ENTRIES", 50)
    url, service, state = leader
    run_batch(state, 0, 2)
    follower = open_follower(url, tmp_path, start=False)
    try:
        follower.step()
        generation = follower.status()["generation"]
        for batch in range(1, 6):  # deletes included: keys the rebuilt partition no longer has
            run_batch(state, batch, 2)
        assert manifest(service, 0, 0)["snapshot"]["seq"] > 1  # the segments the follower missed are gone
        follower.step()
        assert entries(follower) == entries(state)
        assert follower.status()["generation"] == generation  # in place, not a new bootstrap
    finally:
        follower.close()


def test_follower_in_another_process_reads_the_same_values(leader, tmp_path):
    url, service, state = leader
    for batch in range(3):
        run_batch(state, batch, 2)
    follower = Follower(url, tmp_path / "follower")
    try:
        follower.wait_for(lambda s: s["phase"] == "tailing")
        for batch in range(3, 6):
            run_batch(state, batch, 2)
        assert follower.dump(tmp_path / "dump.json") == entries(state)
        follower.quit()
    finally:
        if follower.proc.poll() is None:
            follower.kill()


def test_subset_follower_materializes_only_its_keys(leader, tmp_path, monkeypatch):
    url, service, state = leader
    for batch in range(3):
        run_batch(state, batch, 2)
    written = []  # every key either follower writes to its local copy
    for method in ("restore_chunk", "apply_ops"):
        real = getattr(PartitionedReplica, method)
        monkeypatch.setattr(PartitionedReplica, method, lambda self, arg, ops, *a, real=real:
                            written.extend(k for k, _ in ops) or real(self, arg, ops, *a))
    subset = open_follower(url, tmp_path, "subset", key_prefix="a-")
    doubled = open_follower(url, tmp_path, "doubled", key_prefix="n-",
                            transform=lambda key, value: value * 2 if isinstance(value, int) else None)
    try:
        assert subset.wait_until_caught_up(60) and doubled.wait_until_caught_up(60)
        assert entries(subset) == entries(state, "a-") and entries(subset)
        assert subset.get("b-1") is None and subset.get_counter("n-1") == 0
        assert {e.key: e.counter for e in doubled.scan_entries()} == {
            e.key: 2 * e.counter for e in state.scan_entries("n-")} and doubled.get_counter("n-1") == 6
        assert doubled.get("a-1") is None
        assert written and all(k.startswith((b"a-", b"n-")) for k in written)  # nothing outside the views
        for batch in range(3, 5):
            run_batch(state, batch, 2)
        assert subset.wait_until_caught_up(60) and entries(subset) == entries(state, "a-")
        assert [e.key for e in subset.scan_entries()] == sorted(entries(state, "a-"))  # only its keys, on disk too
    finally:
        subset.close()
        doubled.close()


def test_rescale_of_the_leader_then_the_follower_is_exact(leader, tmp_path):
    url, service, state = leader
    follower = open_follower(url, tmp_path)
    try:
        for batch in range(3):
            run_batch(state, batch, 2)
        assert follower.wait_until_caught_up(60) and entries(follower) == entries(state)
        assert state.prepare_batch(3) == 3
        for batch in (3, 4):
            run_batch(state, batch, 3)
        assert follower.wait_until_caught_up(60) and entries(follower) == entries(state)
        assert follower.status()["partitions"]["generation"] == 1 and len(follower.status()["partitions"]["seqs"]) == 3
        assert state.prepare_batch(1) == 1  # and down to one, with no commit in between
        assert follower.wait_until_caught_up(60) and entries(follower) == entries(state)
        run_batch(state, 5, 1)
        assert follower.wait_until_caught_up(60) and entries(follower) == entries(state)
        assert follower.lag == 0
    finally:
        follower.close()


def test_follower_process_survives_sigkill_and_resumes(leader, tmp_path):
    url, service, state = leader
    run_batch(state, 0, 2)
    follower = Follower(url, tmp_path / "follower")
    try:
        first = follower.wait_for(lambda s: s["phase"] == "tailing" and s["partitions"] is not None)
        for batch in range(1, 40):
            run_batch(state, batch, 2)
            if batch == 20:
                follower.wait_for(lambda s: s["partitions"]["seqs"][0] > first["partitions"]["seqs"][0])
                follower.kill()  # SIGKILL while tailing
        killed = follower.status
        follower = Follower(url, tmp_path / "follower")
        resumed = follower.wait_for(lambda s: s["partitions"] is not None)
        assert resumed["generation"] == killed["generation"]  # resumed from its positions, no new bootstrap
        assert all(a >= b for a, b in zip(resumed["partitions"]["seqs"], killed["partitions"]["seqs"]))
        assert follower.dump(tmp_path / "dump.json") == entries(state)
        follower.quit()
    finally:
        if follower.proc.poll() is None:
            follower.kill()


def test_writes_are_refused(leader, tmp_path):
    url, service, state = leader
    run_batch(state, 0, 2)
    before = entries(state)
    with open_follower(url, tmp_path) as follower:
        assert follower.wait_until_caught_up(60)
        for write in (lambda: follower.put("a-1", b"x"), lambda: follower.incr("c/a-1"),
                      lambda: follower.delete("a-1"), lambda: follower.set_counter("n", 1),
                      lambda: follower.apply_batch({"a-1": b"x"}, {})):
            with pytest.raises(ReadOnlyStoreError, match="read-only follower"):
                write()
        assert entries(follower) == before == entries(state)


def test_deleted_function_is_not_found(leader, tmp_path):
    url, service, state = leader
    run_batch(state, 0, 2)
    with open_follower(url, tmp_path) as follower:
        assert follower.wait_until_caught_up(60) and follower.get("a-1") is not None
        service.registry.delete("t", "n", "f")
        assert wait_for(lambda: follower.status()["error"] is not None, timeout=30)
        for read in (lambda: follower.get("a-1"), lambda: follower.lag, lambda: follower.wait_until_caught_up(5)):
            with pytest.raises(NotFoundError, match="deleted"):
                read()
    with pytest.raises(NotFoundError, match="does not exist"):
        open_follower(url, tmp_path, "again")


def test_deleted_state_without_a_registry_is_not_found(leader, tmp_path):
    """A follower given the provider (no registry): the state's layout gone, or created again, is a
    deleted function."""
    url, service, state = leader
    run_batch(state, 0, 2)
    provider = service.registry.provider_for(service.registry.get("t", "n", "f"))
    with FollowerStore.open(provider, "t", "n", "f", local_dir=str(tmp_path / "fol"),
                            poll_interval=0.01) as follower:
        assert follower.wait_until_caught_up(60)
        state.cleanup()
        run_batch(state, 0, 2)  # created again: another lineage
        assert wait_for(lambda: follower.status()["error"] is not None, timeout=30)
        with pytest.raises(NotFoundError, match="was deleted"):
            follower.get("a-1")


def test_a_corrupt_blob_is_a_clear_error_naming_it(leader, tmp_path):
    url, service, state = leader
    run_batch(state, 0, 2)
    follower = open_follower(url, tmp_path, start=False)
    try:
        follower.step()
        run_batch(state, 1, 2)
        segment = manifest(service, 0, 1)["segments"][-1]["url"]
        path = segment.removeprefix("file://")
        saved = open(path, "rb").read()
        replace(path, saved[:-3] + b"xyz")
        name = os.path.basename(path)
        with pytest.raises(CorruptStateError, match=name) as raised:
            follower.step()
        assert "g0-p1" in str(raised.value)  # and the manifest naming it
        assert entries(follower) != entries(state) and follower.get("a-1") is not None  # the last copy serves
        follower.start()
        with pytest.raises(CorruptStateError, match=name):
            follower.wait_until_caught_up(60)
        assert name in follower.status()["error"]
        replace(path, saved)  # repaired: it goes on
        assert follower.wait_until_caught_up(60) and entries(follower) == entries(state)
        assert follower.status()["error"] is None
    finally:
        follower.close()


def test_server_followers_serve_partition_owned_state(tmp_path, monkeypatch):
    need("fastapi")
    from fastapi.testclient import TestClient

    from statekeep.server import ServerConfig, create_app

    monkeypatch.setenv("STATEKEEP_STATE_CACHE", str(tmp_path / "leader-cache"))
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url, default_storage=state_storage(str(tmp_path / "shared"))) as service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}, CODE)
        state = service.registry.state_store("t", "n", "f")
        run_batch(state, 0, 2)
        spec = {"tenant": "t", "namespace": "n", "name": "f", "leader": url, "local_dir": str(tmp_path / "fol"),
                "key_prefix": "a-"}
        app = create_app(ServerConfig(metadata_url="memory://", followers=[spec]))
        with TestClient(app) as client:
            base = "/admin/v3/followers/t/n/f/state"
            assert wait_for(lambda: client.get(f"{base}/a-1").status_code == 200, timeout=30)
            assert client.get(f"{base}/a-1").json() == {"key": "a-1", "stringValue": "v0-a-1", "version": 0}
            assert client.get(f"{base}/b-1").status_code == 404  # not in its subset
            assert client.post(f"{base}/a-1", json={"stringValue": "x"}).status_code == 405
            run_batch(state, 1, 2)
            assert wait_for(lambda: client.get(f"{base}/a-1").json().get("stringValue") == "v1-a-1", timeout=30)
            (status,) = client.get("/admin/v3/followers").json()
            assert status["lag"] == 0 and status["partitions"]["generation"] == 0


def test_cli_followers_get_and_status(tmp_path, monkeypatch, capsys):
    from statekeep.cli import main

    monkeypatch.setenv("STATEKEEP_STATE_CACHE", str(tmp_path / "leader-cache"))
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url, default_storage=state_storage(str(tmp_path / "shared"))) as service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}, CODE)
        run_batch(service.registry.state_store("t", "n", "f"), 0, 2)
    fol = ["--tenant", "t", "--namespace", "n", "--name", "f", "--leader-store", url,
           "--local-dir", str(tmp_path / "fol")]
    assert main(["followers", "get", *fol, "--key", "n-3"]) == 0
    assert json.loads(capsys.readouterr().out)["numberValue"] == 1
    assert main(["followers", "status", "--local-dir", str(tmp_path / "fol"), "--leader-store", url, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["name"], row["lag"]) == ("f", 0) and row["epoch"].startswith("g0.")  # generation 0


def test_standalone_follow_option_serves_partition_owned_state(server_process, tmp_path, monkeypatch):
    """``statekeep standalone --state-dir URL --follow T/N/F``: a real server process whose function keeps
    partition-owned state, written over REST, read through its follower's routes."""
    import httpx

    
    monkeypatch.setenv("STATEKEEP_STATE_CACHE", str(tmp_path / "cache"))  # the server process's too
    data, shared = tmp_path / "data", tmp_path / "shared"
    with FunctionService.open(f"local://{data}", default_storage=state_storage(str(shared))) as service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}, CODE)
    server = server_process(data, extra=["--state-dir", str(shared), "--follow", "t/n/f"])
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            state, fol = "/admin/v3/functions/t/n/f/state", "/admin/v3/followers/t/n/f/state"
            for key, body in (("a", {"stringValue": "x"}), ("n", {"numberValue": 7})):
                assert client.post(f"{state}/{key}", json=body).status_code == 200
            assert wait_for(lambda: client.get(f"{fol}/n").status_code == 200, timeout=30)
            assert client.get(f"{fol}/n").json() == {"key": "n", "numberValue": 7, "version": 0}
            assert [i["key"] for i in client.get(fol).json()["items"]] == ["a", "n"]
            assert client.put(f"{fol}/a", json={"stringValue": "y"}).status_code == 405
            (status,) = client.get("/admin/v3/followers").json()
            assert status["lag"] == 0 and status["partitions"] is not None
    finally:
        server.stop()
    assert any(shared.rglob("*.blob"))  # the state went to the shared directory
