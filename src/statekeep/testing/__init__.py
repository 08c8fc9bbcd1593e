"""Helpers for tests and benchmarks: real ZooKeeper and etcd servers on loopback (``servers``), a
Spark standalone cluster (``spark_cluster``), polling, concurrent calls."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any


def wait_for(predicate: Callable[[], object], timeout: float = 15.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` seconds pass; return its last truth.
    For asynchronous effects (notifications, session expiry) that have no completion signal."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def in_threads(target: Callable[..., object], calls: Iterable[tuple[Any, ...]], name: str = "worker") -> None:
    """Call ``target(*args)`` for each ``args`` of ``calls``, each in a thread of its own, all at once; return
    when every one is done, raising the first exception any of them raised."""
    errors: list[BaseException] = []

    def run(*args: Any) -> None:
        try:
            target(*args)
        except BaseException as e:  # raised in the caller's thread below
            errors.append(e)

    threads = [threading.Thread(target=run, args=args, name=f"{name}-{i}") for i, args in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
