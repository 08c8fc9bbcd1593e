"""Pulsar through statekeep, in one run: a Java function's state calls on a real Pulsar functions worker with statekeep
as its PIP-312 state provider against the standalone's own provider ("state"), and a topic copied by a Spark query
through the ``statekeep-pulsar`` source and effectively-once sink against a plain Python client loop ("copy").

    python benchmarks/pulsar_broker.py [--parts state,copy,count,latency] [--ops N] [--rounds R] [--messages M]
        [--partitions P] [--keys K] [--rates 10,100,1000] [--seconds S]

"count" and "latency" (benchmarks/pulsar_functions.py, whose docstring says how): the function runner with Pulsar
topics in and out (effectively-once) against the same function through Kafka and a plain pulsar-client
consume -> produce loop, keyed counting of M messages over K keys; and produce -> consume latency at each rate,
beside Kafka's path. They start a Pulsar standalone and a Kafka node of their own, and one SparkSession.

It starts a ``statekeep standalone`` (its embedded default store, in a temp dir, no Spark worker) and, one after the
other, two Pulsar standalones (``statekeep.testing.servers.pulsar``, the jars ``scripts/pulsar-setup`` installs):

- statekeep: the functions worker's ``stateStorageProviderImplementation`` is statekeep's
  (java/pulsar-state-provider): each state call is one REST request to the statekeep server;
- built-in: the standalone's own ``PulsarMetadataStateStoreProviderImpl`` on a RocksDB metadata store in the
  broker's JVM (what a 4.x standalone uses; a cluster's default is BookKeeper's table service).

On each, a Java function (benchmarks/pulsar_function, compiled with ``javac``) gets R + 1 inputs "N": each makes N
``context.incrCounter`` calls, puts one 16-byte value, then makes N ``context.getState`` calls of it, timing each
call with ``System.nanoTime`` inside the worker, and answers each kind's p50 and p99 in microseconds with the
counter's value. The first input warms up (class loading, connections, JIT) and is not reported; the table shows
the median over the R rounds of each figure, and the ratio statekeep / built-in. The counter read back must equal
(R + 1) * N on both: a provider that loses increments is marked NO.

Each broker's ready time (start to its functions worker answering) is printed too.

**Copy.** On a standalone of its own, an input topic of P partitions holds M messages (keys over 1,000 values, a
property each). statekeep: ``spark.readStream.format("statekeep-pulsar")`` from the earliest, straight into
``writeStream.format("statekeep-pulsar")`` (``Trigger.AvailableNow``, ``spark_session("local[2]")``), timed from the
query's start to its end; the baseline, the physical limit here: one Python process consuming every message
(a subscription from the earliest) and sending each on with a batching producer (no state, no exactly-once). Each
output topic is read back: it must hold every input value exactly once (a copy that does not is marked NO).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from statekeep.testing import servers
from statekeep.testing.pulsar import create_topic, deploy, function_jar

FUNCTION = Path(__file__).resolve().parent / "pulsar_function"


def statekeep_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = servers.free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(directory / "statekeep.log", "wb")  # noqa: SIM115 - the server's, closed with it
    process = subprocess.Popen([sys.executable, "-m", "statekeep.cli", "standalone", "--data-dir",
                                str(directory / "statekeep"), "--port", str(port), "--no-worker"],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"statekeep did not start; see {directory / 'statekeep.log'}")


def measure(directory: Path, jar: Path, state_url: str | None, ops: int, rounds: int) -> tuple[list[float], bool]:
    """[incr p50, incr p99, get p50, get p99] medians over ``rounds``, and whether the counter was exact."""
    import pulsar

    started = time.monotonic()
    broker = servers.pulsar(directory, servers.free_port(), state_url)
    try:
        broker.start()
        print(f"  {'statekeep' if state_url else 'built-in'}: broker ready in {time.monotonic() - started:.1f} s",
              flush=True)
        create_topic(broker.web_url, "bench-in")
        create_topic(broker.web_url, "bench-out")
        deploy(broker.web_url, "bench", jar, "StateBench", "bench-in", "bench-out")
        client = pulsar.Client(broker.service_url, logger=_quiet())
        string = pulsar.schema.StringSchema()
        consumer = client.subscribe("persistent://public/default/bench-out", "bench", schema=string,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer("persistent://public/default/bench-in", schema=string)
        answers = []
        for _ in range(rounds + 1):
            producer.send(str(ops))
            message = consumer.receive(600_000)
            consumer.acknowledge(message)
            answers.append([float(x) for x in message.value().split()])
        client.close()
    finally:
        broker.stop()
    figures = [statistics.median(a[i] for a in answers[1:]) for i in range(4)]
    return figures, int(answers[-1][4]) == (rounds + 1) * ops


def _quiet() -> object:
    import logging

    logger = logging.getLogger("benchmark.pulsar")
    logger.setLevel(logging.WARNING)
    return logger


def copy_part(directory: Path, messages: int, partitions: int) -> None:
    import pulsar

    from statekeep.functions.driver.session import spark_session
    from statekeep.pulsar import register
    from statekeep.testing.pulsar import read_all

    broker = servers.pulsar(directory, servers.free_port())
    try:
        broker.start()
        for name in ("copy-in", "copy-plain", "copy-statekeep"):
            create_topic(broker.web_url, name, partitions)
        topic = "persistent://public/default/copy-"
        client = pulsar.Client(broker.service_url, logger=_quiet())
        producer = client.create_producer(topic + "in", batching_enabled=True, batching_max_publish_delay_ms=5,
                                          block_if_queue_full=True)
        for i in range(messages):
            producer.send_async(f"v{i}".encode(), None, partition_key=f"k{i % 1000}", properties={"i": str(i)})
        producer.flush()
        producer.close()

        started = time.monotonic()  # the baseline: consume every message, send each on, batched
        out = client.create_producer(topic + "plain", batching_enabled=True, batching_max_publish_delay_ms=5,
                                     block_if_queue_full=True)
        consumer = client.subscribe(topic + "in", "baseline", initial_position=pulsar.InitialPosition.Earliest,
                                    receiver_queue_size=5000)
        for _ in range(messages):
            message = consumer.receive(30_000)
            out.send_async(message.data(), None, partition_key=message.partition_key(),
                           properties=message.properties())
            consumer.acknowledge(message)
        consumer.close()
        out.flush()
        plain = time.monotonic() - started

        spark = spark_session("local[2]", "pulsar_bench", shuffle_partitions=2)
        register(spark)
        started = time.monotonic()
        query = (spark.readStream.format("statekeep-pulsar").option("serviceUrl", broker.service_url)
                 .option("adminUrl", broker.web_url).option("topic", topic + "in").option("startingOffsets", "earliest")
                 .load().select("key", "value", "headers").writeStream.format("statekeep-pulsar")
                 .option("serviceUrl", broker.service_url).option("adminUrl", broker.web_url)
                 .option("topic", topic + "statekeep").option("checkpointLocation", str(directory / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        ours = time.monotonic() - started
        expected = sorted(f"v{i}".encode() for i in range(messages))
        got = {name: sorted(m.data() for m in read_all(client, topic + name, broker.web_url))
               for name in ("plain", "statekeep")}
        exact = {name: values == expected for name, values in got.items()}
        client.close()
    finally:
        broker.stop()
    print(f"\nA topic of {messages:,} messages over {partitions} partitions copied to another (s, messages/s)")
    print(f"{'copy':<44}{'time':>8}{'msg/s':>10}{'exact':>7}")
    print(f"{'statekeep-pulsar source -> sink (Spark)':<44}{ours:>8.1f}{messages / ours:>10,.0f}"
          f"{'yes' if exact['statekeep'] else 'NO':>7}")
    print(f"{'plain client: consume -> produce (baseline)':<44}{plain:>8.1f}{messages / plain:>10,.0f}"
          f"{'yes' if exact['plain'] else 'NO':>7}")
    print(f"{'ratio':<44}{'':>8}{plain / ours:>9.2f}x   (statekeep / baseline, throughput)")


def functions_parts(directory: Path, parts: set[str], args: argparse.Namespace) -> None:
    import pulsar_functions as bench  # benchmarks/pulsar_functions.py (its import sets Spark's environment)

    from statekeep.functions.driver.spark import spark_session

    pulsar_broker = kafka_broker = None
    try:
        pulsar_broker = servers.pulsar(directory / "pulsar", servers.free_port())
        pulsar_broker.start()
        kafka_broker = bench.kbench.start_broker()
        spark = spark_session("local[2]", "pulsar_functions_bench", shuffle_partitions=2)
        try:
            if "count" in parts:
                bench.count_part(spark, pulsar_broker, kafka_broker, args.messages, args.keys, args.partitions,
                                 args.seed, str(directory / "count"))
            if "latency" in parts:
                bench.latency_part(spark, pulsar_broker, kafka_broker, [float(r) for r in args.rates.split(",")],
                                   args.seconds, args.partitions, args.warm_seconds, args.seed,
                                   str(directory / "latency"))
        finally:
            spark.stop()
    finally:
        for broker in (pulsar_broker, kafka_broker):
            if broker is not None:
                broker.stop()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="state,copy,count,latency",
                        help="comma-separated, of state, copy, count, latency")
    parser.add_argument("--ops", type=int, default=2000, help="state calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds reported (after one warm-up)")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages copied, and counted")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of every topic")
    parser.add_argument("--keys", type=int, default=100_000, help="count: keys of the counted messages")
    parser.add_argument("--rates", default="10,100,1000", help="latency: messages per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="latency: production time per rate")
    parser.add_argument("--warm-seconds", type=float, default=10.0, help="latency: warm-up at 100 msgs/s")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    directory = Path(tempfile.mkdtemp(prefix="statekeep-bench-pulsar-"))
    if "copy" in parts:
        try:
            copy_part(directory / "copy", args.messages, args.partitions)
        finally:
            shutil.rmtree(directory / "copy", ignore_errors=True)
    if parts & {"count", "latency"}:
        functions_parts(directory / "functions", parts, args)
    if "state" not in parts:
        shutil.rmtree(directory, ignore_errors=True)
        return
    process = None
    try:
        jar = function_jar(FUNCTION, directory / "function")
        process, url = statekeep_server(directory)
        ours, our_exact = measure(directory / "pulsar-statekeep", jar, url, args.ops, args.rounds)
        theirs, their_exact = measure(directory / "pulsar-builtin", jar, None, args.ops, args.rounds)
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
        shutil.rmtree(directory, ignore_errors=True)
    print(f"\nJava function state calls, {args.ops} per kind per round, median of {args.rounds} rounds (µs)")
    print(f"{'provider':<12}{'incr p50':>10}{'incr p99':>10}{'get p50':>10}{'get p99':>10}{'exact':>7}")
    for name, row, exact in (("statekeep", ours, our_exact), ("built-in", theirs, their_exact)):
        print(f"{name:<12}" + "".join(f"{x:>10.1f}" for x in row) + f"{'yes' if exact else 'NO':>7}")
    print(f"{'ratio':<12}" + "".join(f"{a / b:>9.1f}x" for a, b in zip(ours, theirs)) + "   (statekeep / built-in)")


if __name__ == "__main__":
    main()
