"""Followers in other processes (KIP-813): a leader writes 100k updates while a follower process tails
it; followers killed with SIGKILL mid-tail and mid-restore resume and converge; the metadata provider
on local, ZooKeeper and etcd (smaller volumes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import follower_worker
from statekeep.changelog import SnapshotStore
from statekeep.changelog.replica import LocalReplica
from statekeep.functions.service import FunctionService

WORKER = Path(follower_worker.__file__)
CODE = b"def process(input, context):\n    return input\n"


class Follower:
    """A follower_worker process: its latest status, and dumps on request."""

    def __init__(self, url: str, local_dir: Path, *extra: str) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WORKER), url, "t", "n", "f", str(local_dir), *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.status: dict = {}
        self.seen: list[dict] = []
        self.dumped = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            data = json.loads(line)
            if "dumped" in data:
                self.dumped.set()
            else:
                self.status = data
                self.seen.append(data)

    def wait_for(self, condition, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"follower exited with {self.proc.returncode}")
            if self.status and condition(self.status):
                return self.status
            time.sleep(0.005)
        raise AssertionError(f"timed out; last status {self.status}")

    def dump(self, path: Path) -> dict:
        self.proc.stdin.write(f"dump {path}\n")
        self.proc.stdin.flush()
        assert self.dumped.wait(300), self.status
        return {k: (kind, bytes.fromhex(v), version) for k, kind, v, version in json.loads(path.read_text())}

    def quit(self) -> None:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        assert self.proc.wait(60) == 0

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def entries(state) -> dict:
    return {e.key: (e.kind, bytes(e.value), e.version) for e in state.scan_entries()}


def leader_service(url: str):
    service = FunctionService.open(url)
    service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}, CODE)
    return service, service.registry.state_store("t", "n", "f")


def write_updates(state, total: int, per_batch: int, keys: int) -> None:
    """``total`` updates: puts, deletes and counter increments over ``keys`` keys."""
    written = 0
    while written < total:
        puts, counters = {}, {}
        for i in range(written, min(total, written + per_batch)):
            k = (i * 7919) % keys
            if i % 10 == 0:
                puts[f"k{k}"] = None
            elif i % 4 == 0:
                counters[f"c{k % 1000}"] = counters.get(f"c{k % 1000}", 0) + 1
            else:
                puts[f"k{k}"] = b"value-%d" % i
        state.apply_batch(puts, counters)
        written += per_batch


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
