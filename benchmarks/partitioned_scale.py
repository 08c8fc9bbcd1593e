"""What the coordination store carries with partition-owned state, and what that implies for a cluster.

    python benchmarks/partitioned_scale.py [--store zk,etcd] [--keys 1000,100000,1000000] [--batches 3]
                                           [--committers 1,16,64,256] [--seconds 4]

1. **Writes per (batch, partition)**: a function of 2 partitions, state in a shared directory, coordinated by
   a ZooKeeper or etcd server started on loopback (statekeep.testing.servers); ``--batches`` micro-batches each
   changing every one of K keys, run as the Spark runtime runs them (``PartitionTask``). The writes are counted
   by the server itself: ZooKeeper's zxid (one per write transaction) and etcd's raft index (one per request
   through consensus), read before and after.
2. **Commit rate with many committers**: n threads in 2 processes, each committing like a partition does
   (read its manifest-sized record of 1 KiB, then compare-and-set it), against the per-key path (each
   commit one atomic multi of 64 changed keys and their changelog records, what the per-key provider writes
   for a small batch). Both measured for ``--seconds`` each, clients on this machine's 2 cores (so the rates
   are a floor of what the server sustains).
3. **Projection** from those figures: the events/s that the coordination store allows a whole cluster, for
   the micro-batch of ``benchmarks/spark_state.py`` (125k events changing 50k keys per (batch, partition)):
   partition-owned state commits once per (batch, partition) whatever the keys; the per-key path writes
   every changed key.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.request

from statekeep.state import open_provider
from statekeep.testing.servers import backend_urls

EVENTS, CHANGED = 125_000, 50_000  # per (batch, partition) in benchmarks/spark_state.py's default run
KEYS_PER_COMMIT = 20  # keys one commit changes (fits one atomic write on every backend)


def server_writes(url: str) -> int:
    """The server's own count of write transactions so far (ZooKeeper zxid, etcd raft index)."""
    host, port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    if url.startswith("zk://"):
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"srvr")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
        line = next(x for x in answer.decode().splitlines() if x.startswith("Zxid:"))
        return int(line.split(":", 1)[1].strip(), 16) & 0xFFFFFFFF  # the counter within the leader's epoch
    request = urllib.request.Request(f"http://{host}:{port}/v3/maintenance/status", data=b"{}", method="POST")
    with urllib.request.urlopen(request, timeout=5) as response:
        return int(json.load(response)["raftIndex"])


def writes_per_batch_partition(url: str, work: str, keys: int, batches: int) -> tuple[float, float]:
    """(coordination writes per (batch, partition), seconds) for ``batches`` batches changing ``keys`` keys."""
    from statekeep.state.keygroups import key_group, owner

    name = f"k{keys}"
    provider = open_provider("partitioned", {"state_dir": f"file://{work}/shared", "metadata_url": url,
                                             "cache_dir": f"{work}/cache"})
    try:
        state = provider.get_state_store("bench", "scale", name)
        groups, parallelism = state.partitioning(2)
        mine: list[list[str]] = [[], []]
        for i in range(keys):
            key = f"key-{i:08d}"
            mine[owner(key_group(key, groups), parallelism, groups)].append(key)
        before, start = server_writes(url), time.perf_counter()
        for batch in range(batches):
            for p in range(parallelism):
                task = state.task(batch, p, parallelism)
                task.fetch_many(mine[p])
                task.apply_batch({}, dict.fromkeys(mine[p], 1), marker=f"{batch}-{p}")
        elapsed = time.perf_counter() - start
        writes = server_writes(url) - before
        assert all(e.counter == batches for e in state.scan_entries()), "counts wrong"
        return writes / (batches * parallelism), elapsed
    finally:
        provider.close()


def _committer_process(url: str, work: str, tag: str, threads: int, seconds: float, per_key: bool, out) -> None:
    """``threads`` committers, each the only partition of a function of its own, each commit a batch of
    KEYS_PER_COMMIT counter increments through the real provider; puts (commits, keys) or an error."""
    if per_key:
        provider = open_provider("metadata", {"metadata_url": url})
    else:
        provider = open_provider("partitioned", {"state_dir": f"file://{work}/shared", "metadata_url": url,
                                                 "cache_dir": f"{work}/cache-{tag}"})
    counts, errors = [0] * threads, []
    start = threading.Barrier(threads + 1)
    deadline = [0.0]

    def commit_loop(i: int) -> None:
        try:
            state = provider.get_state_store("bench", tag, f"f{i}")
            keys = [f"f{i}-key-{j}" for j in range(KEYS_PER_COMMIT)]
            start.wait()
            while time.monotonic() < deadline[0]:
                task = state.task(counts[i], 0, 1)
                task.fetch_many(keys)
                task.apply_batch({}, dict.fromkeys(keys, 1), marker=f"{counts[i]}-0")
                counts[i] += 1
        except Exception as e:  # reported to the parent, which fails the run
            errors.append(repr(e))
            start.abort()

    workers = [threading.Thread(target=commit_loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    deadline[0] = time.monotonic() + seconds
    try:
        start.wait()
    except threading.BrokenBarrierError:
        pass
    for w in workers:
        w.join()
    provider.close()
    out.put(errors[0] if errors else sum(counts))


def commit_rate(url: str, work: str, committers: int, seconds: float, per_key: bool, tag: str) -> float:
    """Commits/s of ``committers`` concurrent committers (threads split over 2 processes)."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    split = [committers - committers // 2, committers // 2]
    procs = [context.Process(target=_committer_process, args=(url, work, f"{tag}p{i}", n, seconds, per_key, out))
             for i, n in enumerate(split) if n]
    for p in procs:
        p.start()
    results = [out.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    if failed := [r for r in results if isinstance(r, str)]:
        raise RuntimeError(f"a committer failed: {failed[0]}")
    return sum(results) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="zk,etcd")
    parser.add_argument("--keys", default="1000,100000,1000000")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--committers", default="1,16,64,256")
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sk-scale-bench-")
    try:
        with backend_urls(args.store.split(","), work) as urls:
            for backend, url in urls:
                print(f"\n== {backend} ==")
                print(f"{'keys changed per batch':>24}{'writes per (batch, partition)':>31}{'seconds':>9}")
                for keys in map(int, args.keys.split(",")):
                    per_cell, elapsed = writes_per_batch_partition(url, f"{work}/{backend}-{keys}", keys, args.batches)
                    print(f"{keys:>24,}{per_cell:>31.2f}{elapsed:>9.1f}", flush=True)
                print(f"{'committers':>10}{'partition commits/s':>21}{'per-key commits/s':>19}"
                      f"{'cluster ceiling, events/s: partition-owned':>45}{'per-key':>14}")
                for n in map(int, args.committers.split(",")):
                    owned = commit_rate(url, f"{work}/{backend}-c", n, args.seconds, False, f"o{n}")
                    per_key = commit_rate(url, f"{work}/{backend}-c", n, args.seconds, True, f"k{n}")
                    owned_ceiling = owned * EVENTS  # one commit per (batch, partition) of EVENTS events
                    key_ceiling = per_key * KEYS_PER_COMMIT * EVENTS / CHANGED  # keys/s over keys per event
                    print(f"{n:>10}{owned:>21,.0f}{per_key:>19,.0f}{owned_ceiling:>45,.0f}{key_ceiling:>14,.0f}"
                          f"   ({owned_ceiling / key_ceiling:,.0f}x)", flush=True)
        print(f"\nceilings: what the coordination store alone allows, for micro-batches of {EVENTS:,} events changing "
              f"{CHANGED:,} keys per (batch, partition); commits measured with {KEYS_PER_COMMIT} keys each, per-key "
              "ceiling from the keys/s that implies. Clients share this machine's cores with the server: "
              "the rates are floors.",
              file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
