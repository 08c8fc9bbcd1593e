"""The function runner on Pulsar topics against the same function on Kafka topics and a plain Python client loop, in
one run: ``benchmarks/pulsar_broker.py --parts count,latency`` (see its docstring); this module holds those parts.

**count.** An input topic of P partitions on each broker (a Pulsar standalone and a Kafka node, both started here,
both single-node) holds the same N messages keyed ``k<i>``, i uniform over K keys (seeded: benchmarks/kafka.py's
``fill`` and the same keys and values produced to Pulsar, keyed, with the client's key-hash routing). The counting
function of benchmarks/kafka.py (``process`` returns ``str(context.incr_counter(context.get_message_key(), 1))``:
one output per message, its key's count after it, under its key) is registered twice, Pulsar topic in and out
(effectively-once: deduplicated producers tied to the state commit) and Kafka topic in and out (exactly-once: Kafka
transactions tied to the state commit), parallelism 2, and each is run by ``run_registered(once=True)`` over all of
its input (one micro-batch each: neither source is given a read limit), after
a warm-up run of its own on 2% of N. Time: the query's start to its end, by which every output is on its broker.
The baseline: one Python process consuming every input message from Pulsar (a subscription from the earliest) and
sending each on, batched (no state, no exactly-once): the physical limit of the Python client here. Every output
topic is read back: the runners' must hold exactly the counts 1..n of each key, the plain loop's every input value
once; a row that does not is marked NO.

**latency.** Fresh topics per path; the function running continuously (processingTime 0). A probe process produces
``{"t": SEND_TIME, "s": SEQ}`` keyed over 100 keys at each rate for S seconds and consumes the output (Pulsar: a
subscription from the earliest; Kafka: benchmarks/kafka.py's probe, ``read_committed``), marking message s of key k
read when an output (k, n >= s) arrives (benchmarks/latency.py's arithmetic).
"""

from __future__ import annotations

import json
import multiprocessing
import random
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import kafka as kbench  # noqa: E402 - benchmarks/kafka.py (it sets PYSPARK_PYTHON, SPARK_LOCAL_IP)
from latency import Consumer, ratio, stop_query, summarize  # noqa: E402

from statekeep.testing.pulsar import create_topic  # noqa: E402


def _quiet() -> Any:
    import logging

    logger = logging.getLogger("benchmark.pulsar")
    logger.setLevel(logging.WARNING)
    return logger


def pulsar_name(broker: Any, topic: str) -> str:
    return f"{broker.service_url}/persistent://public/default/{topic}?admin={broker.web_url}"


def fill_pulsar(broker: Any, topic: str, messages: int, keys: int, seed: int) -> Counter[str]:
    """benchmarks/kafka.py's ``fill`` on Pulsar: the same keys and values, routed by key."""
    import pulsar

    client = pulsar.Client(broker.service_url, logger=_quiet())
    producer = client.create_producer(f"persistent://public/default/{topic}", batching_enabled=True,
                                      batching_max_publish_delay_ms=20, batching_max_messages=5000,
                                      block_if_queue_full=True, max_pending_messages=50_000)
    rng, expected = random.Random(seed), Counter[str]()
    for i in range(messages):
        key = f"k{rng.randrange(keys)}"
        expected[key] += 1
        producer.send_async(f'{{"i":{i}}}'.encode(), None, partition_key=key)
    producer.flush()
    client.close()
    return expected


def read_pulsar(name: str) -> list[tuple[str, int]]:
    """Every output of a Pulsar topic as (key, count)."""
    from statekeep.functions.messaging.pulsartopics import consume

    return [(m.get("key", ""), int(m["value"])) for m in consume(name)]


def register(work: str, source: str, out: str) -> tuple[Any, str, str]:
    from statekeep.functions.config.service import FunctionService

    url, name = f"local://{work}/data", f"count_{Path(work).name}"
    service = FunctionService.open(url)
    service.registry.create({"tenant": "public", "namespace": "default", "name": name, "parallelism": 2,
                             "inputs": [source], "output": out}, kbench.COUNT)
    return service, url, name


def run_function(spark: Any, work: str, source: str, out: str) -> float:
    from statekeep.functions.driver.spark import run_registered

    Path(work).mkdir(parents=True)
    service, url, name = register(work, source, out)
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
    return elapsed


def plain_loop(broker: Any, source: str, out: str, messages: int) -> float:
    """Consume every message of ``source`` and send each on to ``out``, batched: seconds."""
    import pulsar

    client = pulsar.Client(broker.service_url, logger=_quiet())
    started = time.perf_counter()
    producer = client.create_producer(f"persistent://public/default/{out}", batching_enabled=True,
                                      batching_max_publish_delay_ms=5, block_if_queue_full=True)
    consumer = client.subscribe(f"persistent://public/default/{source}", "baseline",
                                initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=5000)
    for _ in range(messages):
        message = consumer.receive(60_000)
        producer.send_async(message.data(), None, partition_key=message.partition_key(),
                            properties=message.properties())
        consumer.acknowledge(message)
    producer.flush()
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed


def count_part(spark: Any, pulsar_broker: Any, kafka_broker: Any, messages: int, keys: int, partitions: int,
               seed: int, work: str) -> None:
    warm = max(4000, messages // 50)
    started = time.perf_counter()
    inputs: dict[str, Counter[str]] = {}
    for topic, n, k, s in (("in", messages, keys, seed), ("warm", warm, max(500, keys * warm // messages), seed + 1)):
        create_topic(pulsar_broker.web_url, topic, partitions)
        inputs[topic] = fill_pulsar(pulsar_broker, topic, n, k, s)
        kafka_broker.create_topic(topic, partitions=partitions)
        assert kbench.fill(kafka_broker.address, topic, n, k, s) == inputs[topic]
    print(f"  inputs filled in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    rows: dict[str, dict[str, Any]] = {}
    for path in ("pulsar", "kafka"):
        row: dict[str, Any] = {}
        try:
            for tag in ("warm", "in"):
                out = f"out-{tag}-{path}"
                if path == "pulsar":
                    create_topic(pulsar_broker.web_url, out, partitions)
                    names = (pulsar_name(pulsar_broker, tag), pulsar_name(pulsar_broker, out))
                else:
                    kafka_broker.create_topic(out, partitions=partitions)
                    names = (f"kafka://{kafka_broker.address}/{tag}", f"kafka://{kafka_broker.address}/{out}")
                row[tag] = run_function(spark, f"{work}/{path}-{tag}", *names)
                print(f"  {path} {tag}: {row[tag]:.1f} s", file=sys.stderr)
            if path == "pulsar":
                got, complete = read_pulsar(names[1]), True
            else:
                got, complete = kbench.read_back(kafka_broker.address, f"out-in-{path}")
            row.update(rate=messages / row["in"], records=len(got),
                       exact=complete and kbench.exact(got, inputs["in"], True))
        except Exception as e:  # noqa: BLE001 - a failing path is a row of the table
            print(f"  {path} failed: {e}", file=sys.stderr)
            row["error"] = str(e).splitlines()[0][:160]
        rows[path] = row
    create_topic(pulsar_broker.web_url, "out-plain", partitions)
    plain = plain_loop(pulsar_broker, "in", "out-plain", messages)
    import pulsar

    client = pulsar.Client(pulsar_broker.service_url, logger=_quiet())
    from statekeep.testing.pulsar import read_all

    copied = sorted(m.data() for m in read_all(client, "persistent://public/default/out-plain", pulsar_broker.web_url))
    client.close()
    rows["plain"] = {"in": plain, "rate": messages / plain, "records": len(copied),
                     "exact": copied == sorted(f'{{"i":{i}}}'.encode() for i in range(messages))}

    print(f"\nkeyed counting, {messages:,} messages over {keys:,} keys, topics of {partitions} partitions, one "
          f"micro-batch, parallelism 2, {spark.sparkContext.master}; time from the query's start to its output on "
          "the broker")
    print(f"{'path':<58}{'time s':>8}{'events/s':>10}{'warm-up s':>10}{'out records':>12}  exact")
    labels = {"pulsar": "runner: Pulsar -> function -> Pulsar (effectively-once)",
              "kafka": "runner: Kafka -> function -> Kafka (exactly-once)",
              "plain": "plain pulsar-client consume -> produce (no state)"}
    for path, row in rows.items():
        if "error" in row:
            print(f"{labels[path]:<58}  failed: {row['error']}")
            continue
        print(f"{labels[path]:<58}{row['in']:>8.1f}{row['rate']:>10,.0f}{row.get('warm', 0):>10.1f}"
              f"{row['records']:>12,}  {'yes' if row['exact'] else 'NO'}")
    good = {p: r["rate"] for p, r in rows.items() if r.get("exact")}
    if "pulsar" in good and "kafka" in good:
        got = good["pulsar"] / good["kafka"]
        print(f"target: Pulsar runner vs Kafka runner >= 0.8x: {got:.2f}x ({'met' if got >= 0.8 else 'missed'})")
    if "pulsar" in good and "plain" in good:
        print(f"Pulsar runner vs the plain client loop: {good['pulsar'] / good['plain']:.2f}x")


# ---- latency ----------------------------------------------------------------------------------------------

def pulsar_probe(results: Any, service_url: str, source: str, out: str, rates: list[float], seconds: float,
                 keys: int, warm_seconds: float, started: float, seed: int) -> None:
    """benchmarks/kafka.py's ``probe`` on Pulsar topics (full names ``persistent://...``)."""
    import pulsar

    client = pulsar.Client(service_url, logger=_quiet())
    producer = client.create_producer(source, batching_enabled=True, batching_max_publish_delay_ms=5)
    consumer = client.subscribe(out, f"probe-{time.time_ns()}", initial_position=pulsar.InitialPosition.Earliest)
    rng = random.Random(seed)
    produced: dict[tuple[str, int], float] = {}
    seq: dict[str, int] = defaultdict(int)
    reader = Consumer(produced)
    lock, stop = threading.Lock(), threading.Event()
    first_read: list[float] = []

    def send(count: int) -> list[tuple[str, int]]:
        sent = []
        for _ in range(count):
            k = f"k{rng.randrange(keys)}"
            with lock:
                seq[k] += 1
                s = seq[k]
                produced[(k, s)] = t = time.time()
            producer.send_async(json.dumps({"t": t, "s": s}).encode(), None, partition_key=k)
            sent.append((k, s))
        return sent

    def consume() -> None:
        while not stop.is_set():
            try:
                m = consumer.receive(50)
            except pulsar.Timeout:
                continue
            now = time.time()
            with lock:
                reader.rows([(m.partition_key(), int(m.data()))], now)
            consumer.acknowledge(m)
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
        producer.flush()
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
            results.put({"error": "no output within 180 s"})
            return
        for _ in range(10):
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
        client.close()


def latency_part(spark: Any, pulsar_broker: Any, kafka_broker: Any, rates: list[float], seconds: float,
                 partitions: int, warm_seconds: float, seed: int, work: str) -> None:
    from statekeep.functions.driver.spark import run_registered

    context = multiprocessing.get_context("spawn")
    results: dict[str, dict[str, Any]] = {}
    for path in ("pulsar", "kafka"):
        source, out = f"lat-in-{path}", f"lat-out-{path}"
        if path == "pulsar":
            for topic in (source, out):
                create_topic(pulsar_broker.web_url, topic, partitions)
            names = (pulsar_name(pulsar_broker, source), pulsar_name(pulsar_broker, out))
            target: Any = pulsar_probe
            probe_args: tuple[Any, ...] = (pulsar_broker.service_url, f"persistent://public/default/{source}",
                                           f"persistent://public/default/{out}", rates, seconds, 100, warm_seconds)
        else:
            for topic in (source, out):
                kafka_broker.create_topic(topic, partitions=partitions)
            names = (f"kafka://{kafka_broker.address}/{source}", f"kafka://{kafka_broker.address}/{out}")
            target = kbench.probe
            probe_args = (kafka_broker.address, source, out, rates, seconds, 100, 5.0, warm_seconds)
        Path(f"{work}/lat-{path}").mkdir(parents=True)
        started = time.time()
        service, url, name = register(f"{work}/lat-{path}", *names)
        query: Any = run_registered(service, url, "public", "default", name, checkpoint_root=f"{work}/lat-{path}/ck",
                                    spark=spark)
        query.service = service
        queue = context.Queue()
        worker = context.Process(target=target, args=(queue, *probe_args, started, seed))
        worker.start()
        try:
            report = queue.get(timeout=300 + warm_seconds + 60 + len(rates) * (2 * seconds + 40))
        finally:
            worker.join(timeout=30)
            stop_query(query)
        if "error" in report:
            print(f"  latency {path}: {report['error']}", file=sys.stderr)
            continue
        results[path] = report
    print(f"\nlatency, produce -> consume of the runner's output, ms; {spark.sparkContext.master}, 100 keys, topics of "
          f"{partitions} partitions, {seconds:g} s per rate, trigger processingTime 0 (Kafka: read_committed)")
    print(f"{'path':<12}{'msgs/s':>8}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'read':>14}")
    for path, report in results.items():
        for rate, row in report["rates"].items():
            print(f"{path:<12}{rate:>8g}" + "".join(f"{row[k] * 1000:>8.0f}" for k in ("p50", "p90", "p99", "max"))
                  + f"{row['read']:>7}/{row['produced']:<6}")
    if "pulsar" in results and "kafka" in results:
        for rate in rates:
            mine, theirs = results["pulsar"]["rates"][rate], results["kafka"]["rates"][rate]
            print(f"at {rate:g}/s: Pulsar / Kafka p50 {ratio(mine['p50'], theirs['p50'])}, "
                  f"p99 {ratio(mine['p99'], theirs['p99'])}")
