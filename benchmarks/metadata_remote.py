"""zk:// and etcd:// against their raw client libraries (kazoo; aetcd) on one operation mix, and k8s:// against
the raw ``kubernetes`` client on get, put, compare-and-set and watch, in one run; then local://, zk://, etcd://
and k8s:// side by side on the mix, so one sees what a remote store costs.

    python benchmarks/metadata_remote.py [--quick] [--ops N] [--rounds N] [--backends zk,etcd,k8s]

ZooKeeper and etcd are started on loopback (statekeep.testing.servers); both fsync every write, as local:// does.

The mix, on 2,000 keys (/bench/p00../p49, 40 children each, 100-byte values), one op chosen at random per step:
  50% get of a random key                   statekeep get(path)             kazoo get(path)
  30% compare-and-set update                put(path, v, expected_version)  kazoo set(path, v, version)
  10% create of a new key (parent exists)   put(path, v, -1)                kazoo create(path, v)
  10% children of a random parent           get_children(parent)            sorted(kazoo get_children(parent))
Each thread updates only its own keys (index % threads) and remembers their versions, so every CAS succeeds and
both sides do the same writes; the raw side checks its results as statekeep does (a CAS or create that fails raises).

Raw etcd uses statekeep's own key layout (PREFIX + path holds the value; PREFIX "\\0c" parent "\\0" name is the
children index), so it does the same work: get = one Range of the key; CAS = a Txn [version(key) == v+1] -> put;
create = a Txn [version(key) == 0, version(parent) > 0] -> put key + put index entry; children = one keys-only
Range over the parent's index. (statekeep's create also compares that the parent has no lease, an ephemeral key
having no children; aetcd's public API has no lease compare, and the server-side cost of a compare is negligible.)

Raw aetcd is driven the way a synchronous caller must drive it, as statekeep's etcd:// does: one asyncio loop in
one thread, every thread submitting with run_coroutine_threadsafe(...).result(). That is the fair baseline for a
sync API (the ratio then shows statekeep's own overhead, not the cost of being sync). The same mix natively async
(N tasks on one loop, no thread hop) is printed below the table for reference: what an asyncio program would get.

k8s:// (a kube-apiserver over etcd, statekeep.testing.servers) against the raw ``kubernetes`` client, one operation
at a time on 400 keys of statekeep's layout (one ConfigMap per key, its path, version and times in annotations),
each side doing the same requests: get = one read of the ConfigMap (raw: read_namespaced_config_map, deserialized
into the client's model, its ordinary use); put = an update of an existing key (statekeep: a replace conditional on
the resourceVersion it last saw; raw: the same replace, same body); CAS = put(path, v, expected_version) (raw: the
same conditional replace, the thread remembering each key's resourceVersion and version); watch = the time from
a put to its notification at a listener on another connection (raw: a watch stream of the store's label). Its
creates and multis are transactions (Kubernetes has no multi-object write: docs/operations/kubernetes.md), which
the raw client has no equivalent of; they are in the mix of the second table.

Every run is a fixed number of operations (after a 5% warm-up) on a fresh, identically filled namespace of a
server that has already served one run of each side (a just-started JVM is slow). Each side runs ``--rounds``
times (default 4; 2 with --quick) in A-B-B-A order (statekeep, raw, raw, statekeep, ...), so a drifting server
or a noisy neighbour favours neither side; ops/s is the median of a side's runs. On a shared 2-core machine
single runs vary by +-20%: compare ratios, not single numbers, and trust the full run over --quick.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import statistics
import tempfile
import threading
import time
import uuid

from statekeep.metadata import Put, open_store
from statekeep.testing import servers

VALUE = b"v" * 100
PARENTS, CHILDREN = 50, 40
N_KEYS = PARENTS * CHILDREN
THREADS = (1, 16)


def parent(j: int) -> str:
    return f"/bench/p{j:02d}"


def key(i: int) -> str:
    return f"{parent(i % PARENTS)}/k{i // PARENTS:03d}"


def fill(url: str) -> None:
    """The same starting state for every run: N_KEYS keys at version 0 under PARENTS parents."""
    with open_store(url) as store:
        for j in range(PARENTS):  # one multi per parent: 40 keys + index entries fit etcd's 128 ops
            store.multi([Put(key(i), VALUE, -1) for i in range(j, N_KEYS, PARENTS)])


# ---- the mix, as a script per thread ------------------------------------------------------------

GET, CAS, CREATE, CHILDREN_OP = range(4)


def script(thread: int, threads: int, n: int, run: str) -> list[tuple[int, str]]:
    rng = random.Random(f"{thread}/{threads}")
    own = list(range(thread, N_KEYS, threads))
    ops = []
    for step in range(n):
        r = rng.random()
        if r < 0.5:
            ops.append((GET, key(rng.randrange(N_KEYS))))
        elif r < 0.8:
            ops.append((CAS, key(rng.choice(own))))
        elif r < 0.9:
            ops.append((CREATE, f"{parent(rng.randrange(PARENTS))}/n{run}-{thread}-{step}"))
        else:
            ops.append((CHILDREN_OP, parent(rng.randrange(PARENTS))))
    return ops


class Target:
    """One side of a comparison: the four operations, each raising if it did not do what was asked."""

    def get(self, path: str) -> object: ...
    def cas(self, path: str, version: int) -> None: ...
    def create(self, path: str) -> None: ...
    def children(self, path: str) -> list[str]: ...
    def close(self) -> None: ...


def drive(target: Target, threads: int, total: int) -> float:
    """ops/s of ``total`` operations of the mix on ``threads`` threads sharing ``target``."""
    per_thread = total // threads
    warm = max(per_thread // 20, 5)
    run = uuid.uuid4().hex[:6]
    scripts = [script(t, threads, warm + per_thread, run) for t in range(threads)]
    barrier = threading.Barrier(threads + 1)
    ends: list[float] = []
    errors: list[BaseException] = []

    def worker(ops: list[tuple[int, str]]) -> None:
        versions: dict[str, int] = {}
        get, cas, create, children = target.get, target.cas, target.create, target.children
        try:
            for n, (kind, path) in enumerate(ops):
                if n == warm:
                    barrier.wait()
                if kind == GET:
                    if get(path) is None:
                        raise AssertionError(f"{path} missing")
                elif kind == CAS:
                    version = versions.get(path, 0)
                    cas(path, version)
                    versions[path] = version + 1
                elif kind == CREATE:
                    create(path)
                else:
                    children(path)
        except BaseException as e:
            errors.append(e)
            barrier.abort()
            raise
        ends.append(time.perf_counter())

    pool = [threading.Thread(target=worker, args=(s,)) for s in scripts]
    for t in pool:
        t.start()
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass
    start = time.perf_counter()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return threads * per_thread / (max(ends) - start)


# ---- statekeep ----------------------------------------------------------------------------------

class Statekeep(Target):
    def __init__(self, url: str) -> None:
        self.store = store = open_store(url)
        self.get, self.children = store.get, store.get_children

    def cas(self, path: str, version: int) -> None:
        self.store.put(path, VALUE, version)

    def create(self, path: str) -> None:
        self.store.put(path, VALUE, -1)

    def close(self) -> None:
        self.store.close()


# ---- kazoo --------------------------------------------------------------------------------------

class Kazoo(Target):
    def __init__(self, address: str, chroot: str) -> None:
        from kazoo.client import KazooClient

        self.client = KazooClient(hosts=address + chroot)
        self.client.start(timeout=10)
        self.get = self.client.get  # raises NoNodeError if absent: checked all the same

    def cas(self, path: str, version: int) -> None:
        self.client.set(path, VALUE, version)  # BadVersionError on a mismatch

    def create(self, path: str) -> None:
        self.client.create(path, VALUE)  # NoNodeError without the parent, NodeExistsError if present

    def children(self, path: str) -> list[str]:
        return sorted(self.client.get_children(path))

    def close(self) -> None:
        self.client.stop()
        self.client.close()


# ---- aetcd --------------------------------------------------------------------------------------

class AetcdOps:
    """The mix's operations as aetcd coroutines, on statekeep's key layout under ``prefix``."""

    def __init__(self, client, prefix: str) -> None:
        self.client, self.p, self.tx = client, prefix.encode(), client.transactions

    def index(self, path: str) -> bytes:
        head, _, name = path.rpartition("/")
        return self.p + b"\0c" + (head or "/").encode() + b"\0" + name.encode()

    async def get(self, path: str) -> object:
        return await self.client.get(self.p + path.encode())

    async def cas(self, path: str, version: int) -> None:
        k = self.p + path.encode()
        ok, _ = await self.client.transaction(compare=[self.tx.version(k) == version + 1],
                                              success=[self.tx.put(k, VALUE)], failure=[])
        if not ok:
            raise AssertionError(f"CAS of {path} at {version} failed")

    async def create(self, path: str) -> None:
        k, head = self.p + path.encode(), path.rpartition("/")[0]
        ok, _ = await self.client.transaction(
            compare=[self.tx.version(k) == 0, self.tx.version(self.p + head.encode()) > 0],
            success=[self.tx.put(k, VALUE), self.tx.put(self.index(path), b"")], failure=[])
        if not ok:
            raise AssertionError(f"create of {path} failed")

    async def children(self, path: str) -> list[str]:
        start = self.p + b"\0c" + path.encode() + b"\0"
        found = await self.client.get_prefix(start, keys_only=True)
        return [kv.key[len(start):].decode() for kv in found.kvs]  # the raw kvs: aetcd's fastest way


class Aetcd(Target):
    """aetcd driven synchronously: one loop thread, callers submit with run_coroutine_threadsafe."""

    def __init__(self, address: str, prefix: str) -> None:
        import aetcd

        host, _, port = address.rpartition(":")
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

        async def connect():
            client = aetcd.Client(host, int(port))
            await client.connect()
            return client

        self.client = self._run(connect())
        ops, run = AetcdOps(self.client, prefix), self._run
        self.get = lambda path: run(ops.get(path))
        self.cas = lambda path, version: run(ops.cas(path, version))
        self.create = lambda path: run(ops.create(path))
        self.children = lambda path: run(ops.children(path))

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self._run(self.client.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


def aetcd_native(address: str, prefix: str, tasks: int, total: int) -> float:
    """The mix natively async: ``tasks`` tasks on one loop, no thread hop."""
    import aetcd

    async def main() -> float:
        host, _, port = address.rpartition(":")
        client = aetcd.Client(host, int(port))
        await client.connect()
        ops = AetcdOps(client, prefix)
        per_task = total // tasks
        warm = max(per_task // 20, 5)
        run = uuid.uuid4().hex[:6]
        started = asyncio.Event()
        ready = 0

        async def worker(t: int) -> None:
            nonlocal ready
            versions: dict[str, int] = {}
            for n, (kind, path) in enumerate(script(t, tasks, warm + per_task, run)):
                if n == warm:
                    ready += 1
                    if ready == tasks:
                        started.set()
                    await started.wait()
                if kind == GET:
                    if await ops.get(path) is None:
                        raise AssertionError(f"{path} missing")
                elif kind == CAS:
                    version = versions.get(path, 0)
                    await ops.cas(path, version)
                    versions[path] = version + 1
                elif kind == CREATE:
                    await ops.create(path)
                else:
                    await ops.children(path)

        workers = [asyncio.ensure_future(worker(t)) for t in range(tasks)]
        await started.wait()
        start = time.perf_counter()
        await asyncio.gather(*workers)
        elapsed = time.perf_counter() - start
        await client.close()
        return tasks * per_task / elapsed

    return asyncio.run(main())


# ---- runs ---------------------------------------------------------------------------------------

def compare(kind: str, address: str, threads: int, total: int, rounds: int, warm_up: bool) -> tuple[float, float]:
    """(statekeep ops/s, raw ops/s): medians of ``rounds`` runs each, in A-B-B-A order, on fresh namespaces."""
    scheme = {"zookeeper": "zk", "etcd": "etcd"}[kind]

    def one(raw: bool) -> float:
        ns = f"/bench-{uuid.uuid4().hex[:10]}"
        fill(f"{scheme}://{address}{ns}")
        if raw:
            target: Target = Kazoo(address, ns) if kind == "zookeeper" else Aetcd(address, ns)
        else:
            target = Statekeep(f"{scheme}://{address}{ns}")
        try:
            return drive(target, threads, total)
        finally:
            target.close()

    if warm_up:  # a fresh server (the JVM above all) is slow at first: that must not count against either side
        one(False), one(True)
    ours: list[float] = []
    raw: list[float] = []
    for r in range(rounds):
        for side in ((False, True) if r % 2 == 0 else (True, False)):
            (raw if side else ours).append(one(side))
    return statistics.median(ours), statistics.median(raw)


def local(threads: int, total: int, rounds: int) -> float:
    rates = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as directory:
            fill(f"local://{directory}")
            target = Statekeep(f"local://{directory}")
            try:
                rates.append(drive(target, threads, total))
            finally:
                target.close()
    return statistics.median(rates)


# ---- kubernetes ---------------------------------------------------------------------------------

K8S_KEYS = 400


class KubeRaw:
    """The raw ``kubernetes`` client on the keys of the k8s:// store ``layout`` (its names and body builder)."""

    def __init__(self, server, layout) -> None:
        from kubernetes import client, config

        self.api = client.CoreV1Api(config.new_client_from_config(str(server.kubeconfig)))
        self.ns, self.layout = server.namespace, layout
        self.seen: dict[str, tuple[str, int]] = {}  # path -> (resourceVersion, version), per the thread's writes

    def get(self, path: str) -> object:
        return self.api.read_namespaced_config_map(self.layout._key_name(path), self.ns)

    def put(self, path: str, version: int | None = None) -> None:
        from statekeep.metadata._tree import Record

        rv, current = self.seen.get(path) or self._read(path)
        if version is not None and version != current:
            raise AssertionError(f"{path} is at {current}, not {version}")
        now = int(time.time() * 1000)
        body = self.layout._key_body(path, Record(current + 1, now, now, 0, VALUE), rv)
        done = self.api.replace_namespaced_config_map(self.layout._key_name(path), self.ns, body)
        self.seen[path] = (done.metadata.resource_version, current + 1)

    def _read(self, path: str) -> tuple[str, int]:
        found = self.get(path)
        return found.metadata.resource_version, int(found.metadata.annotations["statekeep.io/version"])


def _k8s_rate(op, threads: int, total: int) -> float:
    """ops/s of ``total`` calls ``op(thread, i)`` on ``threads`` threads."""
    per = total // threads
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        barrier.wait()
        try:
            for i in range(per):
                op(t, i)
        except BaseException as e:
            errors.append(e)

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]
    return threads * per / (time.perf_counter() - start)


def k8s_ops(server, total: int, rounds: int) -> None:
    """The per-operation table of k8s:// against the raw client (see the module docstring)."""
    url = server.store_url(f"bench{uuid.uuid4().hex[:8]}")
    store = open_store(url)
    paths = [f"/bench/k{i:03d}" for i in range(K8S_KEYS)]
    for i in range(0, K8S_KEYS, 100):
        store.multi([Put(p, VALUE, -1) for p in paths[i:i + 100]])
    raws = [KubeRaw(server, store) for _ in range(max(THREADS))]
    versions: dict[str, int] = {p: 0 for p in paths}  # each thread writes only its own keys
    lock = threading.Lock()

    def own(t: int, i: int, threads: int) -> str:
        return paths[(t + threads * i) % K8S_KEYS]

    def bump(path: str) -> int:
        with lock:
            versions[path] += 1
            return versions[path] - 1

    def ours_get(th: int):
        return lambda t, i: store.get(paths[(t * 7 + i) % K8S_KEYS])

    def raw_get(th: int):
        return lambda t, i: raws[t].get(paths[(t * 7 + i) % K8S_KEYS])

    def ours_put(th: int, cas: bool = False):
        def op(t: int, i: int) -> None:
            path = own(t, i, th)
            store.put(path, VALUE, versions[path] if cas else None)
            bump(path)
        return op

    def raw_put(th: int, cas: bool = False):
        def op(t: int, i: int) -> None:
            path = own(t, i, th)
            raws[t].put(path, versions[path] if cas else None)
            bump(path)
        return op

    sides = {"get": (ours_get, raw_get), "put": (ours_put, raw_put),
             "CAS": (lambda th: ours_put(th, True), lambda th: raw_put(th, True))}
    for threads in THREADS:
        for name, (ours_op, raw_op) in sides.items():
            n = total if name == "get" else total // 2
            ours: list[float] = []
            theirs: list[float] = []
            for r in range(rounds):
                for raw_side in ((False, True) if r % 2 == 0 else (True, False)):
                    for raw in raws:  # statekeep wrote the keys since: each side starts from a read of each key
                        raw.seen.clear()
                    (theirs if raw_side else ours).append(
                        _k8s_rate((raw_op if raw_side else ours_op)(threads), threads, n))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"{'k8s://':10} {threads:7} {name:>5} {a:10,.0f} {b:12,.0f} {a / b:7.2f}   kubernetes "
                  f"(us/op {1e6 / a * threads:,.0f} vs {1e6 / b * threads:,.0f})", flush=True)
    _k8s_watch(server, store, raws[0], rounds)
    store.close()


def _k8s_watch(server, store, raw: KubeRaw, rounds: int, n: int = 200) -> None:
    """Median and 95th percentile from a put's start to its notification: statekeep's listener, a raw watch."""
    from kubernetes import watch

    def statekeep_side() -> list[float]:
        arrived: dict[str, float] = {}
        done = threading.Event()
        with open_store(store_url) as watcher:
            def on(event) -> None:
                if event.path.startswith("/bench/k") and event.type.value == "Modified":
                    arrived.setdefault(f"{event.path}", time.perf_counter())
                    if len(arrived) == n:
                        done.set()
            watcher.add_listener(on)
            return _timed_puts(arrived, done, n)

    def raw_side() -> list[float]:
        arrived: dict[str, float] = {}
        done = threading.Event()
        start_rv = raw.api.list_namespaced_config_map(server.namespace, label_selector=selector,
                                                      limit=1).metadata.resource_version
        w = watch.Watch()

        def follow() -> None:
            for event in w.stream(raw.api.list_namespaced_config_map, server.namespace, label_selector=selector,
                                  resource_version=start_rv, timeout_seconds=120):
                path = event["object"].metadata.annotations["statekeep.io/path"]
                if event["type"] == "MODIFIED":
                    arrived.setdefault(path, time.perf_counter())
                    if len(arrived) == n:
                        done.set()
                        w.stop()

        thread = threading.Thread(target=follow, daemon=True)
        thread.start()
        return _timed_puts(arrived, done, n)

    def _timed_puts(arrived: dict[str, float], done: threading.Event, count: int) -> list[float]:
        time.sleep(0.5)  # the watch is established
        started = {}
        for i in range(count):
            path = f"/bench/k{i:03d}"
            started[path] = time.perf_counter()
            store.put(path, VALUE)
            time.sleep(0.005)
        if not done.wait(60):
            raise AssertionError(f"{count - len(arrived)} notifications missing")
        return sorted(arrived[p] - started[p] for p in started)

    store_url = server.store_url(store.prefix.lstrip("/"))
    selector = f"statekeep.io/store={store.store_id},statekeep.io/kind=key"
    ours, theirs = [], []
    for r in range(rounds):
        for raw_first in ((False, True) if r % 2 == 0 else (True, False)):
            (theirs if raw_first else ours).append(raw_side() if raw_first else statekeep_side())
    med = lambda runs, q: statistics.median(run[int(q * (len(run) - 1))] for run in runs) * 1000  # noqa: E731
    print(f"{'k8s://':10} {1:7} {'watch':>5}   median {med(ours, .5):.1f} ms vs {med(theirs, .5):.1f} ms "
          f"({med(theirs, .5) / med(ours, .5):.2f}), 95th percentile {med(ours, .95):.1f} ms vs "
          f"{med(theirs, .95):.1f} ms: put to notification, statekeep vs a raw watch", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer operations (a smoke run)")
    parser.add_argument("--ops", type=int, help="operations per run (default 10000; 2000 with --quick)")
    parser.add_argument("--rounds", type=int, help="runs of each side per configuration (default 4; 2 with --quick)")
    parser.add_argument("--backends", default="zk,etcd,k8s", help="remote backends to run (default zk,etcd,k8s)")
    args = parser.parse_args()
    # kazoo warns of a dropped connection when it connects to a server that has only just started; it reconnects
    logging.getLogger("kazoo.client").setLevel(logging.ERROR)
    total = args.ops or (2000 if args.quick else 10_000)
    rounds = args.rounds or (2 if args.quick else 4)
    print(f"mix: 50% get, 30% CAS update, 10% create, 10% get_children on {N_KEYS} keys; {total} ops per run, "
          f"median of {rounds} runs per side")
    sk: dict[tuple[str, int], float] = {}
    native: dict[int, float] = {}
    print()
    print(f"{'backend':10} {'threads':>7} {'statekeep ops/s':>16} {'raw ops/s':>12} {'ratio':>7}   raw client")
    for kind, scheme, client in (("zookeeper", "zk", "kazoo"), ("etcd", "etcd", "aetcd, sync-driven")):
        if scheme not in args.backends.split(","):
            continue
        server = servers.start(kind)
        try:
            for threads in THREADS:
                ours, raw = compare(kind, server.address, threads, total, rounds, warm_up=threads == THREADS[0])
                sk[scheme, threads] = ours
                print(f"{scheme + '://':10} {threads:7} {ours:16,.0f} {raw:12,.0f} {ours / raw:7.2f}   {client}",
                      flush=True)
            if kind == "etcd":
                for tasks in THREADS:
                    ns = f"/bench-{uuid.uuid4().hex[:10]}"
                    fill(f"etcd://{server.address}{ns}")
                    native[tasks] = aetcd_native(server.address, ns, tasks, total)
        finally:
            server.stop()
    if "k8s" in args.backends.split(","):
        server = servers.start("kubernetes")
        try:
            print(f"{'backend':10} {'threads':>7} {'op':>5} {'statekeep/s':>10} {'raw ops/s':>12} {'ratio':>7}   "
                  "raw client")
            k8s_ops(server, total, rounds)
            for threads in THREADS:
                url = server.store_url(f"bench{uuid.uuid4().hex[:8]}")
                fill(url)
                target = Statekeep(url)
                try:
                    sk["k8s", threads] = drive(target, threads, total)
                finally:
                    target.close()
        finally:
            server.stop()
    if native:
        print("aetcd natively async for reference (tasks on one loop, no thread hop): "
              + ", ".join(f"{t} task{'s' * (t > 1)} {r:,.0f} ops/s" for t, r in native.items()))
    for threads in THREADS:
        sk["local", threads] = local(threads, total, rounds)
    print()
    print("statekeep on the same mix (durable writes everywhere; us/op = latency seen by one thread):")
    print(f"{'backend':10} " + " ".join(f"{f'{t} thread' + 's' * (t > 1):>12} {'us/op':>7}" for t in THREADS)
          + f" {'1 thread vs local':>18}")
    for scheme in ("local", *(s for s in ("zk", "etcd", "k8s") if (s, 1) in sk)):
        cells = " ".join(f"{sk[scheme, t]:12,.0f} {1e6 / sk[scheme, t] * t:7.0f}" for t in THREADS)
        print(f"{scheme + '://':10} {cells} {sk[scheme, 1] / sk['local', 1]:17.2f}x")


if __name__ == "__main__":
    main()
