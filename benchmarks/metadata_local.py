"""local:// against the raw LMDB engine doing the same work with the same durability, in one run.

    python benchmarks/metadata_local.py [--quick]

Prints ops/s for statekeep and for raw LMDB and the ratio of each operation (the embedded state
provider's get and get_counter against a raw LMDB get of the same key), then durable
throughput with 8 writer threads (group commit) against one fsync per write.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import tempfile
import threading
import time

import lmdb

from statekeep.metadata import open_store
from statekeep.metadata.local import children_prefix, node_key
from statekeep.state import open_provider

HEADER = struct.Struct(">qqqQ")
COUNTER = struct.Struct(">q")
VALUE = b"v" * 100


def rate(n: int, fn) -> float:
    start = time.perf_counter()
    fn()
    return n / (time.perf_counter() - start)


def paired(n: int, ours, base, slices: int = 10) -> tuple[float, float, float]:
    """(ours ops/s, baseline ops/s, ratio) for read loops ``ours(k)``/``base(k)`` of ``k`` ops: alternating
    slices, so both see the same background load (other processes swing single runs by 30%); medians,
    the ratio being the median of the per-slice ratios."""
    a, b = [], []
    for i in range(slices):
        pair = ((ours, a), (base, b)) if i % 2 == 0 else ((base, b), (ours, a))
        for fn, out in pair:
            out.append(rate(n // slices, lambda fn=fn: fn(n // slices)))
    return statistics.median(a), statistics.median(b), statistics.median(x / y for x, y in zip(a, b))


def raw_env(directory: str) -> lmdb.Environment:
    env = lmdb.open(directory, map_size=1 << 30, max_dbs=2, sync=True, metasync=True, readahead=False)
    return env


def bench(quick: bool) -> list[tuple[str, float, float, float | None]]:
    n_put = 300 if quick else 2000
    n_get = 20_000 if quick else 600_000
    n_children = 2000 if quick else 20_000
    rows = []
    with tempfile.TemporaryDirectory() as sk_dir, tempfile.TemporaryDirectory() as raw_dir:
        store = open_store(f"local://{sk_dir}")
        env = raw_env(raw_dir)
        nodes = env.open_db(b"nodes")

        def sk_put():
            for i in range(n_put):
                store.put(f"/bench/put/{i}", VALUE)

        def raw_put():
            for i in range(n_put):
                with env.begin(write=True, db=nodes) as txn:
                    txn.put(node_key(f"/bench/put/{i}"), HEADER.pack(0, 0, 0, 0) + VALUE)

        rows.append(("durable put", rate(n_put, sk_put), rate(n_put, raw_put), None))

        def sk_cas():
            for i in range(n_put):
                store.put("/bench/cas", VALUE, i - 1)

        def raw_cas():
            for i in range(n_put):
                key = node_key("/bench/cas")
                with env.begin(write=True, db=nodes) as txn:
                    raw = txn.get(key)
                    version = HEADER.unpack_from(raw)[0] if raw else -1
                    if i and version != i - 1:
                        raise AssertionError("lost race in a single-writer benchmark")
                    txn.put(key, HEADER.pack(version + 1, 0, 0, 0) + VALUE)

        rows.append(("compare-and-set put", rate(n_put, sk_cas), rate(n_put, raw_cas), None))

        keys = [f"/bench/put/{i % n_put}" for i in range(n_get // 10)]
        raw_keys = [node_key(k) for k in keys]

        def sk_get(n: int) -> None:
            get = store.get
            for k in keys[:n]:
                get(k)

        def raw_get(n: int) -> None:  # the fastest raw read: db passed positionally (db= costs ~20% here)
            begin, unpack = env.begin, HEADER.unpack_from
            for k in raw_keys[:n]:
                with begin(nodes) as txn:
                    raw = txn.get(k)
                unpack(raw)

        rows.append(("get", *paired(n_get, sk_get, raw_get)))

        # The embedded state provider against a raw LMDB get of the same key in the same file
        # (its own database, its own layout: 8-byte version, tag, payload), decoded alike.
        provider = open_provider("embedded", {"store": store})
        state = provider.get_state_store("bench", "ns", "fn")
        state.put("word", VALUE)
        state.incr("count", 7)
        state_env, state_db = state._env, state._state
        value_key, count_key = state._prefix + b"word", state._prefix + b"count"

        def raw_state_get(n: int) -> None:
            begin = state_env.begin
            for _ in range(n):
                with begin(state_db) as txn:
                    raw = txn.get(value_key)
                raw[9:]  # the decode a raw user does too

        def raw_state_get_counter(n: int) -> None:
            begin, unpack = state_env.begin, COUNTER.unpack_from
            for _ in range(n):
                with begin(state_db) as txn:
                    raw = txn.get(count_key)
                unpack(raw, 9)

        def state_get(n: int) -> None:
            get = state.get
            for _ in range(n):
                get("word")

        def state_get_counter(n: int) -> None:
            get = state.get_counter
            for _ in range(n):
                get("count")

        rows.append(("embedded state get", *paired(n_get, state_get, raw_state_get)))
        rows.append(("embedded state get_counter", *paired(n_get, state_get_counter, raw_state_get_counter)))

        def sk_children():
            for _ in range(n_children):
                store.get_children("/bench/put")

        prefix = children_prefix("/bench/put")

        def raw_children():
            for _ in range(n_children):
                with env.begin(db=nodes) as txn:
                    cursor = txn.cursor()
                    names = []
                    if cursor.set_range(prefix):
                        for key in cursor.iternext(values=False):
                            if not key.startswith(prefix):
                                break
                            names.append(key[len(prefix):].decode())

        rows.append(("get_children (%d children)" % n_put, rate(n_children, sk_children),
                     rate(n_children, raw_children), None))
        store.close()
        env.close()
    return rows


def group_commit(quick: bool, threads: int) -> tuple[float, float]:
    per_thread = 50 if quick else 300

    def run(put) -> float:
        def worker(t):
            for i in range(per_thread):
                put(t, i)

        pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
        start = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return threads * per_thread / (time.perf_counter() - start)

    with tempfile.TemporaryDirectory() as sk_dir, tempfile.TemporaryDirectory() as raw_dir:
        store = open_store(f"local://{sk_dir}")
        grouped = run(lambda t, i: store.put(f"/gc/{t}/{i}", VALUE))
        store.close()
        env = raw_env(raw_dir)
        lock = threading.Lock()

        def one_fsync_per_write(t, i):
            with lock, env.begin(write=True) as txn:
                txn.put(node_key(f"/gc/{t}/{i}"), VALUE)

        single = run(one_fsync_per_write)
        env.close()
    return grouped, single


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer operations (a smoke run)")
    args = parser.parse_args()
    print(f"{'operation':34} {'statekeep ops/s':>16} {'raw LMDB ops/s':>16} {'ratio':>7}")
    for name, ours, raw, ratio in bench(args.quick):
        print(f"{name:34} {ours:16,.0f} {raw:16,.0f} {ours / raw if ratio is None else ratio:7.2f}")
    print("reads: alternating slices, medians; target: get and the embedded state reads >= 0.85x raw LMDB")
    print()
    print(f"{'writer threads':34} {'group commit':>16} {'fsync per write':>16} {'ratio':>7}")
    for threads in (8, 64):
        grouped, single = group_commit(args.quick, threads)
        print(f"{threads:<34} {grouped:16,.0f} {single:16,.0f} {grouped / single:7.2f}")


if __name__ == "__main__":
    main()
