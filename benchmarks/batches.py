"""``apply_batch`` of the metadata state provider on ZooKeeper and etcd (and of the embedded provider
on local://) against the raw client writing the same keys in full transactions, each key with its
changelog record, in one run.

    python benchmarks/batches.py [--keys 20000] [--backends local,zk,etcd]

Rows, keys per second (every key is an existing counter updated, plus one changelog record each):
- ``apply_batch, one write``: batches of ``batch_limits.max_keys`` keys, each one atomic ``multi``;
- ``apply_batch, staged``: ONE batch of all keys, larger than a transaction (stage, commit, apply);
- ``raw``: kazoo transactions of 250 keys (250 ``set_data`` + 250 sequential ``create``), or aetcd
  transactions of 60 keys (60 key puts + 60 record puts = 120 operations), one in flight, driven from
  a synchronous caller as statekeep's etcd:// is (one event loop thread). The raw client neither reads
  nor compares versions: it is the ceiling of the wire, not an equivalent of exactly-once.
- on local://, one ``apply_batch`` of all keys (the embedded provider's write, as a Spark partition's)
  against raw LMDB doing the same in one durable transaction: read each counter, put it plus one,
  put a record (key and value) under the next offset.
Ratios are against ``raw`` of the same backend. Target: >= 0.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from statekeep.state import open_provider  # noqa: E402
from statekeep.testing.servers import backend_urls  # noqa: E402


def ours(url: str, n: int) -> tuple[float, float]:
    provider = open_provider("embedded" if url.startswith("local://") else "metadata", {"metadata_url": url})
    try:
        state = provider.get_state_store("bench", "batches", "f")
        keys = [f"k{i:07d}" for i in range(n)]
        state.apply_batch({}, dict.fromkeys(keys, 1), marker="create")  # every key exists before timing
        per = state.batch_limits.max_keys
        start = time.perf_counter()
        for i in range(0, n, per):
            state.apply_batch({}, dict.fromkeys(keys[i:i + per], 1), marker=f"small-{i}")
        small = n / (time.perf_counter() - start)
        start = time.perf_counter()
        state.apply_batch({}, dict.fromkeys(keys, 1), marker="staged")
        staged = n / (time.perf_counter() - start)
        assert state.get_counter(keys[-1]) == 3
        return small, staged
    finally:
        provider.close()


def raw_zk(address: str, n: int) -> float:
    from kazoo.client import KazooClient

    client = KazooClient(hosts=address)
    client.start()
    try:
        value, per = b"\x02" + (1).to_bytes(8, "big"), 250
        paths = [f"/rawbench/kv/k{i:07d}" for i in range(n)]
        client.ensure_path("/rawbench/kv")
        client.ensure_path("/rawbench/log")
        for i in range(0, n, 500):
            t = client.transaction()
            for p in paths[i:i + 500]:
                t.create(p, value)
            t.commit()
        start = time.perf_counter()
        for i in range(0, n, per):
            t = client.transaction()
            for p in paths[i:i + per]:
                t.set_data(p, value)
                t.create("/rawbench/log/r", value + p.encode(), sequence=True)
            assert all(not isinstance(r, Exception) for r in t.commit())
        return n / (time.perf_counter() - start)
    finally:
        client.stop()
        client.close()


def raw_lmdb(directory: str, n: int) -> float:
    import lmdb

    env = lmdb.open(directory, map_size=1 << 32, max_dbs=2)
    state, log = env.open_db(b"state"), env.open_db(b"log")
    counter = struct.Struct(">q")
    keys = [b"k%07d" % i for i in range(n)]
    with env.begin(write=True, db=state) as txn:
        for k in keys:
            txn.put(k, counter.pack(1))
    start = time.perf_counter()
    with env.begin(write=True) as txn:
        get, put = txn.get, txn.put
        for offset, k in enumerate(keys):
            value = counter.pack(counter.unpack(get(k, db=state))[0] + 1)
            put(k, value, db=state)
            put(offset.to_bytes(8, "big"), k + value, db=log)
    elapsed = time.perf_counter() - start
    env.close()
    return n / elapsed


def raw_etcd(address: str, n: int) -> float:
    import aetcd

    host, port = address.rsplit(":", 1)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def run(coro):
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    client = run(_etcd_client(aetcd, host, int(port)))
    try:
        value, per = b"\x02" + (1).to_bytes(8, "big"), 60
        keys = [f"/rawbench/kv/k{i:07d}".encode() for i in range(n)]
        start = time.perf_counter()
        for i in range(0, n, per):
            chunk = keys[i:i + per]
            ops = [client.transactions.put(k, value) for k in chunk]
            ops += [client.transactions.put(b"/rawbench/log/r%010d" % (i + j), value + k) for j, k in enumerate(chunk)]
            run(client.transaction(compare=[], success=ops, failure=[]))
        return n / (time.perf_counter() - start)
    finally:
        run(client.close())
        loop.call_soon_threadsafe(loop.stop)


async def _etcd_client(aetcd, host: str, port: int):
    client = aetcd.Client(host=host, port=port)
    await client.connect()
    return client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=20_000)
    parser.add_argument("--backends", default="zk,etcd")
    args = parser.parse_args()
    print(f"{'backend':8} {'row':24} {'keys/s':>10} {'vs raw':>7}")
    with tempfile.TemporaryDirectory() as directory, backend_urls(args.backends.split(","), directory) as urls:
        for backend, url in urls:
            if backend == "local":
                raw = raw_lmdb(tempfile.mkdtemp(dir=directory), args.keys)
                rows = [("apply_batch, one write", ours(url, args.keys)[0]), ("raw", raw)]
            else:
                address = url.split("://", 1)[1].split("/", 1)[0]
                raw = (raw_zk if backend == "zk" else raw_etcd)(address, args.keys)
                small, staged = ours(url, args.keys)
                rows = [("apply_batch, one write", small), ("apply_batch, staged", staged), ("raw", raw)]
            for row, value in rows:
                print(f"{backend:8} {row:24} {value:10.0f} {value / raw:6.2f}x", flush=True)


if __name__ == "__main__":
    main()
