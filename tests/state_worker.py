"""A separate process for the state tests: ``python state_worker.py incr URL KEY N GO``:
once the file GO exists, increment KEY of function t/n/f N times through the metadata provider."""

from __future__ import annotations

import os
import sys
import time

from statekeep.state import open_provider


def main(argv: list[str]) -> None:
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
