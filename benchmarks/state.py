"""Function state: the metadata provider's operations against the bare store operations they are
built on, on every backend available here; then the REST ``GET .../state/{key}`` of
``statekeep standalone`` against a minimal ASGI app (one bare FastAPI route reading the same store),
both served by uvicorn in their own process, under the same load, in one run.

    python benchmarks/state.py [--quick] [--backends memory,local,zk,etcd] [--no-rest]

ZooKeeper and etcd are started on loopback through statekeep.testing.servers when their client
library and server are installed. Store rows are single-threaded ops/s, per provider (``metadata``
everywhere, ``embedded`` on local), measured in alternating slices against their baseline (medians; ratio = median of
per-slice ratios). REST rows: CLIENTS
keep-alive connections (threads in client processes), 12 rounds of 1.5 s alternating between the
two servers; the table shows each side's median round and the median of the per-round ratios.
Target for REST: >= 0.7x the bare route.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from statekeep.metadata import Put, open_store
from statekeep.state import open_provider

KEY = "words/hello"


def rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls of ``fn`` per second over at least ``seconds`` (after a short warm-up)."""
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


def paired(ours: Callable[[], object], base: Callable[[], object], seconds: float,
           slices: int = 6) -> tuple[float, float, float]:
    """(ours ops/s, baseline ops/s, ratio): alternating slices, so both see the same background load
    (fsync contention from other processes swings single runs by several times); medians."""
    a, b = [], []
    for i in range(slices):
        for fn, out in ((ours, a), (base, b)) if i % 2 == 0 else ((base, b), (ours, a)):
            out.append(rate(fn, seconds / slices))
    return statistics.median(a), statistics.median(b), statistics.median(x / y for x, y in zip(a, b))


def bench_store(url: str, provider_name: str, seconds: float) -> list[tuple[str, float, str, float, float]]:
    store = open_store(url)
    provider = open_provider(provider_name, {"store": store})
    state = provider.get_state_store("bench", "ns", "fn")
    seq = itertools.count()
    try:
        state.put("k", b"value-0123456789")
        store.put("/bare/k", b"value-0123456789")
        state.incr("c")
        store.put("/bare/c", (0).to_bytes(8, "big"))
        rows = [("get", *paired(lambda: state.get("k"), lambda: store.get("/bare/k"), seconds), "store.get")]
        rows.append(("put (+ changelog record)", *paired(lambda: state.put("k", b"value-%d" % next(seq)),
                                                         lambda: store.put("/bare/k", b"value-%d" % next(seq)),
                                                         seconds), "store.put"))

        def bare_incr():
            current = store.get("/bare/c")
            value = int.from_bytes(current.value, "big", signed=True) + 1
            store.put("/bare/c", value.to_bytes(8, "big", signed=True), expected_version=current.stat.version)

        rows.append(("incr (+ changelog record)", *paired(lambda: state.incr("c"), bare_incr, seconds),
                     "get + CAS put"))
        # a micro-batch as the Spark runtime writes it: N counters, their records and a marker in one write
        n = min(state.batch_limits.max_keys, 500)
        keys = [f"w{i}" for i in range(n)]
        for key in keys:
            store.put(f"/bare/b/{key}", b"0")
        batch, bare, ratio = paired(lambda: state.apply_batch({}, dict.fromkeys(keys, 1), marker=f"m{next(seq)}"),
                                    lambda: store.multi([Put(f"/bare/b/{k}", b"%d" % next(seq)) for k in keys]),
                                    seconds)
        rows.append((f"apply_batch of {n} counters (keys/s)", batch * n, bare * n, ratio,
                     f"multi of {n} plain puts (keys/s)"))
        return [(op, r, base, br, ratio) for op, r, br, ratio, base in rows]
    finally:
        provider.close()
        store.close()


# ---- REST ------------------------------------------------------------------------------------


def serve_baseline(data_dir: str, port: int) -> None:
    """The bare route: the same state store (the provider the server uses by default on this
    store), read directly and answered with the same JSON; no registry, auth, validation or metrics."""
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from statekeep.functions.config.service import FunctionService

    service = FunctionService.open(f"local://{data_dir}")
    state = service.registry.providers.get().get_state_store("bench", "ns", "fn")
    app = FastAPI()

    @app.get("/state/{key:path}")
    async def get(key: str):
        entry = state.get_entry(key)
        if entry is None:
            return JSONResponse({"reason": "not found"}, status_code=404)
        return JSONResponse({"key": key, "numberValue": int.from_bytes(entry.value, "big", signed=True),
                             "version": entry.version})

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _client(port: int, path: str, seconds: float, threads: int, out) -> None:
    import http.client

    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.perf_counter() + seconds

    def loop() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port)
        mine = []
        while (t0 := time.perf_counter()) < stop_at:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            assert response.status == 200, response.status
            mine.append(time.perf_counter() - t0)
        conn.close()
        with lock:
            latencies.extend(mine)

    workers = [threading.Thread(target=loop) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put(latencies)


def load(port: int, path: str, seconds: float, processes: int, threads: int) -> tuple[float, float, float]:
    """(requests/s, p50 ms, p99 ms) of ``processes`` x ``threads`` keep-alive connections."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_client, args=(port, path, seconds, threads, out)) for _ in range(processes)]
    for p in procs:
        p.start()
    latencies = sorted(itertools.chain.from_iterable(out.get() for _ in procs))
    for p in procs:
        p.join()
    n = len(latencies)
    return n / seconds, latencies[n // 2] * 1000, latencies[min(n - 1, int(n * 0.99))] * 1000


def _wait_ready(port: int, proc: subprocess.Popen) -> None:
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("server exited")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server not ready")


def bench_rest(data_dir: str, seconds: float, rounds: int, processes: int, threads: int) -> list[tuple]:
    from statekeep.functions.config.service import FunctionService
    from statekeep.testing.servers import free_port

    with FunctionService.open(f"local://{data_dir}") as service:
        service.registry.create({"tenant": "bench", "namespace": "ns", "name": "fn", "inputs": ["in"]},
                                b"def process(input, context):\n    pass\n")
        service.registry.state_store("bench", "ns", "fn").set_counter(KEY, 42)
    ours_port, base_port = free_port(), free_port()
    ours = subprocess.Popen([sys.executable, "-c", "import sys; from statekeep.cli import main; sys.exit(main())",
                             "standalone", "--data-dir", data_dir, "--port", str(ours_port), "--no-worker"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = subprocess.Popen([sys.executable, __file__, "--serve-baseline", data_dir, str(base_port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_ready(ours_port, ours)
        _wait_ready(base_port, base)
        quoted = KEY.replace("/", "%2F")
        ours_path = f"/admin/v3/functions/bench/ns/fn/state/{quoted}"
        base_path = f"/state/{quoted}"
        load(ours_port, ours_path, 0.5, processes, threads)  # warm up both
        load(base_port, base_path, 0.5, processes, threads)
        ours_runs, base_runs = [], []
        for i in range(rounds):  # alternate, and swap who goes first, so drifts in load hit both alike
            pair = [(ours_runs, ours_port, ours_path), (base_runs, base_port, base_path)]
            for runs, port, path in pair if i % 2 == 0 else reversed(pair):
                runs.append(load(port, path, seconds, processes, threads))
        median = lambda runs: sorted(runs)[len(runs) // 2]  # noqa: E731 - the median round by throughput
        ratio = statistics.median(o[0] / b[0] for o, b in zip(ours_runs, base_runs))
        return [("REST GET .../state/{key}", median(ours_runs), "bare FastAPI route, same store", median(base_runs),
                 ratio)]
    finally:
        for proc in (ours, base):
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter measurements")
    parser.add_argument("--backends", default="memory,local,zk,etcd")
    parser.add_argument("--no-rest", action="store_true", help="skip the REST comparison")
    parser.add_argument("--clients", default="2x4", help="REST load: PROCESSESxTHREADS (default %(default)s)")
    parser.add_argument("--serve-baseline", nargs=2, metavar=("DIR", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_baseline:
        serve_baseline(args.serve_baseline[0], int(args.serve_baseline[1]))
        return
    seconds = 0.6 if args.quick else 3.0
    from statekeep.testing import servers

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        with servers.backend_urls(args.backends.split(","), tmp) as urls:
            for backend, url in urls:
                for provider in ("metadata", "embedded") if backend == "local" else ("metadata",):
                    for op, r, base, br, ratio in bench_store(url, provider, seconds):
                        unit = "keys/s" if "keys/s" in op else "ops/s"
                        results.append((f"{backend} ({provider})", op.replace(" (keys/s)", ""), f"{r:,.0f} {unit}",
                                        base.replace(" (keys/s)", ""), f"{br:,.0f} {unit}", f"{ratio:.2f}x"))
        if not args.no_rest:
            processes, threads = (int(x) for x in args.clients.split("x"))
            rest = bench_rest(os.path.join(tmp, "rest"), 1.0 if args.quick else 1.5, 3 if args.quick else 12,
                              processes, threads)
            for op, (r, p50, p99), base, (br, bp50, bp99), ratio in rest:
                results.append(("local (uvicorn)", op, f"{r:,.0f} req/s, p50 {p50:.2f} ms, p99 {p99:.2f} ms", base,
                                f"{br:,.0f} req/s, p50 {bp50:.2f} ms, p99 {bp99:.2f} ms", f"{ratio:.2f}x"))

    header = ("backend", "operation", "result", "baseline (same run)", "baseline result", "ratio")
    lines = [header] + results
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for i, line in enumerate(lines):
        print(" | ".join(cell.rjust(w) if c in (2, 4, 5) else cell.ljust(w)
                         for c, (cell, w) in enumerate(zip(line, widths))))
        if i == 0:
            print("-+-".join("-" * w for w in widths))
    print(json.dumps({"rest_clients": args.clients}))


if __name__ == "__main__":
    main()
