"""A separate process for the state tests, through the metadata provider on function t/n/f:

- ``python state_worker.py incr URL KEY N GO``: once the file GO exists, increment KEY N times;
- ``python state_worker.py batch URL COUNTERS VALUES SIZE MARKER [hold-staging]``: apply :func:`big_batch`
  once (MARKER ``-``: without a marker); ``hold-staging``: the write of its second staged piece waits for
  good, so the process stays staged and uncommitted until it is killed."""

from __future__ import annotations

import os
import sys
import time

from statekeep.state import open_provider
from statekeep.testing import faults


def big_batch(counters: int, values: int, size: int) -> tuple[dict[str, bytes | None], dict[str, int]]:
    """A deterministic batch: ``values`` keys of ``size`` bytes, ``counters`` counters (c<i> += i % 7 + 1)."""
    return ({f"v{i:06d}": bytes([i % 256]) * size for i in range(values)},
            {f"c{i:06d}": i % 7 + 1 for i in range(counters)})


def main(argv: list[str]) -> None:
    if argv[0] == "batch":
        url, counters, values, size, marker, *hold = argv[1:]
        provider = open_provider("metadata", {"metadata_url": url})
        try:
            puts, deltas = big_batch(int(counters), int(values), int(size))
            state = provider.get_state_store("t", "n", "f")
            if hold == ["hold-staging"]:
                faults.hold(state.metadata_store, "put", lambda path: "/staging/" in path and path.endswith("/c000001"))
            state.apply_batch(puts, deltas, marker=None if marker == "-" else marker)
        finally:
            provider.close()
        return
    mode, url, key, n, go = argv
    assert mode == "incr"
    provider = open_provider("metadata", {"metadata_url": url, "retry_seconds": 120})
    try:
        state = provider.get_state_store("t", "n", "f")
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.005)
        for _ in range(int(n)):
            state.incr(key)
    finally:
        provider.close()


if __name__ == "__main__":
    main(sys.argv[1:])
