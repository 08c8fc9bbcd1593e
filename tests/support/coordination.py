"""Coordination workers for the tests: ``coord_worker`` run as real processes (or as threads, each with
its own store, on ``memory://``, which lives in one process), released together."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from statekeep.metadata.registry import backend_class
from statekeep.testing import wait_for
from support import coord_worker

WORKER = Path(coord_worker.__file__)
TIMEOUT = 60  # bound for waits on asynchronous effects (session expiry on zk/etcd takes seconds)


def multi_process(url: str) -> bool:
    caps = backend_class(url.partition("://")[0]).capabilities
    return "multi_process" in caps or "sessions" in caps


def go_when_ready(out: Path, n: int):
    """For run_workers: release workers that wait in start_together once all n are connected,
    so that they really run concurrently."""
    ready = Path(f"{out}.ready")

    def go():
        assert wait_for(lambda: ready.exists() and len(ready.read_text().split()) == n, timeout=TIMEOUT)
        Path(f"{out}.go").touch()

    return go


def run_workers(url: str, argv_list: list[list[str]], started=lambda: True) -> None:
    """Run coord_worker with each argv: as processes, or as threads (own store each) on memory://.
    ``started()`` runs once they all are."""
    if multi_process(url):
        procs = [subprocess.Popen([sys.executable, str(WORKER), *argv]) for argv in argv_list]
        try:
            started()
            for p in procs:
                assert p.wait(timeout=120) == 0
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
    else:
        threads = [threading.Thread(target=coord_worker.main, args=(argv,)) for argv in argv_list]
        for t in threads:
            t.start()
        started()
        for t in threads:
            t.join(timeout=120)
