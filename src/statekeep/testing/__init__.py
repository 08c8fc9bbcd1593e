"""Helpers for tests and benchmarks: real ZooKeeper and etcd servers on loopback (``servers``), a
Spark standalone cluster (``spark_cluster``), polling."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; return its last truth.
    For asynchronous effects (notifications, session expiry) that have no completion signal."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
