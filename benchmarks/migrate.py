"""statekeep migrate local:// -> etcd:// and local:// -> zk:// against the raw client writing the same keys.

    flock /tmp/statekeep-heavy.lock python benchmarks/migrate.py [--keys N] [--state-keys M]

Builds a local:// source with N metadata keys (100-byte values, 100 per parent) and one function with M
state keys (half counters), then for each remote backend, in the same run:

- raw: the backend's own ``multi`` in a loop writing the same N keys and values (batches of the size the
  migration uses) into a fresh namespace: the floor of what any copy through that client costs;
- migrate: ``statekeep.migrate.migrate`` into a fresh namespace: plan (read and count the source),
  copy (tree, counters, functions and state, with its journal), verify (read both sides again).

Prints keys/s for raw, for the migration's copy phase and end to end, and the ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid

from statekeep.functions.service import FunctionService
from statekeep.metadata import Put, open_store
from statekeep.migrate import migrate
from statekeep.migrate.sink import BATCH_LIMITS
from statekeep.testing import servers

VALUE = b"v" * 100


def tree_keys(n: int) -> list[str]:
    return [f"/bench/g{i // 100:04d}/k{i:06d}" for i in range(n)]


def build(url: str, keys: int, state_keys: int) -> None:
    with FunctionService.open(url) as service:
        store = service.registry.store
        paths = tree_keys(keys)
        for i in range(0, len(paths), 5000):
            store.multi([Put(p, VALUE) for p in paths[i:i + 5000]])
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"},
                                b"def process(input, context):\n    return input\n")
        state = service.registry.state_store("t", "n", "f")
        for i in range(0, state_keys, 5000):
            chunk = range(i, min(i + 5000, state_keys))
            state.apply_batch({f"k{j:07d}": VALUE for j in chunk if j % 2},
                              {f"k{j:07d}": j for j in chunk if not j % 2})


def raw(url: str, keys: int, scheme: str) -> float:
    per = BATCH_LIMITS[scheme][0]
    paths = tree_keys(keys)
    with open_store(url) as store:
        start = time.perf_counter()
        for i in range(0, len(paths), per):
            store.multi([Put(p, VALUE) for p in paths[i:i + per]])
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--state-keys", type=int, default=10_000)
    args = parser.parse_args()
    zk, etcd = servers.start("zookeeper"), servers.start("etcd")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = f"local://{tmp}/source"
            build(source, args.keys, args.state_keys)
            total = args.keys + args.state_keys
            print(f"source: {args.keys} metadata keys + {args.state_keys} state keys of one function")
            print(f"{'target':<8} {'raw multi keys/s':>17} {'migrate copy keys/s':>20} {'end-to-end keys/s':>18} "
                  f"{'copy/raw':>9} {'e2e/raw':>8}  phases")
            for scheme, server in (("etcd", etcd), ("zk", zk)):
                raw_s = raw(f"{scheme}://{server.address}/raw{uuid.uuid4().hex[:8]}", args.keys, scheme)
                raw_rate = args.keys / raw_s
                start = time.perf_counter()
                report = migrate(source, f"{scheme}://{server.address}/m{uuid.uuid4().hex[:8]}", progress=False)
                elapsed = time.perf_counter() - start
                assert report.ok
                copy_rate = total / report.seconds["copy"]
                e2e_rate = total / elapsed
                phases = ", ".join(f"{k} {v:.1f}s" for k, v in report.seconds.items())
                print(f"{scheme:<8} {raw_rate:>17,.0f} {copy_rate:>20,.0f} {e2e_rate:>18,.0f} "
                      f"{copy_rate / raw_rate:>9.2f} {e2e_rate / raw_rate:>8.2f}  {phases}")
    finally:
        zk.stop()
        etcd.stop()


if __name__ == "__main__":
    main()
