"""Latency of one message through a running stateful function, against Spark's own stateful queries, in one run.

    SPARK_LOCAL_IP=127.0.0.1 python benchmarks/latency.py \\
        [--rates 10,100,1000] [--seconds 20] [--variants a,b,...] [--keys 100] [--linger-ms 10] \\
        [--rounds N] [--profile] [--startup] [--spark-conf KEY=VALUE ...]

One SparkSession (local[2], 2 shuffle partitions). Each variant is one running streaming query; a probe
process (the user's producer and consumer, outside the driver) produces JSON messages ``{"k": KEY, "t":
PRODUCE_TIME}`` at each rate of ``--rates`` for ``--seconds``, and polls the query's output as a consumer
would. Every output row is ``(k, n)``, the key's count after the row's batch, so message number s of key k
is readable once a row (k, n >= s) is: its latency is that moment minus its produce time. Messages are
written as files, one per ``--linger-ms`` (as a Pulsar producer batches): to a statekeep topic
(``persistent://public/default/in-VARIANT``, the topics module's own writer) for statekeep, to a directory of
JSON-lines files for Spark, renamed into place so no reader sees half a file.

- statekeep: ``process(input, context)`` counting with ``incr_counter`` and returning ``{"k", "n"}`` per
  message, output to a topic (the statekeep writer's files); the default trigger, processingTime 0 (as the
  Spark rows);
- statekeep_batch: the same with ``process_batch`` (``incr_counters``, one row per key);
- statekeep_state_dir, statekeep_batch_state_dir: the two with ``--state-dir`` (partition-owned state);
- statekeep_1s: ``statekeep`` with ``--trigger-interval 1s`` (``triggerIntervalMs`` 1000), the trigger every
  function had before it was configurable;
- spark_count: ``groupBy(k).count()`` (JVM state), update mode, ``foreachBatch`` writing the batch's rows as a
  file (as the output writer does);
- applyInPandasWithState: ``groupBy(k)`` with a pandas function keeping the count in GroupState;
- python_stateless: about the least a Python stage gets from Spark's micro-batch engine: no state, no shuffle, the
  batch's records in one task of a Python streaming sink (``DataSourceStreamArrowWriter``, in the query's own plan:
  no ``foreachBatch``) that writes ``{"k", "n": s}`` per message (its number ``s``, which the message carries) with
  statekeep's file writer;
- operator: the ``statekeep`` variant's count as the DataFrame operator (``statekeep.spark.apply_function``, key
  ``k``, parallelism 2) on the Spark variants' input, its rows ``(k, n)`` to python_stateless's sink (statekeep's
  writer, in the query's plan).

Before any measured query, a statekeep and a Spark query run ``--warm-seconds`` at 100 msgs/s (the JVM's
code warm: without it the first variant measured paid for it, its p99 1.4x the same variant's measured
later). Order still shows (the per-record function's micro-batch median at 10 msgs/s was 110 ms run first,
88 ms run last, in two runs an hour apart): ``--rounds N`` runs the variants N times, every other round in
reverse order, so each variant runs early and late alike; each percentile is over the messages of all
rounds, the sustained rate the lowest of any round, the profile each step's median over rounds. Each query
first gets warm-up messages (one every 200 ms until outputs flow: Python workers started); "first output"
is the time from the query's start to its first output. Per rate it prints p50, p90, p99,
max of the latency and the sustained rate (messages read / (last read - first produced)), then the ratios
the issue's targets name. ``--profile`` times one statekeep micro-batch by step: Spark's own progress
(``durationMs``) for every variant, and in statekeep's Python workers (from the batch's start to the first task,
state store, marker, state reads, the function, output, state commit, from the last task's end to the batch's),
by timers patched in for the run (a few ``perf_counter`` calls per task).
``--startup`` times a new ``functions localrun`` process from start to its first output, with the floor (a
process starting a SparkSession, and one running a bare streaming query to its first output) beside it.
``--spark-conf`` tries a Spark setting on every variant alike (e.g. a lever the profile points at); the session
is ``spark_session``'s, with its latency settings (``statekeep.functions.driver.spark.latency_conf``) for every
variant, Spark's own included: ``--spark-conf spark.python.unix.domain.socket.enabled=false --spark-conf
spark.sql.sources.parallelPartitionDiscovery.threshold=32`` runs them with Spark's defaults.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from statekeep.functions.driver.sparkpython import spark_python  # noqa: E402

os.environ.setdefault("PYSPARK_PYTHON", spark_python())  # see statekeep.functions.driver.sparkpython
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

PER_RECORD = b'''import json


def process(input, context):
    k = json.loads(input)["k"]
    context.incr_counter(k, 1)
    return json.dumps({"k": k, "n": context.get_counter(k)})
'''
PER_BATCH = b'''import json
from collections import Counter


def process_batch(records, context):
    counts = Counter(json.loads(v)["k"] for v in records.column("value").to_pylist())
    keys = list(counts)
    context.incr_counters(keys, [counts[k] for k in keys])
    return [{"k": k, "n": n} for k, n in zip(keys, context.get_counters(keys))]
'''
STATEKEEP = {  # variant -> (code, partition-owned state, triggerIntervalMs: None is the default, 0)
    "statekeep": (PER_RECORD, False, None),
    "statekeep_batch": (PER_BATCH, False, None),
    "statekeep_state_dir": (PER_RECORD, True, None),
    "statekeep_batch_state_dir": (PER_BATCH, True, None),
    "statekeep_1s": (PER_RECORD, False, 1000),
}
SPARK = ("spark_count", "applyInPandasWithState", "python_stateless", "operator")
VARIANTS = (*STATEKEEP, *SPARK)
PHASES = ("latestOffset", "getBatch", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")


# ---- statistics (pure: tested in tests/test_latency_benchmark.py) ------------------------------------------

def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0 < q <= 100) of ``values`` by the nearest-rank method (an observed value:
    p100 is the max). Raises ValueError for no values or q outside (0, 100]."""
    if not values:
        raise ValueError("no values")
    if not 0 < q <= 100:
        raise ValueError(f"q must be in (0, 100], not {q}")
    ordered = sorted(values)
    rank = -(-q * len(ordered) // 100)  # ceil(q/100 * n), at least 1
    return ordered[max(int(rank), 1) - 1]


def summarize(latencies: Sequence[float], produced: int, first_produced: float, last_read: float) -> dict[str, Any]:
    """p50/p90/p99/max (seconds) of the messages read, how many were ``produced`` and ``read``, and the
    sustained rate: messages read per second from the first produce to the last read."""
    span = last_read - first_produced
    row: dict[str, Any] = {"produced": produced, "read": len(latencies),
                           "rate": len(latencies) / span if latencies and span > 0 else 0.0}
    for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
        row[name] = percentile(latencies, q) if latencies else float("nan")
    return row


def pooled(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's reports of several rounds as one: percentiles over every round's messages, the lowest
    sustained rate, the median first output."""
    rates: dict[float, dict[str, Any]] = {}
    for rate in reports[0]["rates"]:
        rows = [report["rates"][rate] for report in reports]
        latencies = [x for row in rows for x in row["latencies"]]
        rates[rate] = {**summarize(latencies, sum(row["produced"] for row in rows), 0.0, 1.0),
                       "rate": min(row["rate"] for row in rows)}  # a rate is a round's own: no span spans rounds
    return {"first_output": statistics.median(report["first_output"] for report in reports), "rates": rates}


def median_rows(rounds: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """Per step, the median over rounds of :func:`batch_profile`'s medians (steps as the first round has them)."""
    values: dict[str, list[float]] = defaultdict(list)
    for rows in rounds:
        for label, value in rows:
            values[label].append(value)
    return [(label, statistics.median(values[label])) for label, _ in rounds[0]]


def ratio(mine: float, theirs: float) -> str:
    return f"{mine / theirs:.2f}x" if theirs and theirs == theirs and mine == mine else "n/a"


class Consumer:
    """Reads ``(k, n)`` output rows and marks every message of key k up to number n read, at the moment its
    row was first seen. ``produced[(k, s)]`` is message s of key k's produce time."""

    def __init__(self, produced: dict[tuple[str, int], float]) -> None:
        self.produced = produced
        self.done: dict[str, int] = defaultdict(int)
        self.read: dict[tuple[str, int], float] = {}  # (k, s) -> latency

    def rows(self, rows: Iterable[tuple[str, int]], now: float) -> None:
        for k, n in rows:
            for s in range(self.done[k] + 1, n + 1):
                if (k, s) in self.produced:
                    self.read[(k, s)] = now - self.produced[(k, s)]
            self.done[k] = max(self.done[k], n)


def output_rows(line: str) -> tuple[str, int]:
    """``(k, n)`` of one output line: a topic's message record (its value the JSON text) or a plain row."""
    record = json.loads(line)
    if "n" not in record:
        value = record["value"]
        record = json.loads(value) if isinstance(value, str) else value
    return record["k"], int(record["n"])


# ---- the probe: producer and consumer, in a process of their own -------------------------------------------

def _write_messages(target: tuple[str, str, str], batch: list[tuple[str, int, float]]) -> None:
    kind, where, name = target
    lines = [json.dumps({"k": k, "t": t, "s": s}, separators=(",", ":")) for k, s, t in batch]
    if kind == "topic":
        from statekeep.functions.messaging import topics
        from statekeep.functions.messaging.messages import Message

        topics.write(where, name, [Message(line, k).to_json() for line, (k, _, _) in zip(lines, batch)])
        return
    final = os.path.join(where, f"in-{batch[0][2]:.6f}-{batch[0][0]}-{batch[0][1]}.json")
    temp = os.path.join(where, "." + os.path.basename(final) + ".tmp")
    with open(temp, "w") as out:
        out.write("\n".join(lines) + "\n")
    os.replace(temp, final)


def probe(results: Any, target: tuple[str, str, str], output: str, rates: list[float], seconds: float, keys: int,
          linger: float, started: float, warm_timeout: float, drain_timeout: float, seed: int) -> None:
    """Warm the query up, then produce at each rate for ``seconds`` and wait for every message to be read;
    puts ``{"first_output": s, "rates": {rate: summary}}`` (or ``{"error": ...}``) on ``results``."""
    rng = random.Random(seed)
    produced: dict[tuple[str, int], float] = {}
    seq: dict[str, int] = defaultdict(int)
    consumer = Consumer(produced)
    lock, stop = threading.Lock(), threading.Event()
    first_read: list[float] = []

    def send(count: int) -> list[tuple[str, int]]:
        batch = []
        t = time.time()
        with lock:
            for _ in range(count):
                k = f"k{rng.randrange(keys)}"
                seq[k] += 1
                produced[(k, seq[k])] = t
                batch.append((k, seq[k], t))
        _write_messages(target, batch)
        return [(k, s) for k, s, _ in batch]

    def consume() -> None:
        seen: set[str] = set()
        os.makedirs(output, exist_ok=True)
        while not stop.is_set():
            now = time.time()
            fresh = sorted(e.name for e in os.scandir(output)
                           if e.name not in seen and not e.name.startswith((".", "_")) and not e.name.endswith(".tmp"))
            for name in fresh:
                seen.add(name)
                with open(os.path.join(output, name)) as f:
                    rows = [output_rows(line) for line in f if line.strip()]
                with lock:
                    consumer.rows(rows, now)
                if rows and not first_read:
                    first_read.append(now)
            time.sleep(0.005)

    def wait_read(messages: list[tuple[str, int]], timeout: float) -> bool:
        deadline = time.time() + timeout
        while time.time() < deadline:
            with lock:
                if all(m in consumer.read for m in messages):
                    return True
            time.sleep(0.01)
        return False

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    try:
        warm: list[tuple[str, int]] = []
        deadline = time.time() + warm_timeout
        while not first_read and time.time() < deadline:
            warm += send(1)
            time.sleep(0.2)
        if not first_read:
            results.put({"error": f"no output within {warm_timeout:.0f} s"})
            return
        for _ in range(10):  # outputs flow: a few more, so every partition's worker has run
            warm += send(1)
            time.sleep(0.2)
        wait_read(warm, drain_timeout)
        report: dict[str, Any] = {"first_output": first_read[0] - started, "rates": {}}
        for rate in rates:
            messages: list[tuple[str, int]] = []
            total, start = int(rate * seconds), time.time()
            while len(messages) < total:
                due = min(total, int((time.time() - start) * rate) + 1)
                messages += send(due - len(messages))
                time.sleep(max(linger, start + len(messages) / rate - time.time()))
            wait_read(messages, drain_timeout)
            with lock:
                latencies = [consumer.read[m] for m in messages if m in consumer.read]
                last = max((produced[m] + consumer.read[m] for m in messages if m in consumer.read), default=start)
            report["rates"][rate] = {**summarize(latencies, len(messages), produced[messages[0]], last),
                                     "window": (start, time.time()), "latencies": latencies}
        results.put(report)
    finally:
        stop.set()
        reader.join()


# ---- the queries -----------------------------------------------------------------------------------------

def start_statekeep(spark: Any, variant: str, work: str, topics_root: str, name: str | None = None
                    ) -> tuple[Any, tuple[str, str, str], str]:
    """A registered function ``name`` (default: the variant's), with the variant's trigger, started by
    ``run_registered``; returns (its FunctionQuery, where the probe produces, where it reads)."""
    from statekeep.functions.driver import spark as sk_spark
    from statekeep.functions.config.service import FunctionService
    from statekeep.functions.messaging.topics import directory
    from statekeep.state.partitioned import state_storage

    code, state_dir, trigger = STATEKEEP[variant]
    url, name = f"local://{work}/data", name or variant
    inputs, output = f"persistent://public/default/in-{name}", f"persistent://public/default/out-{name}"
    storage = {"stateStorage": state_storage(f"{work}/state")} if state_dir else {}
    service = FunctionService.open(url)
    service.registry.create({"tenant": "public", "namespace": "default", "name": name, "inputs": [inputs],
                             "output": output, "parallelism": 2, "triggerIntervalMs": trigger, **storage}, code)
    query = sk_spark.run_registered(service, url, "public", "default", name, checkpoint_root=f"{work}/ckpt",
                                    spark=spark)
    query.service = service  # closed with the query (stop_query)
    return query, ("topic", topics_root, inputs), directory(topics_root, output)


def count_row(input: dict[str, Any], context: Any) -> dict[str, Any]:
    """The operator variant's function: the statekeep variant's count, its row in the stateless sink's shape."""
    k = input["k"]
    return {"k": k, "s": context.incr_counter(k, 1)}


def count_in_pandas(key: Any, pdfs: Any, state: Any) -> Any:
    import pandas as pd

    total = (state.get[0] if state.exists else 0) + sum(len(pdf) for pdf in pdfs)
    state.update((total,))
    yield pd.DataFrame({"k": [key[0]], "n": [total]})


def start_spark(spark: Any, variant: str, work: str) -> tuple[Any, tuple[str, str, str], str]:
    inputs, output = f"{work}/in", f"{work}/out"
    os.makedirs(inputs)
    os.makedirs(output)
    frame = spark.readStream.schema("k string, t double, s long").json(inputs)
    if variant == "operator":  # the count's row (k, its count) goes out as python_stateless's (k, s)
        from statekeep.spark import apply_function

        frame = apply_function(frame, count_row, name="public/default/operator", key="k", store=f"local://{work}/data",
                               output_schema="k string, s long")
    if variant in ("python_stateless", "operator"):
        spark.dataSource.register(stateless_sink())
        stage = frame.select("k", "s") if variant == "operator" else frame.select("k", "s").coalesce(1)
        query = (stage.writeStream.format("latency-stateless").option("path", output)
                 .trigger(processingTime="0 seconds").option("checkpointLocation", f"{work}/ckpt")
                 .queryName(variant).start())
        return query, ("files", inputs, ""), output
    if variant == "spark_count":
        frame = frame.groupBy("k").count().withColumnRenamed("count", "n")
    else:
        frame = frame.groupBy("k").applyInPandasWithState(count_in_pandas, "k string, n long", "n long", "Update",
                                                          "NoTimeout")

    def write(batch: Any, batch_id: int) -> None:  # the rows as one file, as statekeep's writer does
        rows = batch.collect()
        if rows:
            final = os.path.join(output, f"batch-{batch_id:012d}.jsonl")
            with open(os.path.join(output, f".{batch_id}.tmp"), "w") as out:
                out.write("".join(json.dumps({"k": r.k, "n": r.n}) + "\n" for r in rows))
            os.replace(os.path.join(output, f".{batch_id}.tmp"), final)

    query = (frame.writeStream.outputMode("update").foreachBatch(write).trigger(processingTime="0 seconds")
             .option("checkpointLocation", f"{work}/ckpt").queryName(variant).start())
    return query, ("files", inputs, ""), output


def stateless_sink() -> type:
    """The python_stateless variant's sink: ``format("latency-stateless").option("path", DIR)``, each task's
    messages written to DIR as one file of ``{"k", "n"}`` lines by statekeep's writer (``OutputSink.write_new``)."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

    class Writer(DataSourceStreamArrowWriter):
        def __init__(self, path: str) -> None:
            self.path = path

        def write(self, iterator: Any) -> WriterCommitMessage:
            from statekeep.functions.messaging.sink import OutputSink

            rows = [{"k": k, "n": s} for batch in iterator
                    for k, s in zip(batch.column("k").to_pylist(), batch.column("s").to_pylist())]
            if rows:
                OutputSink(self.path).write_new(rows, "stateless")
            return WriterCommitMessage()

        def commit(self, messages: Any, batchId: int) -> None:
            """Nothing to commit: each task's file is whole when written."""

        def abort(self, messages: Any, batchId: int) -> None:
            """Nothing to undo."""

    class Sink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "latency-stateless"

        def streamWriter(self, schema: Any, overwrite: bool) -> Writer:
            return Writer(self.options["path"])

    return Sink


def stop_query(query: Any) -> list[dict[str, Any]]:
    """Stop a variant's query; its progress reports (as dicts)."""
    if hasattr(query, "spec"):  # a FunctionQuery
        progress = [json.loads(p.json) for p in query.query.recentProgress]
        query.stop()
        query.service.close()
        return progress
    progress = [json.loads(p.json) for p in query.recentProgress]
    query.stop()
    return progress


# ---- --profile: timers around statekeep's batch steps ------------------------------------------------------

def _timed(times: dict[str, float], phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            times[phase] += time.perf_counter() - start
    return call


def profiled_runner(directory: str, plain: Callable[..., Any]) -> Callable[..., Any]:
    """``arrow_partition_runner`` with timers in the Python worker (patched there for the task, and
    restored); each task writes its timings to ``directory/b<batch>-p<partition>.json``."""
    def runner(spec: dict[str, Any], report: Any = None, *layout: Any) -> Callable[..., Any]:
        def run(batches: Any) -> Any:
            from pyspark import TaskContext

            from statekeep.functions.config.spec import ExecutorSpec
            from statekeep.functions.executor import task as task_module
            from statekeep.functions.messaging.sink import OutputSink

            begun, times = time.time(), defaultdict(float)
            task = TaskContext.get()
            batch_id = int(task.getLocalProperty(task_module.SPARK_BATCH_ID)) if task else 0
            inner = plain(spec, report, *layout)
            patched: list[tuple[Any, str, Any]] = []

            def patch(owner: Any, name: str, phase: str) -> None:  # AttributeError if renamed: no silent 0 ms row
                patched.append((owner, name, getattr(owner, name)))
                setattr(owner, name, _timed(times, phase, getattr(owner, name)))

            def stores(spec: Any) -> Any:
                store = plain_store(spec)

                class Timed:  # the store, its task's state operations timed
                    def __getattr__(self, name: str) -> Any:
                        return getattr(store, name)

                    def task(self, *args: Any, **kwargs: Any) -> Any:
                        task = _timed(times, "task_open", store.task)(*args, **kwargs)
                        for method, phase in (("has_marker", "marker"), ("fetch_many", "state_read"),
                                              ("apply_batch", "state_commit")):
                            try:
                                setattr(task, method, _timed(times, phase, getattr(task, method)))
                            except AttributeError:
                                pass
                        return task
                return Timed()

            def waited(iterator: Any) -> Any:  # waiting for the JVM's Arrow batches (shuffle read)
                start = time.perf_counter()
                for batch in iterator:
                    times["arrow_wait"] += time.perf_counter() - start
                    yield batch
                    start = time.perf_counter()
                times["arrow_wait"] += time.perf_counter() - start

            plain_store = ExecutorSpec.state_store
            patch(task_module, "run_partition", "run_partition")  # as the task calls it
            patch(OutputSink, "write", "output")  # the output topic's file of (batch, partition)
            patched.append((ExecutorSpec, "state_store", plain_store))
            ExecutorSpec.state_store = stores  # type: ignore[method-assign]
            try:
                yield from inner(waited(batches))
            finally:
                for owner, name, original in reversed(patched):
                    setattr(owner, name, original)
                times["start"], times["end"] = begun, time.time()
                with open(os.path.join(directory, f"b{batch_id}-p{task.partitionId() if task else 0}.json"),
                          "w") as out:
                    json.dump(times, out)
        return run
    return runner


class WorkerTimers:
    """Timers in the Python workers of the functions started while it is entered (the plan's runner patched)."""

    def __init__(self, directory: str) -> None:
        from statekeep.functions.driver import plan

        self.plan, self.directory = plan, directory
        self.saved: Any = None

    def __enter__(self) -> WorkerTimers:
        self.saved = self.plan.arrow_partition_runner
        self.plan.arrow_partition_runner = profiled_runner(self.directory, self.saved)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.plan.arrow_partition_runner = self.saved

    def workers(self) -> dict[int, list[dict[str, float]]]:
        found: dict[int, list[dict[str, float]]] = defaultdict(list)
        for name in os.listdir(self.directory):
            with open(os.path.join(self.directory, name)) as f:
                found[int(name[1:].split("-")[0])].append(json.load(f))
        return found


def batch_started(progress: dict[str, Any]) -> float:
    """When a micro-batch started (epoch seconds), from its progress's ``timestamp``."""
    from datetime import datetime

    return datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def batch_profile(progress: list[dict[str, Any]], window: tuple[float, float],
                  workers: WorkerTimers | None) -> list[tuple[str, float]]:
    """Median milliseconds per step over the micro-batches with input that started in ``window``."""
    chosen = [p for p in progress if p["numInputRows"] and window[0] <= batch_started(p) <= window[1]]
    rows = [(f"{phase} (Spark progress)", statistics.median(p["durationMs"].get(phase, 0) for p in chosen))
            for phase in PHASES] if chosen else []
    rows.append(("micro-batches with input", float(len(chosen))))
    if workers is None or not chosen:
        return rows
    steps: dict[str, list[float]] = defaultdict(list)
    tasks_of = workers.workers()
    for p in chosen:
        tasks = tasks_of.get(p["batchId"], [])
        if not tasks:
            continue
        start = batch_started(p)
        steps["batch start -> first Python task starts"].append(min(t["start"] for t in tasks) - start)
        slowest = max(tasks, key=lambda t: t["end"] - t["start"])
        steps["Python task (slowest partition)"].append(slowest["end"] - slowest["start"])
        for phase, label in (("arrow_wait", "waiting for Arrow batches"), ("task_open", "state store task"),
                             ("marker", "applied-marker check"), ("state_read", "state reads"),
                             ("output", "output write (fsync, rename)"), ("state_commit", "state commit")):
            steps[f"  {label}"].append(slowest.get(phase, 0.0))
        inner = sum(slowest.get(k, 0.0) for k in ("task_open", "marker", "state_read", "output", "state_commit"))
        steps["  the function + record path"].append(slowest.get("run_partition", 0.0) - inner)
        steps["last Python task ends -> batch ends"].append(
            start + p["durationMs"]["triggerExecution"] / 1000 - max(t["end"] for t in tasks))
    rows += [(label, statistics.median(values) * 1000) for label, values in steps.items()]
    return rows


# ---- --startup -----------------------------------------------------------------------------------------

FIRST_OUTPUT_CHILD = '''
import json, os, sys, time
t0 = float(sys.argv[1]); inputs, output = sys.argv[2], sys.argv[3]
from statekeep.functions.driver.session import spark_session
spark = spark_session("local[2]")
ready = time.time()
def write(batch, batch_id):
    rows = batch.collect()
    if rows:
        with open(os.path.join(output, ".o.tmp"), "w") as f:
            f.write("".join(json.dumps({"k": r.k, "n": r["count"]}) + "\\n" for r in rows))
        os.replace(os.path.join(output, ".o.tmp"), os.path.join(output, "o.jsonl"))
q = (spark.readStream.schema("k string, t double, s long").json(inputs).groupBy("k").count().writeStream
     .outputMode("update").foreachBatch(write).option("checkpointLocation", output + "-ckpt")
     .trigger(processingTime="0 seconds").start())
print(json.dumps({"session": ready - t0}), flush=True)
while not os.path.exists(os.path.join(output, "o.jsonl")):
    time.sleep(0.005)
q.stop(); spark.stop()
'''

LOCALRUN_CHILD = '''
import json, sys, time
t0 = float(sys.argv[1])
marks = {}
def mark(name):
    marks.setdefault(name, time.time() - t0)
    sys.stderr.write("STARTUP " + json.dumps({name: marks[name]}) + "\\n"); sys.stderr.flush()
from statekeep.cli import main
from statekeep.functions.driver import spark as sk
from statekeep.functions.admin import worker
from statekeep.functions.config import service, registry
mark("imports")
def wrap(owner, name, label):
    fn = getattr(owner, name)
    def call(*a, **k):
        mark(label + " begins")
        try:
            return fn(*a, **k)
        finally:
            mark(label + " ends")
    setattr(owner, name, call)
wrap(sk, "spark_session", "spark_session")
wrap(sk, "executor_spec", "executor_spec")
wrap(sk.FunctionQuery, "start", "query start")
wrap(sk.FunctionQuery, "_progress", "first micro-batch's progress")
import statekeep.cli.run as run
wrap(run, "_run_locked", "registered and running")
sys.exit(main(sys.argv[2:]))
'''


def startup(work: str) -> None:
    """Fresh processes: a SparkSession and a bare streaming count to its first output (the floor), then
    ``statekeep functions localrun`` to its first output, its steps marked by wrappers."""
    from statekeep.functions.messaging import topics
    from statekeep.functions.messaging.messages import Message

    os.makedirs(f"{work}/su-in")
    os.makedirs(f"{work}/su-out")
    with open(f"{work}/su-in/m.json", "w") as f:
        f.write(json.dumps({"k": "k1", "t": time.time(), "s": 1}) + "\n")
    t0 = time.time()
    child = subprocess.run([sys.executable, "-c", FIRST_OUTPUT_CHILD, str(t0), f"{work}/su-in", f"{work}/su-out"],
                           capture_output=True, text=True, timeout=300)
    floor_first = os.path.getmtime(f"{work}/su-out/o.jsonl") - t0
    session = json.loads(child.stdout.splitlines()[0])["session"]
    data = f"{work}/su-data"
    root = f"{data}/topics"
    topics.write(root, "persistent://public/default/in", [Message(json.dumps({"k": "k1", "t": 0}), "k1").to_json()])
    with open(f"{work}/su.py", "wb") as f:
        f.write(PER_RECORD)
    out = topics.directory(root, "persistent://public/default/out")
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, "-c", LOCALRUN_CHILD, str(t0), "functions", "localrun", "--data-dir",
                             data, "--name", "su", "--py", f"{work}/su.py", "--inputs", "persistent://public/default/in",
                             "--output", "persistent://public/default/out", "--spark-master", "local[2]"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    marks: dict[str, float] = {}
    first = None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    deadline = time.time() + 300
    while first is None and time.time() < deadline and proc.poll() is None:
        if os.path.isdir(out) and any(not n.startswith(".") for n in os.listdir(out)):
            first = time.time() - t0
        time.sleep(0.005)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    reader.join(timeout=10)
    for line in lines:
        if line.startswith("STARTUP "):
            marks.update(json.loads(line[8:]))
    print("\nstartup, seconds from process start (fresh processes, local[2]):")
    print(f"  floor: SparkSession ready {session:.2f}; bare Spark groupBy().count() query's first output "
          f"{floor_first:.2f}")
    print(f"  statekeep functions localrun: first output {first if first is not None else float('nan'):.2f}")
    for name, at in sorted(marks.items(), key=lambda m: m[1]):
        print(f"    {name:<36}{at:7.2f}")
    if first is not None:
        print(f"  statekeep adds {first - floor_first:.2f} s to the floor's first output "
              f"({first / floor_first:.2f}x)")


# ---- the run ---------------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="10,100,1000", help="messages per second, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="production time per rate")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of: %(default)s")
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--linger-ms", type=float, default=10.0, help="the producer writes a file at most this often")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--warm-seconds", type=float, default=20.0,
                        help="the session's warm-up queries run this long at 100 msgs/s before any measured one")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the variants this many times, in reverse order every other round; the "
                             "percentiles pool every round's messages")
    parser.add_argument("--profile", action="store_true", help="time statekeep's micro-batch steps")
    parser.add_argument("--startup", action="store_true", help="also time a new localrun to its first output")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session every variant runs in (repeatable)")
    args = parser.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {', '.join(VARIANTS)}")
    work = tempfile.mkdtemp(prefix="statekeep-latency-")
    from statekeep.functions.driver.session import spark_session

    spark = spark_session("local[2]", conf=dict(c.split("=", 1) for c in args.spark_conf))
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
    topics_root = f"{work}/topics"
    os.environ["STATEKEEP_TOPICS_DIR"] = topics_root
    context = multiprocessing.get_context("spawn")
    results: dict[str, dict[str, Any]] = {}
    profiles: dict[str, dict[float, list[tuple[str, float]]]] = {}
    try:
        # the session's first queries (code generation, class loading, the JIT: a micro-batch calls the
        # streaming engine's code a few times, so it takes many batches) warm up before any reported one, a
        # statekeep and a Spark query at 100 msgs/s each, so that none pays for running first
        for variant, tag in (("statekeep", "warm_statekeep"), ("spark_count", "warm_spark")):
            os.makedirs(f"{work}/{tag}")
            query, target, output = (start_statekeep(spark, variant, f"{work}/{tag}", topics_root, tag)
                                     if variant in STATEKEEP else start_spark(spark, variant, f"{work}/{tag}"))
            queue = context.Queue()
            worker = context.Process(target=probe, args=(queue, target, output, [100.0] if args.warm_seconds else [],
                                                         args.warm_seconds, args.keys, 0.01, time.time(), 180.0,
                                                         30.0, args.seed))
            worker.start()
            try:
                queue.get(timeout=240 + args.warm_seconds + 30)
            finally:
                worker.join(timeout=30)
                stop_query(query)
        runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        batches: dict[str, dict[float, list[list[tuple[str, float]]]]] = defaultdict(lambda: defaultdict(list))
        for round_, variant in ((r, v) for r in range(args.rounds) for v in (variants[::-1] if r % 2 else variants)):
            name = variant if args.rounds == 1 else f"{variant}_r{round_}"
            where = f"{work}/{name}"
            os.makedirs(where)
            timers = WorkerTimers(f"{where}/times") if args.profile and variant in STATEKEEP else None
            if timers:
                os.makedirs(timers.directory)
                timers.__enter__()
            started = time.time()
            query, target, output = (start_statekeep(spark, variant, where, topics_root, name)
                                     if variant in STATEKEEP else start_spark(spark, variant, where))
            queue = context.Queue()
            worker = context.Process(target=probe, args=(queue, target, output, rates, args.seconds, args.keys,
                                                         args.linger_ms / 1000, started, 180.0,
                                                         max(30.0, args.seconds), args.seed))
            worker.start()
            try:
                report = queue.get(timeout=240 + len(rates) * (args.seconds + max(30.0, args.seconds) + 10))
            finally:
                worker.join(timeout=30)
                progress = stop_query(query)
                if timers:
                    timers.__exit__()
            if "error" in report:
                print(f"  {name}: {report['error']}", file=sys.stderr)
                continue
            runs[variant].append(report)
            if args.profile:
                for rate, row in report["rates"].items():
                    batches[variant][rate].append(batch_profile(progress, row["window"], timers))
            print(f"  {name}: first output {report['first_output']:.1f} s after start; "
                  + "; ".join(f"{r:g}/s p99 {row['p99'] * 1000:.0f} ms" for r, row in report["rates"].items()),
                  file=sys.stderr)
        results.update((variant, pooled(reports)) for variant, reports in runs.items())
        profiles.update((variant, {rate: median_rows(rounds) for rate, rounds in by_rate.items()})
                        for variant, by_rate in batches.items())
    finally:
        spark.stop()
    print(f"\nlatency from produce to readable output, ms; local[2], {args.keys} keys, {args.seconds:g} s per rate, "
          f"producer files every {args.linger_ms:g} ms")
    print(f"{'variant':<28}{'msgs/s':>8}{'p50':>8}{'p90':>8}{'p99':>8}{'max':>8}{'sustained/s':>13}{'read':>12}")
    for variant, report in results.items():
        for rate, row in report.get("rates", {}).items():
            print(f"{variant:<28}{rate:>8g}" + "".join(f"{row[k] * 1000:>8.0f}" for k in ("p50", "p90", "p99", "max"))
                  + f"{row['rate']:>13.1f}{row['read']:>6}/{row['produced']:<5}")
    print("first output after query start, s: " + ", ".join(
        f"{v} {r['first_output']:.1f}" for v, r in results.items() if "first_output" in r))

    def p(variant: str, rate: float, key: str = "p99") -> float:
        return results.get(variant, {}).get("rates", {}).get(rate, {}).get(key, float("nan"))

    print()
    for variant in (v for v in results if v in STATEKEEP):
        for rate in (r for r in rates if r in (10, 100)):
            print(f"target {variant} at {rate:g}/s: p99 / spark_count p99 "
                  f"{ratio(p(variant, rate), p('spark_count', rate))} (<= 1.0x); / applyInPandasWithState p99 "
                  f"{ratio(p(variant, rate), p('applyInPandasWithState', rate))} (<= 0.5x)")
            if "python_stateless" in results:
                floor = p("python_stateless", rate)
                print(f"  {variant} at {rate:g}/s: p99 / python_stateless p99 (no state, Spark's floor for a Python "
                      f"stage) {ratio(p(variant, rate), floor)}; python_stateless p99 / applyInPandasWithState p99 "
                      f"{ratio(floor, p('applyInPandasWithState', rate))}")
        if 10 in rates and 1000 in rates:
            print(f"target {variant}: p99 at 1000/s / p99 at 10/s {ratio(p(variant, 1000), p(variant, 10))} (< 2x)")
    if "statekeep" in results and "operator" in results:
        for rate in rates:
            print(f"target operator at {rate:g}/s: p99 / statekeep p99 "
                  f"{ratio(p('operator', rate), p('statekeep', rate))} (<= 1.1x)")
    if "statekeep" in results and "statekeep_1s" in results and 10 in rates:
        print(f"target statekeep p50 at 10/s / statekeep_1s's (the 1 s trigger functions had before) "
              f"{ratio(p('statekeep', 10, 'p50'), p('statekeep_1s', 10, 'p50'))} (<= 0.3x)")
    for variant, by_rate in profiles.items():
        for rate, rows in by_rate.items():
            print(f"\n{variant} at {rate:g}/s: one micro-batch, median ms over the batches with input")
            for label, value in rows:
                print(f"  {label:<52}{value:>9.1f}")
    if args.startup:
        startup(work)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
