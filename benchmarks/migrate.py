"""statekeep migrate local:// -> etcd:// and local:// -> zk:// against the raw client writing the same keys.

    flock /tmp/statekeep-heavy.lock python benchmarks/migrate.py [--keys N] [--state-keys M]

Builds two local:// sources: "tree", N metadata keys (100-byte values, 100 per parent), and "state", one
function with M state keys (half counters). Then for each remote backend, in the same run:

- raw multi: the backend's own ``multi`` in a loop writing the same N tree keys and values (batches of the
  size the migration uses) into a fresh namespace, as upserts and again as create-only puts (expected
  version -1, the form a migration into an empty target writes); on ZooKeeper also raw kazoo: transactions of 500
  creates straight through kazoo (no statekeep in between);
- migrate: ``statekeep.migrate.migrate`` of each source into a fresh namespace: plan (read and count the
  source), copy (with its journal; state through the target's provider, changelog records included),
  verify (read both sides again).

Prints keys/s of each and the ratios of the migration's copy phase and end to end against raw multi.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid

from statekeep.functions.config.service import FunctionService
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
        if not state_keys:
            return
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"},
                                b"def process(input, context):\n    return input\n")
        state = service.registry.state_store("t", "n", "f")
        for i in range(0, state_keys, 5000):
            chunk = range(i, min(i + 5000, state_keys))
            state.apply_batch({f"k{j:07d}": VALUE for j in chunk if j % 2},
                              {f"k{j:07d}": j for j in chunk if not j % 2})


def raw(url: str, keys: int, scheme: str, expected_version: int | None = None) -> float:
    per = BATCH_LIMITS[scheme][0]
    paths = tree_keys(keys)
    with open_store(url) as store:
        start = time.perf_counter()
        for i in range(0, len(paths), per):
            store.multi([Put(p, VALUE, expected_version) for p in paths[i:i + per]])
        return time.perf_counter() - start


def raw_kazoo(address: str, chroot: str, keys: int) -> float:
    from kazoo.client import KazooClient

    setup = KazooClient(hosts=address)  # the chroot must exist before a client uses it
    setup.start()
    setup.ensure_path(chroot)
    setup.stop()
    setup.close()
    client = KazooClient(hosts=address + chroot)
    client.start()
    try:
        paths = tree_keys(keys)
        start = time.perf_counter()
        made: set[str] = set()
        for i in range(0, len(paths), 500):
            txn = client.transaction()
            for path in paths[i:i + 500]:
                for parent in ("/bench", path.rsplit("/", 1)[0]):
                    if parent not in made:
                        made.add(parent)
                        txn.create(parent, b"")
                txn.create(path, VALUE)
            assert not any(isinstance(r, Exception) for r in txn.commit())
        return time.perf_counter() - start
    finally:
        client.stop()
        client.close()


def timed(source: str, target: str, keys: int) -> tuple[float, float, str]:
    start = time.perf_counter()
    report = migrate(source, target, progress=False)
    elapsed = time.perf_counter() - start
    assert report.ok
    return keys / report.seconds["copy"], keys / elapsed, ", ".join(f"{k} {v:.1f}s" for k, v in report.seconds.items())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--state-keys", type=int, default=10_000)
    args = parser.parse_args()
    zk, etcd = servers.start("zookeeper"), servers.start("etcd")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tree, state = f"local://{tmp}/tree", f"local://{tmp}/state"
            build(tree, args.keys, 0)
            build(state, 0, args.state_keys)
            print(f"sources: tree = {args.keys} metadata keys; state = one function with {args.state_keys} state keys")
            print(f"{'target':<6} {'what':<26} {'keys/s':>9} {'vs raw multi':>13} {'vs raw client':>14}  phases")
            for scheme, server in (("etcd", etcd), ("zk", zk)):
                raw_rate = args.keys / raw(f"{scheme}://{server.address}/raw{uuid.uuid4().hex[:8]}", args.keys, scheme)
                client_rate = raw_rate  # etcd: the backend's multi (aetcd underneath); no bare-aetcd baseline here
                if scheme == "zk":
                    client_rate = args.keys / raw_kazoo(server.address, f"/kz{uuid.uuid4().hex[:8]}", args.keys)
                print(f"{scheme:<6} {'raw multi (tree keys)':<26} {raw_rate:>9,.0f} {1:>13.2f} "
                      f"{raw_rate / client_rate:>14.2f}")
                # the form a migration into an empty target writes: create-only puts (expected version -1)
                create_rate = args.keys / raw(f"{scheme}://{server.address}/raw{uuid.uuid4().hex[:8]}", args.keys,
                                              scheme, -1)
                print(f"{scheme:<6} {'raw multi, create-only':<26} {create_rate:>9,.0f} "
                      f"{create_rate / raw_rate:>13.2f} {create_rate / client_rate:>14.2f}")
                if scheme == "zk":
                    print(f"{scheme:<6} {'raw kazoo txn (tree keys)':<26} {client_rate:>9,.0f} "
                          f"{client_rate / raw_rate:>13.2f} {1:>14.2f}")
                for label, source, n in (("tree", tree, args.keys), ("state", state, args.state_keys)):
                    target = f"{scheme}://{server.address}/m{uuid.uuid4().hex[:8]}"
                    copy_rate, e2e_rate, phases = timed(source, target, n)
                    print(f"{scheme:<6} {'migrate ' + label + ': copy phase':<26} {copy_rate:>9,.0f} "
                          f"{copy_rate / raw_rate:>13.2f} {copy_rate / client_rate:>14.2f}  {phases}")
                    print(f"{scheme:<6} {'migrate ' + label + ': end to end':<26} {e2e_rate:>9,.0f} "
                          f"{e2e_rate / raw_rate:>13.2f} {e2e_rate / client_rate:>14.2f}")
    finally:
        zk.stop()
        etcd.stop()


if __name__ == "__main__":
    main()
