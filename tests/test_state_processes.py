"""State across processes: concurrent ``incr`` from several processes ends exact (CAS on the version)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support import state_worker
from statekeep.state import open_provider

WORKER = Path(state_worker.__file__)


def test_concurrent_incr_from_processes_is_exact(store_url, tmp_path):
    if store_url.startswith("memory://"):
        pytest.skip("memory:// is private to one process")
    go = tmp_path / "go"
    procs, per = 4, 40
    workers = [subprocess.Popen([sys.executable, str(WORKER), "incr", store_url, "hits", str(per), str(go)])
               for _ in range(procs)]
    go.touch()
    for w in workers:
        assert w.wait(timeout=240) == 0
    provider = open_provider("metadata", {"metadata_url": store_url})
    try:
        state = provider.get_state_store("t", "n", "f")
        assert state.get_counter("hits") == procs * per
        log = state.read_changelog()
        assert len(log) == procs * per
        # the changelog replays to the same value: each record holds the value its change produced
        assert sorted(r.version for r in log) == list(range(procs * per))
        assert log[-1].value == state.get("hits")
    finally:
        provider.close()
