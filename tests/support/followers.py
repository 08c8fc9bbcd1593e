"""Followers for the tests: a leader's state written in mixed batches, a follower opened over it, and a
follower in its own process (``follower_worker``) driven over its stdin/stdout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from statekeep.changelog import FollowerStore
from statekeep.functions.config.service import FunctionService
from support import follower_worker

WORKER = Path(follower_worker.__file__)
CODE = b"def process(input, context):\n    return input\n"


class Follower:
    """A follower_worker process: its latest status, and dumps on request."""

    def __init__(self, url: str, local_dir: Path, *extra: str, function: tuple[str, str, str] = ("t", "n", "f")
                 ) -> None:
        self.proc = subprocess.Popen([sys.executable, str(WORKER), url, *function, str(local_dir), *extra],
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


def entries(store) -> dict:
    return {e.key: (e.kind, bytes(e.value), e.version) for e in store.scan_entries()}


def write_mix(state, n: int, seed: int = 0) -> None:
    """Puts, deletes and counters in batches of 10 keys; on etcd of 81 keys, three times what one
    transaction takes there, so they go through the staged commit (ZooKeeper's 1000 keys per
    transaction: test_follower_converges_over_batches_larger_than_a_transaction)."""
    limit = state.batch_limits.max_keys
    per = 3 * limit if limit < 100 else 10
    for start in range(0, n, per):
        puts, counters = {}, {}
        for i in range(start, min(n, start + per)):
            k = (i * 7 + seed) % max(10, n // 3)
            if i % 5 == 0:
                puts[f"k{k}"] = None
            elif i % 3 == 0:
                counters[f"c{k % 11}"] = counters.get(f"c{k % 11}", 0) + i
            else:
                puts[f"k{k}"] = b"v%d" % i
        state.apply_batch(puts, counters)


def open_follower(leader, tmp_path, name="f", **options):
    options.setdefault("poll_interval", 0.01)
    return FollowerStore.open(leader, "t", "n", name, local_dir=str(tmp_path / f"follower-{name}"),
                              blobs=f"file://{tmp_path}/blobs", **options)
