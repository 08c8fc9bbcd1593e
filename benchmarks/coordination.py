"""Coordination recipes and the metadata cache against the bare store operations they are built on,
on every backend available here, in one run.

    python benchmarks/coordination.py [--quick] [--backends memory,local,zk,etcd]

ZooKeeper and etcd are started on loopback through statekeep.testing.servers when their client
library and server are installed; otherwise they are skipped. Each row is single-threaded ops/s of
the recipe, of its baseline measured right before it on the same store, and their ratio.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from collections.abc import Callable

from statekeep.cache import JsonSerde, MetadataCache
from statekeep.coordination import CoordinationService
from statekeep.metadata import open_store


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls of ``fn`` per second, over at least ``seconds`` (after a short warm-up)."""
    for _ in range(3):
        fn()
    n, start = 0, time.perf_counter()
    while True:
        for _ in range(10):
            fn()
        n += 10
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed


def bench(url: str, seconds: float) -> list[tuple[str, float, str, float]]:
    store = open_store(url)
    coord = CoordinationService(store)
    cache = MetadataCache(store, JsonSerde(dict))
    seq = itertools.count()
    rows = []
    try:
        def bare_lock():
            path = f"/bench/bare/{next(seq)}"
            store.put(path, b"owner", expected_version=-1, ephemeral=True)
            store.delete(path)

        def lock():
            coord.acquire_lock(f"/bench/lock/{next(seq)}", b"owner").release()

        rows.append(("lock acquire+release", rate(lock, seconds),
                     "put(ephemeral, -1)+delete", rate(bare_lock, seconds)))

        store.put("/bench/cas", b"0")

        def bare_cas():
            current = store.get("/bench/cas")
            store.put("/bench/cas", b"%d" % (int(current.value) + 1), expected_version=current.stat.version)

        rows.append(("next_counter_value", rate(lambda: coord.next_counter_value("/bench/counter"), seconds),
                     "get + CAS put", rate(bare_cas, seconds)))

        cache.create("/bench/cached", {"name": "policy", "limit": 10, "tags": ["a", "b"]})
        serde = JsonSerde(dict)

        def store_get():  # what a get costs without the cache: read and deserialize
            serde.deserialize(store.get("/bench/cached").value)

        cache.get("/bench/cached")
        time.sleep(0.2)  # let the create's own notification invalidate and the next get reload
        cache.get("/bench/cached")
        rows.append(("cache get (hit)", rate(lambda: cache.get("/bench/cached"), seconds / 2),
                     "store get + deserialize", rate(store_get, seconds / 2)))

        def rmu():
            cache.read_modify_update("/bench/cached", lambda d: {**d, "limit": d["limit"] + 1})

        rows.append(("cache read_modify_update", rate(rmu, seconds),
                     "get + CAS put", rate(bare_cas, seconds)))
    finally:
        cache.close()
        coord.close()
        store.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="0.3 s per measurement instead of 1.5 s")
    parser.add_argument("--backends", default="memory,local,zk,etcd")
    args = parser.parse_args()
    seconds = 0.3 if args.quick else 1.5
    from statekeep.testing import servers

    results = []
    with tempfile.TemporaryDirectory() as tmp, servers.backend_urls(args.backends.split(","), tmp) as urls:
        for backend, url in urls:
            for row in bench(url, seconds):
                results.append((backend, *row))

    header = ("backend", "operation", "ops/s", "baseline (same run)", "baseline ops/s", "ratio")
    lines = [header] + [(b, op, f"{r:,.0f}", base, f"{br:,.0f}", f"{r / br:.2f}x")
                        for b, op, r, base, br in results]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for i, line in enumerate(lines):
        print(" | ".join(cell.rjust(w) if c in (2, 4, 5) else cell.ljust(w)
                         for c, (cell, w) in enumerate(zip(line, widths))))
        if i == 0:
            print("-+-".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
