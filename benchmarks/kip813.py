"""KIP-813 on Kafka, two measurements, each against its baseline in the same run:

1. Keyed counting with the changelog on Kafka: the same registered function (``context.incr_counter(word, 1)``,
   parallelism 2, JSON-lines input of N events over K keys in F files, one micro-batch per file, local[2]) run
   with statekeep's own changelog only, and with ``changelogTopic`` too (a compacted topic of 4 partitions: each
   (batch, partition)'s changes also go to Kafka, in one transaction tied to the state commit). Each variant is
   warmed on a small input first, then timed from start to termination; ``--rounds`` runs of each, alternated, the
   best kept. Checked: the counts, and the topic's newest value of every key equal to them.
   Target: with Kafka >= 0.9x without (1M events, 100k keys).
2. Follower lag through Kafka: this process commits transactions of ``Serdes.Long()`` records (every 10 ms, a
   steady U updates/s over 10k keys, each value the transaction's number) with statekeep's Kafka delivery (a
   transactional producer, its batch recorded as a consumer group offset); a follower in ANOTHER process
   (``FollowerStore.open("kafka://...?value=long")``) records when each is applied to its copy (durable). Lag =
   applied - commit_transaction returned, on the machine-wide monotonic clock. Beside it, in the same run,
   statekeep's own follower lag at the same rate (``benchmarks/followers.py``'s measurement: ``apply_batch`` on the
   embedded store, a follower in another process). Both p50 and p99.

A Kafka broker is started on loopback (statekeep.testing.servers; its jars: ``statekeep jars install``) unless
``--bootstrap`` names one.

    python benchmarks/kip813.py [--quick] [--events N] [--keys K] [--files F] [--rounds R] [--seconds S] [--rate U]
                                [--bootstrap HOST:PORT] [--no-counting] [--no-lag]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter

from statekeep.functions.driver.sparkpython import spark_python  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", spark_python())  # see statekeep.functions.driver.sparkpython
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import followers as own_followers  # noqa: E402  - statekeep's own follower lag, measured the same way

COUNT = b'def process(input, context):\n    context.incr_counter(input["word"], 1)\n'
CHANGELOG_PARTITIONS = 4


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- 1. keyed counting ---------------------------------------------------------------------------


def write_input(directory: str, events: int, keys: int, files: int, seed: int) -> Counter:
    rng, expected = random.Random(seed), Counter()
    os.makedirs(directory)
    for f in range(files):
        words = [f"w{rng.randrange(keys)}" for _ in range(events * (f + 1) // files - events * f // files)]
        expected.update(words)
        with open(os.path.join(directory, f"part-{f:03d}.jsonl"), "w") as out:
            out.write("".join(f'{{"word": "{w}"}}\n' for w in words))
    return expected


def topic_counts(bootstrap: str, topic: str) -> dict[str, int]:
    """Each key's newest value on the topic (read_committed, from its start), tombstones dropping the key."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip813-bench", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    out: dict[str, int | None] = {}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(CHANGELOG_PARTITIONS)])
        ended: set[int] = set()
        while len(ended) < CHANGELOG_PARTITIONS:
            for m in consumer.consume(10_000, 5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        ended.add(m.partition())
                    continue
                out[m.key().decode()] = None if m.value() is None else int.from_bytes(m.value(), "big", signed=True)
    finally:
        consumer.close()
    return {k: v for k, v in out.items() if v is not None}


def run_count(spark, inputs: str, work: str, bootstrap: str | None) -> tuple[float, dict[str, int], str | None]:
    """(seconds, counts, changelog topic) of one run of the counting function on a fresh store; with
    ``bootstrap``, its changelog on a new compacted topic of that cluster."""
    from statekeep.functions.config.service import FunctionService
    from statekeep.functions.driver import spark as sk_spark
    from statekeep.kafka.admin import create_topic

    name = f"run{len(os.listdir(work))}"
    url = f"local://{work}/{name}/data"
    extra, topic = {}, None
    if bootstrap:
        topic = f"bench-{uuid.uuid4().hex[:10]}"
        create_topic(bootstrap, topic, partitions=CHANGELOG_PARTITIONS, config={"cleanup.policy": "compact"})
        extra = {"changelogTopic": f"kafka://{bootstrap}/{topic}"}
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "count", "inputs": [inputs],
                                 "keyField": "word", "parallelism": 2, **extra,
                                 "userConfig": {"inputOptions": {"maxFilesPerTrigger": "1"}}}, COUNT)
        start = time.perf_counter()
        query = sk_spark.run_registered(service, url, "public", "default", "count",
                                        checkpoint_root=f"{work}/{name}/ckpt", once=True, spark=spark)
        query.await_termination()
        elapsed = time.perf_counter() - start
        if query.status()["error"]:
            raise SystemExit(f"the run failed: {query.status()['error']}")
        counts = {e.key: e.counter for e in service.registry.state_store("public", "default", "count").scan_entries()}
    return elapsed, counts, topic


def bench_counting(work: str, bootstrap: str, events: int, keys: int, files: int, rounds: int) -> dict:
    from statekeep.functions.driver import spark as sk_spark

    expected = write_input(f"{work}/in", events, keys, files, 42)
    warm_events = max(4000, events // 50)
    write_input(f"{work}/warm", warm_events, max(500, keys * warm_events // events), 2, 43)
    runs = os.path.join(work, "runs")
    os.makedirs(runs)
    spark = sk_spark.spark_session("local[2]", "kip813_bench", shuffle_partitions=2)
    best: dict[str, float] = {}
    equal: dict[str, bool] = {}
    for variant, where in (("own", None), ("kafka", bootstrap)):
        run_count(spark, f"{work}/warm", runs, where)
    for _ in range(rounds):
        for variant, where in (("own", None), ("kafka", bootstrap)):
            elapsed, counts, topic = run_count(spark, f"{work}/in", runs, where)
            ok = counts == expected and (topic is None or topic_counts(bootstrap, topic) == counts)
            equal[variant] = equal.get(variant, True) and ok
            best[variant] = min(best.get(variant, elapsed), elapsed)
            print(f"  {variant}: {elapsed:.1f} s{'' if ok else ' (COUNTS DIFFER)'}", file=sys.stderr)
    spark.stop()
    return {"best": best, "equal": equal}


# ---- 2. follower lag through Kafka ---------------------------------------------------------------


def follower_process(url: str, local_dir: str, out: str) -> None:
    """Runs in the follower's process: apply times per transaction number, written to ``out`` on 'quit'."""
    from statekeep.changelog import FollowerStore

    applied: dict[int, float] = {}

    def on_apply(batch) -> None:
        now = time.monotonic()
        for r in batch:
            if r.value is not None:
                applied.setdefault(int.from_bytes(r.value, "big", signed=True), now)

    follower = FollowerStore.open(url, "bench", "ns", "kafka", local_dir=local_dir, on_apply=on_apply)
    follower.wait_until_caught_up(60)
    print("ready", flush=True)
    sys.stdin.readline()
    follower.wait_until_caught_up(60)
    follower.close()
    with open(out, "w") as f:
        json.dump(applied, f)


def bench_kafka_lag(work: str, bootstrap: str, seconds: float, rate: int) -> dict:
    from statekeep.functions.messaging.kafka import KafkaDelivery, raw_table
    from statekeep.kafka.admin import create_topic

    topic = f"lag-{uuid.uuid4().hex[:10]}"
    create_topic(bootstrap, topic, partitions=CHANGELOG_PARTITIONS, config={"cleanup.policy": "compact"})
    delivery = KafkaDelivery(bootstrap, f"kip813-bench-{uuid.uuid4().hex[:8]}")
    delivery.deliver(0, raw_table(topic, [b"warm"], [(0).to_bytes(8, "big")]))
    out = os.path.join(work, "kafka-applied.json")
    url = f"kafka://{bootstrap}/{topic}?value=long"
    proc = subprocess.Popen([sys.executable, __file__, "--follower-process", url, f"{work}/kafka-follower", out],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "ready"
    started: dict[int, float] = {}
    committed: dict[int, float] = {}
    begin = time.monotonic()
    written = batch_no = 0
    while time.monotonic() - begin < seconds:
        due = int((time.monotonic() - begin) * rate) - written  # steady rate, whatever a commit costs
        if due <= 0:
            time.sleep(0.001)
            continue
        batch_no += 1
        value = batch_no.to_bytes(8, "big", signed=True)
        keys = [b"k%d" % ((written + i) % 10_000) for i in range(due)]
        table = raw_table(topic, keys, [value] * len(keys))
        started[batch_no] = time.monotonic()
        delivery.deliver(batch_no, table)
        committed[batch_no] = time.monotonic()
        written += due
        time.sleep(max(0.0, 0.010 - (committed[batch_no] - started[batch_no])))
    elapsed = time.monotonic() - begin
    proc.stdin.write("quit\n")
    proc.stdin.flush()
    assert proc.wait(120) == 0
    with open(out) as f:
        applied = {int(k): v for k, v in json.load(f).items()}
    warm = [b for b in committed if committed[b] - begin > min(2.0, seconds / 5)]  # skip the warm-up
    return {"rate": written / elapsed, "batches": len(warm),
            "lag": [max(0.0, applied[b] - committed[b]) * 1000 for b in warm if b in applied],
            "commit": [(committed[b] - started[b]) * 1000 for b in warm],
            "missing": sum(1 for b in warm if b not in applied)}


# ---- main ----------------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--follower-process":
        follower_process(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k events over 10k keys, 6 s of lag")
    parser.add_argument("--events", type=int, default=None, help="default 1,000,000")
    parser.add_argument("--keys", type=int, default=None, help="default 100,000")
    parser.add_argument("--files", type=int, default=4, help="input files = micro-batches (default 4)")
    parser.add_argument("--rounds", type=int, default=1, help="timed runs of each variant, the best kept")
    parser.add_argument("--seconds", type=float, default=None, help="each lag measurement (default 20, quick 6)")
    parser.add_argument("--rate", type=int, default=5000, help="updates per second of the lag runs (default 5000)")
    parser.add_argument("--bootstrap", default=None, help="a Kafka cluster to use (default: start a broker)")
    parser.add_argument("--no-counting", action="store_true", help="skip the keyed counting")
    parser.add_argument("--no-lag", action="store_true", help="skip the lag measurements")
    args = parser.parse_args()
    events = args.events or (100_000 if args.quick else 1_000_000)
    keys = args.keys or (10_000 if args.quick else 100_000)
    seconds = args.seconds or (6.0 if args.quick else 20.0)
    work = tempfile.mkdtemp(prefix="statekeep-kip813-")
    broker = None
    try:
        bootstrap = args.bootstrap
        if bootstrap is None:
            from statekeep.testing import servers

            broker = servers.start_kafka()
            bootstrap = broker.address
        counting = None if args.no_counting else bench_counting(work, bootstrap, events, keys, args.files,
                                                                args.rounds)
        kafka_lag = own_lag = None
        if not args.no_lag:
            kafka_lag = bench_kafka_lag(work, bootstrap, seconds, args.rate)
            own_lag = own_followers.bench_lag(work, seconds, args.rate)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)

    rows = []
    if counting is not None:
        own, kafka = counting["best"]["own"], counting["best"]["kafka"]
        rows.append((f"keyed counting, {events:,} events / {keys:,} keys, changelog on Kafka",
                     f"{events / kafka:,.0f} events/s ({kafka:.1f} s)", "statekeep's own changelog only",
                     f"{events / own:,.0f} events/s ({own:.1f} s)", f"{own / kafka:.2f}x"))
    if kafka_lag is not None and own_lag is not None:
        for q, label in ((.5, "p50"), (.99, "p99")):
            k, o = pct(kafka_lag["lag"], q), pct(own_lag["lag"], q)
            rows.append((f"follower lag through Kafka at {kafka_lag['rate']:.0f} updates/s, {label}", f"{k:.1f} ms",
                         f"statekeep's own follower lag, {label}", f"{o:.1f} ms", f"{k / max(o, 1e-9):.2f}x"))
        rows.append(("Kafka transaction commit p50 / p99",
                     f"{pct(kafka_lag['commit'], .5):.1f} / {pct(kafka_lag['commit'], .99):.1f} ms",
                     "statekeep's own commit p50 / p99",
                     f"{pct(own_lag['commit'], .5):.1f} / {pct(own_lag['commit'], .99):.1f} ms", ""))
    header = ("measurement", "result", "baseline (same run)", "baseline result", "ratio")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    if counting is not None:
        ratio = counting["best"]["own"] / counting["best"]["kafka"]
        print(f"\ncounts equal (state, and the topic's newest values): {counting['equal']}; target: changelog on "
              f"Kafka >= 0.9x statekeep's own: {ratio:.2f}x ({'met' if ratio >= 0.9 else 'missed'})")
    if kafka_lag is not None and own_lag is not None:
        print(f"lag: {kafka_lag['batches']} Kafka transactions after warm-up ({kafka_lag['missing']} never applied), "
              f"{own_lag['batches']} statekeep batches ({own_lag['missing']} never applied)")


if __name__ == "__main__":
    main()
