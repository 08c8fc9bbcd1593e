"""Followers in other processes (KIP-813): a leader writes 100k updates while a follower process tails
it; followers killed with SIGKILL mid-tail and mid-restore resume and converge; the metadata provider
on local, ZooKeeper and etcd (smaller volumes)."""

from __future__ import annotations


import pytest

from statekeep.changelog import SnapshotStore
from statekeep.changelog.replica import LocalReplica
from statekeep.functions.config.service import FunctionService
from support.followers import CODE, Follower, entries, leader_service, write_updates

def test_follower_process_tails_100k_updates_and_survives_sigkill(tmp_path):
    url = f"local://{tmp_path / 'leader'}"
    service, state = leader_service(url)
    with service:
        follower = Follower(url, tmp_path / "follower")
        try:
            follower.wait_for(lambda s: s["phase"] == "tailing")
            write_updates(state, 50_000, 1000, 20_000)
            follower.wait_for(lambda s: s["appliedOffset"] > 10_000)
            follower.kill()  # SIGKILL mid-tail: resumes from its last applied batch
            killed_at = follower.status["appliedOffset"]
            write_updates(state, 50_000, 1000, 20_000)
            follower = Follower(url, tmp_path / "follower")
            first = follower.wait_for(lambda s: s["phase"] == "tailing")
            assert first["appliedOffset"] >= killed_at and first["generation"] == 1  # resumed, no bootstrap
            assert follower.dump(tmp_path / "dump.json") == entries(state)
            follower.quit()
        finally:
            if follower.proc.poll() is None:
                follower.kill()


def test_follower_killed_mid_restore_resumes_and_converges(tmp_path):
    url = f"local://{tmp_path / 'leader'}"
    service, state = leader_service(url)
    with service:
        for start in range(0, 200_000, 10_000):
            state.apply_batch({f"key{i:06d}": b"x" * 20 for i in range(start, start + 10_000)}, {})
        SnapshotStore(service.registry.store).create(state)
        write_updates(state, 5_000, 500, 200_000)  # the tail after the snapshot
        follower = Follower(url, tmp_path / "follower", "--restore-chunk", "500")
        try:
            follower.wait_for(lambda s: s["phase"] == "restoring" and (s["restoredEntries"] or 0) >= 20_000)
            follower.kill()
            replica = LocalReplica(str(tmp_path / "follower"), "t", "n", "f")
            progress = replica.load().restore
            replica.close()
            assert progress is not None, "the restore finished before the kill"
            assert progress["source"] == "snapshot" and 20_000 <= progress["written"] < 200_000
            follower = Follower(url, tmp_path / "follower", "--restore-chunk", "500")
            follower.wait_for(lambda s: s["phase"] == "tailing")
            restoring = [s["restoredEntries"] for s in follower.seen if s["phase"] == "restoring"]
            assert not restoring or min(restoring) >= progress["written"]  # resumed where it stopped
            write_updates(state, 2_000, 500, 200_000)
            assert follower.dump(tmp_path / "dump.json") == entries(state)
            follower.quit()
        finally:
            if follower.proc.poll() is None:
                follower.kill()


@pytest.mark.parametrize("backend", ["local", "zk", "etcd"])
def test_metadata_provider_follower_process(backend, request, tmp_path):
    from conftest import BACKENDS

    url = BACKENDS[backend](request, tmp_path)
    service = FunctionService.open(url, state_provider="metadata")
    with service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}, CODE)
        state = service.registry.state_store("t", "n", "f")
        follower = Follower(url, tmp_path / "follower", "--no-snapshots", "--provider", "metadata")
        try:
            per = min(3 * state.batch_limits.max_keys, 3_000)  # zk and etcd: larger than a transaction
            write_updates(state, 2 * per, per, per)
            assert follower.dump(tmp_path / "dump.json") == entries(state)
            follower.quit()
        finally:
            if follower.proc.poll() is None:
                follower.kill()
