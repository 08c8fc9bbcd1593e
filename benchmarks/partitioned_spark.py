"""Partition-owned state (``--state-dir``) on Spark: cold local copies, and a standalone cluster.

    SPARK_LOCAL_IP=127.0.0.1 python benchmarks/partitioned_spark.py cold \\
        [--keys 100000] [--events 250000]
    SPARK_LOCAL_IP=127.0.0.1 python benchmarks/partitioned_spark.py cluster \\
        [--keys 40000] [--events 400000] [--state-dir URL]

``cold``: keyed counting (benchmarks/spark_state.py's function) on local[2], state in a shared directory. Its
state is built (4 micro-batches over ``--keys`` keys), then one micro-batch of ``--events`` events runs warm.
Then every partition "moves to another executor": the Python workers start again with an empty local cache
(``STATEKEEP_STATE_CACHE`` of the executors changed; a warm-up query on another function starts them), and the
next micro-batch restores each partition from its snapshot and tail before applying; then one more runs warm
in the new workers. Printed: the duration of each micro-batch (Spark's own progress report) and the ratio
cold / warm (target: the cold one at >= 0.6x the rate of a warm one).

``cluster``: the two-worker standalone cluster of the tests (statekeep.testing.spark_cluster, 1 core each) and a
ZooKeeper server on loopback; the same counting with state per key in ZooKeeper, then with partition-owned
state under ``--state-dir`` (default: a shared directory of the run) and ZooKeeper coordinating; results
checked against counts computed in Python; events/s and the ratio printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from statekeep.functions.driver.sparkpython import spark_python  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", spark_python())  # see statekeep.functions.driver.sparkpython
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from spark_state import COUNT_ONLY, batch_seconds, run_statekeep, write_input  # noqa: E402

from statekeep.functions.driver import session as sk_session  # noqa: E402
from statekeep.functions.driver import spark as sk_spark  # noqa: E402
from statekeep.functions.config.service import FunctionService  # noqa: E402
from statekeep.state.partitioned import state_storage  # noqa: E402
from statekeep.testing.servers import backend_urls  # noqa: E402


def add_file(inputs: str, index: int, events: int, keys: int, seed: int) -> Counter:
    """One more input file (one micro-batch): ``events`` events over ``keys`` keys."""
    staging = f"{inputs}-staging-{index}"
    counts = write_input(staging, events, keys, 1, seed)
    os.replace(f"{staging}/part-000.jsonl", f"{inputs}/part-{index:03d}.jsonl")
    os.rmdir(staging)
    return counts


def run_once(service: FunctionService, spark, url: str, name: str, work: str) -> list[tuple[int, float]]:
    """Run function ``name`` over its new input; (rows, seconds) of each micro-batch."""
    query = sk_spark.run_registered(service, url, "public", "default", name, checkpoint_root=f"{work}/ckpt",
                                    once=True, spark=spark)
    query.await_termination()
    return batch_seconds(query.query)


def cold(args: argparse.Namespace, work: str) -> None:
    spark = sk_session.spark_session("local[2]", "partitioned_cold_bench", shuffle_partitions=2)
    url, inputs, expected = f"local://{work}/meta", f"{work}/in", Counter()
    expected.update(write_input(inputs, args.events * 4, args.keys, 4, 42))
    write_input(f"{work}/other", 20_000, 1000, 1, 7)
    storage = state_storage(f"file://{work}/shared")
    options = {"userConfig": {"inputOptions": {"maxFilesPerTrigger": "1"}}, "keyField": "word", "parallelism": 2,
               "stateStorage": storage}
    with FunctionService.open(url) as service:
        for name, source in (("count", inputs), ("other", f"{work}/other")):
            service.registry.create({"tenant": "public", "namespace": "default", "name": name, "inputs": [source],
                                     **options}, COUNT_ONLY)
        spark.sparkContext.environment["STATEKEEP_STATE_CACHE"] = f"{work}/cache-1"
        built = run_once(service, spark, url, "count", work)
        rows: list[tuple[str, float]] = []
        for index, phase in enumerate(("warm", "new workers, empty cache", "warm again"), start=4):
            if index == 5:  # every partition moves: new Python workers, with an empty local cache
                spark.sparkContext.environment["STATEKEEP_STATE_CACHE"] = f"{work}/cache-2"
                run_once(service, spark, url, "other", work)  # starts them (imports, first state opened)
            expected.update(add_file(inputs, index, args.events, args.keys, 100 + index))
            (_, seconds), = run_once(service, spark, url, "count", work)
            rows.append((phase, seconds))
        # the cold micro-batch really ran in workers with an empty cache: they filled the new one
        assert os.listdir(f"{work}/cache-2"), "the executors did not take the new cache directory"
        state = service.registry.state_store("public", "default", "count")
        equal = {e.key: e.counter for e in state.scan_entries()} == expected
    print(f"\nstate of {len(expected):,} keys built in {len(built)} micro-batches "
          f"({sum(t for _, t in built):.1f} s); then micro-batches of {args.events:,} events; counts equal: "
          f"{'yes' if equal else 'NO'}")
    print(f"{'micro-batch':<28}{'seconds':>9}{'events/s':>11}")
    for phase, seconds in rows:
        print(f"{phase:<28}{seconds:>9.2f}{args.events / seconds:>11,.0f}")
    warm = min(rows[0][1], rows[2][1])
    ratio = warm / rows[1][1]
    print(f"target: cold micro-batch >= 0.6x a warm one: {ratio:.2f}x ({'met' if ratio >= 0.6 else 'missed'})")
    spark.stop()


def cluster(args: argparse.Namespace, work: str) -> None:
    from statekeep.testing.spark_cluster import SparkCluster

    expected = write_input(f"{work}/in", args.events, args.keys, 4, 42)
    write_input(f"{work}/warm", 8000, 800, 2, 43)
    shared = args.state_dir or f"file://{work}/shared"
    spark_cluster = SparkCluster.start(workers=2, cores=1, memory="1g", python=sys.executable)
    try:
        spark = sk_session.spark_session(spark_cluster.master_url, "partitioned_cluster_bench", shuffle_partitions=2)
        results = {}
        with backend_urls(["zk"], work) as urls:
            (_, zk), = list(urls)
            for label, state_dir in (("zk per key", None), ("zk + state-dir", shared)):
                for tag, inputs in (("warm", f"{work}/warm"), ("run", f"{work}/in")):
                    name = f"{tag}-{label.replace(' ', '').replace('+', '-')}"
                    Path(f"{work}/{name}").mkdir()
                    where = state_dir and f"{state_dir.rstrip('/')}/{name}"
                    results[label] = run_statekeep(spark, inputs, f"{work}/{name}", f"{zk}/{name}", COUNT_ONLY, where)
                print(f"  {label}: {results[label][0]:.1f} s", file=sys.stderr)
        print(f"\n{args.events:,} events over {args.keys:,} keys in 4 micro-batches on a standalone cluster of 2 "
              f"workers x 1 core (Spark {spark.version}); ZooKeeper on loopback; time from start to termination")
        print(f"{'state':<18}{'time s':>8}{'events/s':>11}  equal")
        for label, (elapsed, counts, _) in results.items():
            print(f"{label:<18}{elapsed:>8.1f}{args.events / elapsed:>11,.0f}  {'yes' if counts == expected else 'NO'}")
        ratio = results["zk per key"][0] / results["zk + state-dir"][0]
        print(f"partition-owned state vs state per key in ZooKeeper, same cluster and run: {ratio:.2f}x")
        spark.stop()
    finally:
        spark_cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["cold", "cluster"])
    parser.add_argument("--keys", type=int, default=None, help="default: 100000 (cold), 40000 (cluster)")
    parser.add_argument("--events", type=int, default=None, help="default: 250000 per micro-batch (cold), "
                                                                 "400000 in all (cluster)")
    parser.add_argument("--state-dir", default=None, help="cluster: where partition-owned state goes")
    args = parser.parse_args()
    cold_mode = args.mode == "cold"
    args.keys = args.keys or (100_000 if cold_mode else 40_000)
    args.events = args.events or (250_000 if cold_mode else 400_000)
    work = tempfile.mkdtemp(prefix="sk-partitioned-spark-bench-")
    start = time.perf_counter()
    try:
        (cold if cold_mode else cluster)(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"({time.perf_counter() - start:.0f} s in all)", file=sys.stderr)


if __name__ == "__main__":
    main()
