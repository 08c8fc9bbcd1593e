"""Keyed counting and latency through Kafka: statekeep's runner and operator against Spark's own queries, in one run.

    SPARK_LOCAL_IP=127.0.0.1 python benchmarks/kafka.py \\
        [--messages N] [--keys K] [--twsip-messages M] [--partitions P] [--batches B] [--variants a,b,...] \\
        [--rates 10,100,1000] [--seconds S] [--latency-keys K] [--linger-ms L] [--parts throughput,latency]

It starts its own Kafka broker (``statekeep.testing.servers``: one KRaft node on loopback, from the jars ``statekeep
jars install`` resolved, with the tests' C1-only JVM flag dropped: C2 kept, as for Spark) and one SparkSession
(``spark_session``: local[2], 2 shuffle partitions, Spark's Kafka connector; RocksDB state store provider).

**Keyed counting.** An input topic of ``--partitions`` partitions is filled first: N messages keyed ``k<i>``, i
uniform over K keys (seeded), each value a short JSON text. Every query reads all of it (availableNow,
``maxOffsetsPerTrigger`` about N / ``--batches``: the same micro-batches for each variant; Spark's Kafka source with
``read_committed``, from the earliest offsets) and writes to a fresh output topic of as many partitions:

- runner: a registered function with the Kafka input and output, ``process`` returning
  ``str(context.incr_counter(context.get_message_key(), 1))`` (one record per message, its key's count after it,
  under the message's key), run by ``run_registered(once=True)`` at parallelism 2: exactly once, through Kafka
  transactions tied to the state commit;
- operator: the same function file on Spark's Kafka source (``statekeep.spark.apply_function``, key ``key``,
  parallelism 2) into ``format("statekeep-kafka")`` (exactly once too);
- jvm_count: Spark's Kafka source -> ``groupBy(key).count()`` -> Spark's Kafka sink, update mode (no Python);
- transformWithStateInPandas: a StatefulProcessor keeping a ValueState count per key -> Spark's Kafka sink, update
  mode, on the first ``--twsip-messages`` messages of the same input (a topic of their own): it runs at about 2k
  events/s, so its ratio is one of rates.

Each variant first runs on a warm-up topic of its own size (``--warm-messages``, by default 2% of N: Python workers
started, the JVM's code warm), then on the input. Its time is from the query's start to its termination, by which
each task has committed its output (statekeep's transaction; Spark's sink flushes its producer) and the output is
fully committed. The output is then read back by a ``read_committed`` consumer up to the high watermarks taken at
that moment: a per-record variant must hold exactly the counts 1..n of each key (n: the key's messages in the input,
so as many records as input messages), an aggregating one each key's count n as its last update. A variant that
does not is marked NO in the table ("exact"): a broken variant cannot look fast.

**Latency.** A fresh input and output topic per variant, its query running continuously (processingTime 0). A probe
process (the user's producer and consumer, outside the driver) produces messages ``{"t": SEND_TIME, "s": SEQ}``
keyed over ``--latency-keys`` keys at each rate of ``--rates`` for ``--seconds`` (confluent-kafka, ``linger.ms``
``--linger-ms``, acks=all), and a ``read_committed`` consumer of the output (``fetch.wait.max.ms`` 10) marks
message s of key k read when a record (k, n >= s) arrives: its latency is that moment minus its send time
(benchmarks/latency.py's arithmetic). Variants: runner (the function above, ``run_registered`` running) and
jvm_count (Kafka source -> groupBy count -> Kafka sink, update mode). Before the rates, outputs flow (a message
every 200 ms until one is read) and ``--warm-seconds`` at 100 msgs/s pass, not counted.

Targets (issue 49): runner >= 1.0x jvm_count's rate and >= 20x transformWithStateInPandas's; operator >= 0.95x the
runner; runner p99 / jvm_count p99 <= 1.0x at each rate.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from statekeep.functions.driver.sparkpython import spark_python  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", spark_python())  # see statekeep.functions.driver.sparkpython
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from latency import Consumer, ratio, stop_query, summarize  # noqa: E402
from spark_state import ROCKSDB, batch_seconds  # noqa: E402

from statekeep.kafka import client_config, confluent  # noqa: E402

COUNT = b'''def process(value, context):
    return str(context.incr_counter(context.get_message_key(), 1))
'''
THROUGHPUT = ("runner", "operator", "jvm_count", "transformWithStateInPandas")
PER_RECORD = ("runner", "operator")  # one output record per input message; the others one per key and batch
LATENCY = ("runner", "jvm_count")
TWSIP = "transformWithStateInPandas"


# ---- the broker and its topics ---------------------------------------------------------------------------

def start_broker() -> Any:
    """One Kafka node (:func:`statekeep.testing.servers.kafka`) in a new temp dir, on a free port, compiling with
    C2 (the tests' ``-XX:TieredStopAtLevel=1`` dropped), ready."""
    from statekeep.testing import servers

    server = servers.kafka(Path(tempfile.mkdtemp(prefix="statekeep-kafka-bench-")), servers.free_port())
    server.command = [a for a in server.command if not a.startswith("-XX:TieredStopAtLevel")]
    server.start(timeout=120)
    return server


def kafka_version() -> str:
    from statekeep import jars

    found = re.search(r"kafka_2\.\d+-([0-9.]+)\.jar", jars.classpath("kafka"))
    return found.group(1) if found else "?"


def fill(bootstrap: str, topic: str, messages: int, keys: int, seed: int) -> Counter[str]:
    """Write ``messages`` keyed messages to ``topic`` (no transaction); their count per key. The first m of a seed
    are the same whatever ``messages`` is (a shorter input is a prefix of a longer one)."""
    kafka = confluent()
    producer = kafka.Producer(client_config(bootstrap, **{
        "linger.ms": 20, "batch.size": 1 << 20, "acks": "all", "queue.buffering.max.messages": 500_000,
        "partitioner": "murmur2_random"}))
    rng, expected = random.Random(seed), Counter[str]()
    for i in range(messages):
        key = f"k{rng.randrange(keys)}"
        expected[key] += 1
        while True:
            try:
                producer.produce(topic, f'{{"i":{i}}}'.encode(), key.encode())
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
    if producer.flush(300):
        raise RuntimeError(f"filling {topic}: messages left unsent after 300 s")
    consumer = kafka.Consumer(client_config(bootstrap, **{"group.id": f"kbench-{uuid.uuid4().hex}"}))
    try:
        partitions = consumer.list_topics(topic, timeout=15).topics[topic].partitions
        written = sum(high - low for low, high in (consumer.get_watermark_offsets(kafka.TopicPartition(topic, p),
                                                                                 timeout=15) for p in partitions))
    finally:
        consumer.close()
    if written != messages:  # a plain producer's offsets are contiguous: each message one offset
        raise RuntimeError(f"filling {topic}: {written} messages written of {messages}")
    return expected


def read_back(bootstrap: str, topic: str, timeout: float = 180.0) -> tuple[list[tuple[str, int]], bool]:
    """The committed records of ``topic`` up to its high watermarks as they are when called, as (key, int value),
    read by a ``read_committed`` consumer; and whether every partition was read to that watermark within
    ``timeout`` (not: a transaction still open holds a partition back)."""
    kafka = confluent()
    consumer = kafka.Consumer(client_config(bootstrap, **{
        "group.id": f"kbench-{uuid.uuid4().hex}", "enable.auto.commit": False, "isolation.level": "read_committed",
        "enable.partition.eof": True}))
    rows: list[tuple[str, int]] = []
    try:
        partitions = consumer.list_topics(topic, timeout=15).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(kafka.TopicPartition(topic, p), timeout=15)[1] for p in partitions}
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([kafka.TopicPartition(topic, p, kafka.OFFSET_BEGINNING) for p in sorted(todo)])
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                p, error = m.partition(), m.error()
                if error is not None:
                    if error.code() != kafka.KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}[{p}]: {error}")
                    if m.offset() >= ends[p]:  # read_committed's end: past every committed record (and marker)
                        todo.discard(p)
                    continue
                if m.offset() < ends[p]:
                    rows.append(((m.key() or b"").decode(), int(m.value())))
                if m.offset() >= ends[p] - 1:
                    todo.discard(p)
        return rows, not todo
    finally:
        consumer.close()


def exact(rows: list[tuple[str, int]], expected: Counter[str], per_record: bool) -> bool:
    """Whether output ``rows`` (key, count) are the counts of ``expected``: per record, the counts 1..n of each key
    once each; else each key's largest count (its last update) n."""
    if per_record:
        seen: dict[str, list[int]] = defaultdict(list)
        for key, n in rows:
            seen[key].append(n)
        return seen.keys() == expected.keys() and all(sorted(v) == list(range(1, expected[k] + 1))
                                                      for k, v in seen.items())
    last: dict[str, int] = {}
    for key, n in rows:
        if n > last.get(key, 0):
            last[key] = n
    return last == dict(expected)


# ---- the queries -----------------------------------------------------------------------------------------

def batch_limit(messages: int, batches: int, partitions: int) -> int:
    """The ``maxOffsetsPerTrigger`` that reads ``messages`` in ``batches`` micro-batches: Spark's Kafka source gives
    each partition the floor of its share of the limit, up to one message less per partition and batch, so the
    limit has one per partition more than ``messages / batches`` (else a last micro-batch of a few messages)."""
    return math.ceil(messages / batches) + partitions


def kafka_stream(spark: Any, bootstrap: str, topic: str, per_batch: int | None) -> Any:
    """Spark's Kafka source on ``topic`` as the runner reads an input: from the earliest offsets, read_committed."""
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("kafka.isolation.level", "read_committed"))
    if per_batch:
        reader = reader.option("maxOffsetsPerTrigger", str(per_batch))
    return reader.load()


def jvm_count(frame: Any) -> Any:
    from pyspark.sql import functions as F

    return (frame.select(F.col("key").cast("string").alias("key")).groupBy("key").count()
            .select("key", F.col("count").cast("string").alias("value")))


def twsip_count(frame: Any) -> Any:
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class CountProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", "count long")

        def handleInputRows(self, key: Any, rows: Any, timerValues: Any) -> Any:
            total = (self.count.get()[0] if self.count.exists() else 0) + sum(len(pdf) for pdf in rows)
            self.count.update((total,))
            yield pd.DataFrame({"key": [key[0]], "value": [str(total)]})

    return frame.select(F.col("key").cast("string").alias("key")).groupBy("key").transformWithStateInPandas(
        CountProcessor(), "key string, value string", "Update", "None")


SPARK_QUERIES: dict[str, Callable[[Any], Any]] = {"jvm_count": jvm_count, TWSIP: twsip_count}


def create_function(work: str, bootstrap: str, source: str, out: str, per_batch: int | None) -> tuple[Any, str, str]:
    """The counting function registered in a fresh ``local://`` store under ``work``: (its service, url, name)."""
    from statekeep.functions.config.service import FunctionService

    url, name = f"local://{work}/data", f"count_{os.path.basename(work)}"
    service = FunctionService.open(url)
    options = {"userConfig": {"inputOptions": {"maxOffsetsPerTrigger": str(per_batch)}}} if per_batch else {}
    service.registry.create({"tenant": "public", "namespace": "default", "name": name, "parallelism": 2,
                             "inputs": [f"kafka://{bootstrap}/{source}"], "output": f"kafka://{bootstrap}/{out}",
                             **options}, COUNT)
    return service, url, name


def run_once(spark: Any, variant: str, bootstrap: str, source: str, out: str, work: str, per_batch: int
             ) -> tuple[float, Any]:
    """Run ``variant`` on all of ``source`` into ``out``: (seconds from start to termination, its StreamingQuery)."""
    from statekeep.functions.driver.spark import run_registered

    os.makedirs(work)
    if variant == "runner":
        service, url, name = create_function(work, bootstrap, source, out, per_batch)
        try:
            start = time.perf_counter()
            function = run_registered(service, url, "public", "default", name, checkpoint_root=f"{work}/ckpt",
                                      once=True, spark=spark)
            function.await_termination()
            elapsed = time.perf_counter() - start
            error = function.status()["error"]
        finally:
            service.close()
        if error:
            raise RuntimeError(error)
        return elapsed, function.query
    start = time.perf_counter()
    frame = kafka_stream(spark, bootstrap, source, per_batch)
    if variant == "operator":
        from statekeep.spark import apply_function

        py = os.path.join(work, "count.py")
        with open(py, "wb") as f:
            f.write(COUNT)
        rows = apply_function(frame, py, name=f"public/default/count_{os.path.basename(work)}", key="key",
                              store=f"local://{work}/data", parallelism=2)
        writer = rows.writeStream.format("statekeep-kafka")
    else:
        writer = SPARK_QUERIES[variant](frame).writeStream.format("kafka").outputMode("update")
    query = (writer.option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("checkpointLocation", f"{work}/ckpt").trigger(availableNow=True).start())
    query.awaitTermination()
    return time.perf_counter() - start, query


def start_continuous(spark: Any, variant: str, bootstrap: str, source: str, out: str, work: str) -> Any:
    """``variant`` running on ``source`` into ``out`` with the default trigger (processingTime 0); stopped by
    benchmarks/latency.py's ``stop_query``."""
    from statekeep.functions.driver.spark import run_registered

    os.makedirs(work)
    if variant == "runner":
        service, url, name = create_function(work, bootstrap, source, out, None)
        function: Any = run_registered(service, url, "public", "default", name, checkpoint_root=f"{work}/ckpt",
                                       spark=spark)
        function.service = service  # closed with the query (stop_query)
        return function
    return (SPARK_QUERIES[variant](kafka_stream(spark, bootstrap, source, None)).writeStream.format("kafka")
            .outputMode("update").option("kafka.bootstrap.servers", bootstrap).option("topic", out)
            .option("checkpointLocation", f"{work}/ckpt").trigger(processingTime="0 seconds").start())


# ---- the latency probe: producer and consumer, in a process of their own ---------------------------------

def probe(results: Any, bootstrap: str, source: str, out: str, rates: list[float], seconds: float, keys: int,
          linger_ms: float, warm_seconds: float, started: float, seed: int) -> None:
    """Warm the query up, then produce to ``source`` at each rate for ``seconds``, reading ``out`` read_committed
    until every message is read; puts ``{"first_output": s, "rates": {rate: summary}}`` (or ``{"error": ...}``)
    on ``results``."""
    kafka = confluent()
    producer = kafka.Producer(client_config(bootstrap, **{"linger.ms": linger_ms, "acks": "all",
                                                          "partitioner": "murmur2_random"}))
    consumer = kafka.Consumer(client_config(bootstrap, **{
        "group.id": f"kbench-{uuid.uuid4().hex}", "enable.auto.commit": False, "isolation.level": "read_committed",
        "fetch.wait.max.ms": 10}))
    partitions = consumer.list_topics(out, timeout=15).topics[out].partitions
    consumer.assign([kafka.TopicPartition(out, p, kafka.OFFSET_BEGINNING) for p in partitions])
    rng = random.Random(seed)
    produced: dict[tuple[str, int], float] = {}
    seq: dict[str, int] = defaultdict(int)
    reader = Consumer(produced)
    lock, stop = threading.Lock(), threading.Event()
    first_read: list[float] = []
    failure: list[str] = []

    def send(count: int) -> list[tuple[str, int]]:
        sent = []
        for _ in range(count):
            k = f"k{rng.randrange(keys)}"
            with lock:
                seq[k] += 1
                s = seq[k]
                produced[(k, s)] = t = time.time()
            producer.produce(source, json.dumps({"t": t, "s": s}).encode(), k.encode())
            sent.append((k, s))
        producer.poll(0)
        return sent

    def consume() -> None:
        while not stop.is_set():
            messages = consumer.consume(1000, 0.05)
            now = time.time()
            rows = []
            for m in messages:
                if m.error() is not None:
                    failure.append(str(m.error()))
                    continue
                rows.append(((m.key() or b"").decode(), int(m.value())))
            if rows:
                with lock:
                    reader.rows(rows, now)
                if not first_read:
                    first_read.append(now)

    def wait_read(messages: list[tuple[str, int]], timeout: float) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            with lock:
                if all(m in reader.read for m in messages):
                    return True
            time.sleep(0.01)
        return False

    def produce_at(rate: float, duration: float) -> tuple[list[tuple[str, int]], float]:
        messages: list[tuple[str, int]] = []
        total, start = int(rate * duration), time.time()
        while len(messages) < total:
            due = min(total, int((time.time() - start) * rate) + 1)
            messages += send(due - len(messages))
            time.sleep(max(0.001, start + len(messages) / rate - time.time()))
        producer.flush(30)
        return messages, start

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    try:
        warm: list[tuple[str, int]] = []
        deadline = time.time() + 180
        while not first_read and time.time() < deadline:
            warm += send(1)
            time.sleep(0.2)
        if not first_read:
            results.put({"error": f"no output within 180 s{': ' + failure[0] if failure else ''}"})
            return
        for _ in range(10):  # outputs flow: a few more, so every partition's worker has run
            warm += send(1)
            time.sleep(0.2)
        wait_read(warm, 60)
        if warm_seconds:
            wait_read(produce_at(100.0, warm_seconds)[0], 60)
        report: dict[str, Any] = {"first_output": first_read[0] - started, "rates": {}}
        for rate in rates:
            messages, start = produce_at(rate, seconds)
            wait_read(messages, max(30.0, seconds))
            with lock:
                latencies = [reader.read[m] for m in messages if m in reader.read]
                last = max((produced[m] + reader.read[m] for m in messages if m in reader.read), default=start)
            report["rates"][rate] = summarize(latencies, len(messages), produced[messages[0]], last)
        results.put(report)
    finally:
        stop.set()
        thread.join()
        consumer.close()


# ---- the run ---------------------------------------------------------------------------------------------

def throughput(spark: Any, broker: Any, args: argparse.Namespace, work: str) -> None:
    variants = [v for v in args.variants.split(",") if v]
    bootstrap, partitions = broker.address, args.partitions
    per_batch = batch_limit(args.messages, args.batches, partitions)
    warm_messages = args.warm_messages if args.warm_messages is not None else max(4000, args.messages // 50)
    inputs: dict[str, tuple[str, int, Counter[str], int]] = {}  # name -> (topic, messages, counts, per batch)
    started = time.perf_counter()
    for topic, n, keys, seed in (("in", args.messages, args.keys, args.seed),
                                 ("in-twsip", args.twsip_messages if TWSIP in variants else 0, args.keys, args.seed),
                                 ("warm", warm_messages, max(500, args.keys * warm_messages // args.messages),
                                  args.seed + 1)):
        if n:
            broker.create_topic(topic, partitions=partitions)
            inputs[topic] = (topic, n, fill(bootstrap, topic, n, keys, seed), batch_limit(n, args.batches, partitions))
    print(f"  input topics filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    results: dict[str, dict[str, Any]] = {}
    for i, variant in enumerate(variants):
        row: dict[str, Any] = {}
        source, messages, expected, batch = inputs["in-twsip" if variant == TWSIP else "in"]
        try:
            for tag, (topic, n, _, size) in (("warm", inputs["warm"]), ("run", (source, messages, expected, batch))):
                out = f"out-{tag}-{variant}-{i}"
                broker.create_topic(out, partitions=partitions)
                elapsed, query = run_once(spark, variant, bootstrap, topic, out, f"{work}/{tag}_{variant}_{i}",
                                          size if tag == "run" else batch_limit(n, 2, partitions))
                row[tag] = elapsed
                print(f"  {tag} {variant}: {elapsed:.1f} s", file=sys.stderr)
            rows, complete = read_back(bootstrap, out)
            row.update(messages=messages, rate=messages / row["run"], batches=batch_seconds(query), records=len(rows),
                       exact=complete and exact(rows, expected, variant in PER_RECORD))
        except Exception as e:  # noqa: BLE001 - one variant failing is a row of the table, not the run's end
            print(f"  {variant} failed: {e}", file=sys.stderr)
            row["error"] = str(e).splitlines()[0][:120]
        results[variant] = row

    print(f"\nkeyed counting through Kafka: {args.messages:,} messages over {args.keys:,} keys, a topic of "
          f"{partitions} partitions, {args.batches} micro-batches (maxOffsetsPerTrigger {per_batch:,}); Spark "
          f"{spark.version}, {spark.sparkContext.master}, 2 shuffle partitions, RocksDB state store; Kafka "
          f"{kafka_version()}, one node; time from the query's start to its output committed")
    rates = {v: r["rate"] for v, r in results.items() if "rate" in r and r["exact"]}
    print(f"{'variant':<28}{'messages':>10}{'time s':>8}{'events/s':>10}{'vs JVM':>8}{'vs tWSIP':>10}"
          f"{'warm-up s':>10}{'out records':>12}  exact  micro-batches s")
    for variant, row in results.items():
        if "error" in row:
            print(f"{variant:<28}  failed: {row['error']}")
            continue
        vs = "".join(f"{row['rate'] / rates[b]:>{w - 1}.2f}x" if b in rates and variant in rates
                     else f"{'-':>{w}}"
                     for b, w in (("jvm_count", 8), (TWSIP, 10)))
        print(f"{variant:<28}{row['messages']:>10,}{row['run']:>8.1f}{row['rate']:>10,.0f}{vs}{row['warm']:>10.1f}"
              f"{row['records']:>12,}  {'yes' if row['exact'] else 'NO':<5}  "
              + " / ".join(f"{t:.1f}" for _, t in row["batches"]))
    if TWSIP in results and "rate" in results[TWSIP]:
        print(f"({TWSIP} ran on the first {args.twsip_messages:,} messages of the same input, in micro-batches of at "
              f"most {inputs['in-twsip'][3]:,}: its ratios are of events/s)")
    if any(not r.get("exact", True) for r in results.values()):
        print("a variant marked NO did not leave exactly its counts in its output: no ratio is taken of it")

    def target(label: str, mine: str, theirs: str, goal: float) -> None:
        if mine in rates and theirs in rates:
            got = rates[mine] / rates[theirs]
            print(f"target: {label} >= {goal:g}x: {got:.2f}x ({'met' if got >= goal else 'missed'})")

    target("runner vs jvm_count", "runner", "jvm_count", 1.0)
    target(f"runner vs {TWSIP}", "runner", TWSIP, 20.0)
    target("operator vs runner", "operator", "runner", 0.95)


def latency(spark: Any, broker: Any, args: argparse.Namespace, work: str) -> None:
    rates = [float(r) for r in args.rates.split(",") if r]
    variants = [v for v in args.latency_variants.split(",") if v]
    context = multiprocessing.get_context("spawn")
    results: dict[str, dict[str, Any]] = {}
    for variant in variants:
        source, out = f"lat-in-{variant}", f"lat-out-{variant}"
        for topic in (source, out):
            broker.create_topic(topic, partitions=args.partitions)
        started = time.time()
        query = start_continuous(spark, variant, broker.address, source, out, f"{work}/latency_{variant}")
        queue = context.Queue()
        worker = context.Process(target=probe, args=(queue, broker.address, source, out, rates, args.seconds,
                                                     args.latency_keys, args.linger_ms, args.warm_seconds, started,
                                                     args.seed))
        worker.start()
        try:
            report = queue.get(timeout=300 + args.warm_seconds + 60 + len(rates) * (2 * args.seconds + 40))
        finally:
            worker.join(timeout=30)
            stop_query(query)
        if "error" in report:
            print(f"  latency {variant}: {report['error']}", file=sys.stderr)
            continue
        results[variant] = report
        print(f"  latency {variant}: first output {report['first_output']:.1f} s after start; "
              + "; ".join(f"{r:g}/s p99 {row['p99'] * 1000:.0f} ms" for r, row in report["rates"].items()),
              file=sys.stderr)

    print(f"\nlatency through Kafka, produce -> read_committed consume, ms; {spark.sparkContext.master}, "
          f"{args.latency_keys} keys, topics of {args.partitions} partitions, {args.seconds:g} s per rate, producer "
          f"linger.ms {args.linger_ms:g}, trigger processingTime 0")
    print(f"{'variant':<28}{'msgs/s':>8}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'sustained/s':>13}{'read':>14}")
    for variant, report in results.items():
        for rate, row in report["rates"].items():
            print(f"{variant:<28}{rate:>8g}" + "".join(f"{row[k] * 1000:>8.0f}" for k in ("p50", "p90", "p99", "max"))
                  + f"{row['rate']:>13.1f}{row['read']:>7}/{row['produced']:<6}")
    print("first output after query start, s: " + ", ".join(f"{v} {r['first_output']:.1f}" for v, r in results.items()))
    if "runner" in results and "jvm_count" in results:
        for rate in rates:
            mine, theirs = results["runner"]["rates"][rate], results["jvm_count"]["rates"][rate]
            complete = mine["read"] == mine["produced"] and theirs["read"] == theirs["produced"]
            got = mine["p99"] / theirs["p99"] if theirs["p99"] else float("nan")
            print(f"target at {rate:g}/s: runner p99 / jvm_count p99 <= 1.0x: {ratio(mine['p99'], theirs['p99'])} "
                  f"({('met' if got <= 1.0 else 'missed') if complete else 'not every message was read'}); "
                  f"p50 {ratio(mine['p50'], theirs['p50'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="throughput,latency", help="comma-separated: throughput, latency")
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--twsip-messages", type=int, default=100_000,
                        help="transformWithStateInPandas's messages: the first of the same input")
    parser.add_argument("--warm-messages", type=int, default=None,
                        help="messages of each variant's warm-up run (default: 2%% of --messages, at least 4000)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of every topic")
    parser.add_argument("--batches", type=int, default=4, help="micro-batches of each run (maxOffsetsPerTrigger)")
    parser.add_argument("--variants", default=",".join(THROUGHPUT), help="keyed counting's, of: %(default)s")
    parser.add_argument("--rates", default="10,100,1000", help="latency: messages per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="latency: production time per rate")
    parser.add_argument("--latency-variants", default=",".join(LATENCY), help="of: %(default)s")
    parser.add_argument("--latency-keys", type=int, default=100)
    parser.add_argument("--linger-ms", type=float, default=5.0, help="latency: the producer's linger.ms")
    parser.add_argument("--warm-seconds", type=float, default=10.0,
                        help="latency: each query's warm-up at 100 msgs/s before the rates")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    for given, known, what in ((parts, {"throughput", "latency"}, "--parts"),
                               (set(args.variants.split(",")), set(THROUGHPUT), "--variants"),
                               (set(args.latency_variants.split(",")), set(LATENCY), "--latency-variants")):
        if given - known:
            parser.error(f"{what}: unknown {sorted(given - known)}; choose from {', '.join(sorted(known))}")
    if "TieredStopAtLevel" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        print("warning: PYSPARK_SUBMIT_ARGS limits Spark's JVM to C1; benchmarks keep C2", file=sys.stderr)
    from statekeep.functions.driver.spark import spark_session

    work = tempfile.mkdtemp(prefix="statekeep-kafka-bench-")
    broker = start_broker()
    try:
        spark = spark_session("local[2]", "kafka_bench", shuffle_partitions=2)
        # fixed when a stateful query first runs: set for every variant (only two keep their state in Spark)
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        try:
            if "throughput" in parts:
                throughput(spark, broker, args, work)
            if "latency" in parts:
                latency(spark, broker, args, work)
        finally:
            spark.stop()
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
