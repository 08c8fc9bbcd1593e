"""The DataFrame operator (``statekeep.spark.apply_function``) on local Spark: any DataFrame in, the function's
rows out, state exactly-once and kept rows given again on a replay; the driver SIGKILLed between the state commit
and the sink's, and after both, and a Python worker SIGKILLed, each ending exact on a file sink and on
``foreachBatch``. The fault scenarios share driver lifetimes: the queries of one test run side by side in one
driver, and each lifetime ends at every query's next fault."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from statekeep.errors import InvalidArgumentError
from statekeep.functions.admin.worker import function_status
from statekeep.functions.config.service import FunctionService
from statekeep.testing import wait_for
from support.spark import write_word_files

QUERY = Path(__file__).parent / "support" / "operator_query.py"


@pytest.fixture(autouse=True)
def _functions_by_value():
    """This module's functions travel to Spark's Python workers by value (their module is not importable there),
    as a user's functions do with PySpark's ``cloudpickle.register_pickle_by_value`` or ``addPyFile``."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def counting(input, context):
    context.incr_counter(input["user"], 1)
    return {"user": input["user"], "n": context.get_counter(input["user"])}


def test_a_batch_dataframe_counts_once_and_gives_its_rows_again_when_computed_again(spark, tmp_path):
    from statekeep.spark import apply_function

    url = f"local://{tmp_path}/data"
    df = spark.createDataFrame([("a", 1), ("b", 2), ("a", 3)], "user string, x int")
    out = apply_function(df, counting, name="public/default/users", key="user", store=url)
    first = sorted(map(tuple, out.collect()))
    assert first == [("a", '{"user":"a","n":1}'), ("a", '{"user":"a","n":2}'), ("b", '{"user":"b","n":1}')]
    assert sorted(map(tuple, out.collect())) == first  # the same run: its kept rows, state not counted again
    typed = apply_function(df, counting, name="public/default/users", key="user", store=url,
                           output_schema="user string, n long")
    assert sorted(map(tuple, typed.collect())) == [("a", 3), ("a", 4), ("b", 2)]  # a second run counts on
    with FunctionService.open(url) as service:  # registered: the CLI's and REST's reads find its state
        assert service.query_state("public", "default", "users", "a")["numberValue"] == 4
        assert service.registry.get("public", "default", "users").keyField == "user"


def best_int(input, context):
    context.value_state("best", int).update(input["x"])
    return {"user": input["user"]}


def best_str(input, context):  # the recorded int cannot become str
    context.value_state("best", str).update(str(input["x"]))


def test_an_incompatible_new_version_is_refused_when_applied_before_anything_runs(spark, tmp_path):
    """Issue 52: the operator registered a stub, so update's schema check never saw a function object's code and
    the run found the mismatch only at its first open. Now its source is registered and checked at apply_function."""
    from statekeep.spark import apply_function

    url = f"local://{tmp_path}/data"
    df = spark.createDataFrame([("a", 1)], "user string, x int")
    assert apply_function(df, best_int, name="public/default/best", key="user", store=url).count() == 1
    with pytest.raises(InvalidArgumentError, match=r"test_operator_spark.py:\d+: state variable 'best': its type was "
                                                   "int, cannot become str"):
        apply_function(df, best_str, name="public/default/best", key="user", store=url)
    with FunctionService.open(url) as service:  # nothing written: the registered code is best_int's
        assert b"def best_int" in service.registry.get_code("public", "default", "best")


def picky(input, context):
    if input["user"] == "bad":
        raise ValueError("no bad users")
    context.record_metric("seen", 1)
    return context.incr_counter(input["user"], 1)


def test_a_failing_record_goes_to_the_dead_letter_topic_and_the_others_count(spark, tmp_path):
    """Pulsar's retries and dead letters, from the function's config: the bad record is retried, then written to
    its dead-letter topic, with none of its state changes; the run goes on."""
    from statekeep.functions.messaging.sink import read_records
    from statekeep.spark import apply_function

    url = f"local://{tmp_path}/data"
    df = spark.createDataFrame([("a",), ("bad",), ("a",)], "user string")
    out = apply_function(df, picky, name="public/default/picky", key="user", store=url,
                         config={"maxMessageRetries": 1, "deadLetterTopic": str(tmp_path / "dead")})
    assert sorted(r.value for r in out.collect()) == ["1", "2"]
    assert list(read_records(str(tmp_path / "dead"))) == [{"user": "bad"}]
    with FunctionService.open(url) as service:
        assert [e.key for e in service.registry.state_store("public", "default", "picky").scan_entries()] == ["a"]


class WordLength:
    """A Pulsar-style class, its per-key state in bytes."""

    def process(self, input, context):
        seen = int(context.get_state(input["word"]) or b"0") + len(input["word"])
        context.put_state(input["word"], str(seen).encode())
        return seen


def test_a_class_a_file_and_process_batch_run_as_operators(spark, tmp_path):
    from statekeep.spark import apply_function

    url = f"local://{tmp_path}/data"
    df = spark.createDataFrame([("ab",), ("c",), ("ab",)], "word string")
    out = apply_function(df, WordLength, name="public/default/lengths", key="word", store=url,
                         output_schema="total long")
    assert sorted(r.total for r in out.collect()) == [1, 2, 4]
    py = tmp_path / "batch.py"
    py.write_text("import pyarrow as pa\nimport pyarrow.compute as pc\n\n"
                  "def process_batch(records, context):\n"
                  "    counts = pc.value_counts(records['word'])\n"
                  "    context.incr_counters(counts.field('values'), counts.field('counts'))\n"
                  "    return pa.table({'word': counts.field('values'), 'seen': counts.field('counts')})\n")
    out = apply_function(df, str(py), name="public/default/vector", key="word", store=url,
                         output_schema="word string, seen long")
    assert sorted(map(tuple, out.collect())) == [("ab", 2), ("c", 1)]
    with FunctionService.open(url) as service:
        assert service.query_state("public", "default", "vector", "ab")["numberValue"] == 2


def test_a_kafka_shaped_dataframe_gives_messages_through_the_serde_and_context(spark, tmp_path):
    from statekeep.spark import apply_function

    def echo(value, context):
        return {"value": value, "key": context.get_message_key(), "props": context.get_message_properties(),
                "time": context.get_message_eventtime(), "topic": context.get_current_message_topic_name()}

    when = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.timezone.utc)
    df = spark.createDataFrame(
        [(b"k1", b"hello", "events", when, [("h", b"x")])],
        "key binary, value binary, topic string, timestamp timestamp, headers array<struct<key string, value binary>>")
    out = apply_function(df, echo, name="public/default/kafka", key="key", store=f"local://{tmp_path}/data")
    (row,) = out.collect()
    assert row.key == "k1"
    assert json.loads(row.value) == {"value": "hello", "key": "k1", "props": {"h": "x"},
                                     "time": int(when.timestamp() * 1000), "topic": "events"}


def test_bad_arguments_are_refused_before_anything_runs(spark, tmp_path):
    from statekeep.spark import apply_function

    url = f"local://{tmp_path}/data"
    df = spark.createDataFrame([("a",)], "user string")
    with pytest.raises(InvalidArgumentError, match="tenant/namespace/name"):
        apply_function(df, counting, name="users", store=url)
    with pytest.raises(InvalidArgumentError, match="cannot read the function file"):
        apply_function(df, str(tmp_path / "missing.py"), name="public/default/x", store=url)
    with pytest.raises(InvalidArgumentError, match="callable"):
        apply_function(df, 42, name="public/default/x", store=url)
    with pytest.raises(InvalidArgumentError, match="outputs_dir"):
        apply_function(df, counting, name="public/default/x", store="memory://")
    with pytest.raises(InvalidArgumentError, match="parallelism"):
        apply_function(df, counting, name="public/default/x", store=url, parallelism=0)
    with pytest.raises(InvalidArgumentError, match="not a DDL schema"):
        apply_function(df, counting, name="public/default/x", store=url, output_schema="user strin g,")
    with pytest.raises(InvalidArgumentError, match="__ are statekeep's own"):
        apply_function(df.withColumnRenamed("user", "__user"), counting, name="public/default/x", store=url)
    with FunctionService.open(url) as service:  # none of the refused calls registered anything
        assert service.registry.list("public", "default") == []
    wrong = apply_function(df, counting, name="public/default/wrong", key="user", store=url,
                           output_schema="user string")
    with pytest.raises(Exception, match="n.*output schema"):  # a result that does not fit: the job fails, named
        wrong.collect()
    with FunctionService.open(url) as service:  # and nothing of its run was committed
        assert list(service.registry.state_store("public", "default", "wrong").scan_entries()) == []


WORDS = [f"w{i % 37}" for i in range(900)]
PER_FILE = 225  # micro-batches 0 to 3


def expected_rows(words: list[str]) -> list[tuple[str, int]]:
    """Every (word, n) a word count gives: n from 1 to the word's count, once each."""
    return sorted((w, n) for w, c in Counter(words).items() for n in range(1, c + 1))


def run_queries(tmp_path: Path, spark_env: dict[str, str], specs: list[dict], master: str) -> subprocess.Popen:
    """support/operator_query.py's driver running the queries ``specs``, in a process group of its own."""
    command = [sys.executable, str(QUERY), "--master", master,
               *(arg for spec in specs for arg in ("--query", json.dumps(spec)))]
    log = open(tmp_path / "driver.log", "a")
    return subprocess.Popen(command, env={**os.environ, **spark_env}, stdout=log, stderr=log,
                            start_new_session=True)  # its own process group: the JVM and workers die with it


def state_counts(url: str) -> Counter:
    with FunctionService.open(url) as service:
        state = service.registry.state_store("public", "default", "opcount")
        return Counter({e.key: e.counter for e in state.scan_entries()})


def faults_end_exact(tmp_path: Path, spark_env: dict[str, str], queries: dict[str, dict], *,
                     master: str = "local[2,4]") -> None:
    """Run the queries ``queries`` (name -> ``sink``, ``pauses``: faults ``WHERE@BATCH``, see
    support/operator_query.py; optionally ``store`` (default ``local://`` in its directory), ``state_dir``,
    ``outputs_dir``) side by side in one driver, each over WORDS in a directory of its own. A driver lives until
    every query has stopped at its next fault (for ``function``: once partition 0 of the batch committed its state;
    a killed Python worker stops nothing: Spark retries its task) and every query with no such fault left has
    ended; then it is SIGKILLed, and run again from the queries' checkpoints. At the end every input is counted
    once, every output row is in its sink once, and every fault happened."""
    specs, stops = [], {}
    for name, query in queries.items():
        base = tmp_path / name
        write_word_files(base / "in", WORDS, per_file=PER_FILE)
        for pause in query["pauses"]:
            (base / f"armed-{pause.split('@')[0]}").touch()
        specs.append({"store": query.get("store") or f"local://{base}/data", "input": str(base / "in"),
                      "out": str(base / "out"), "checkpoint": str(base / "ck"), "flags": str(base),
                      "sink": query["sink"], "pause": ",".join(query["pauses"]),
                      **{k: query[k] for k in ("state_dir", "outputs_dir") if k in query}})
        stops[name] = [pause.split("@") for pause in query["pauses"] if not pause.startswith("kill-worker@")]
    log = tmp_path / "driver.log"

    def result(spec: dict) -> Path:
        return Path(spec["out"] + ".result.json")

    run = run_queries(tmp_path, spark_env, specs, master)
    while any(stops.values()):
        for name, spec in zip(queries, specs):
            if not stops[name]:  # no fault left: it ends (again, if it had ended before: nothing more to do)
                assert wait_for(lambda: result(spec).exists() or run.poll() is not None, timeout=300)
                assert result(spec).exists(), log.read_text()[-4000:]
                continue
            where, batch = stops[name].pop(0)
            paused = Path(spec["flags"]) / f"paused-{where}"
            assert wait_for(lambda: paused.exists() or run.poll() is not None, timeout=180)
            assert run.poll() is None, log.read_text()[-4000:]
            if where == "function":  # partition 0 of the batch committed; partition 1 is stopped in the function
                with FunctionService.open(spec["store"]) as service:
                    state = service.registry.state_store("public", "default", "opcount")
                    assert wait_for(lambda: state.task(int(batch), 0, 2).has_marker(f"{batch}-0"), timeout=60)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        for spec in specs:  # each run writes its own
            result(spec).unlink(missing_ok=True)
            for paused in Path(spec["flags"]).glob("paused-*"):
                paused.unlink()
        run = run_queries(tmp_path, spark_env, specs, master)
    assert run.wait(timeout=300) == 0, log.read_text()[-4000:]
    for (name, query), spec in zip(queries.items(), specs):
        assert not list((tmp_path / name).glob("armed-*")), f"a fault of {name} never happened"
        rows = sorted((r["word"], r["n"]) for r in json.loads(result(spec).read_text()))
        assert rows == expected_rows(WORDS), name
        assert state_counts(spec["store"]) == Counter(WORDS), name
        if "kill-worker@3" in query["pauses"]:  # the last run's status, as functions status reads it: batch 3 once
            with FunctionService.open(spec["store"]) as service:
                status = function_status(service.registry.store, "public", "default", "opcount")
            assert (status["running"], status["processed"], status["error"]) == (False, PER_FILE, None)


def test_faults_end_exact_in_one_driver(tmp_path, spark_env):
    """Two queries in one driver, SIGKILLed twice. ``foreachBatch`` on the embedded store: the driver killed in
    micro-batch 1 after the state commit and before the handler wrote, again in batch 2 after it wrote, then a
    Python worker SIGKILLed in batch 3. A file sink on partition-owned state (``state_dir``): the driver killed
    after one partition of micro-batch 1 committed its state and before the sink's commit (the replay gives the
    kept rows of the committed partition), then run again after it ended (nothing more). See faults_end_exact.
    The file sink on a per-key store is the cluster's test (etcd)."""
    faults_end_exact(tmp_path, spark_env, {
        "foreach": {"sink": "foreach", "pauses": ("before-sink@1", "after-sink@2", "kill-worker@3")},
        "file": {"sink": "file", "pauses": ("function@1",), "state_dir": str(tmp_path / "file" / "shared")}})


def test_faults_on_the_cluster_end_exact(tmp_path, spark_env, spark_cluster, request):
    """On the standalone cluster (executors in other JVMs and Python workers), two queries in one driver, with
    their state in etcd and their kept rows in a directory every executor reaches: on a file sink the driver killed
    between the commits, on ``foreachBatch`` after both (see faults_end_exact)."""
    etcd = request.getfixturevalue("etcd_server")
    faults_end_exact(tmp_path, spark_env, {
        sink: {"sink": sink, "pauses": (pause,), "store": f"etcd://{etcd.address}/op{uuid.uuid4().hex[:12]}",
               "outputs_dir": str(tmp_path / sink / "rows")}
        for sink, pause in (("file", "function@1"), ("foreach", "after-sink@1"))}, master=spark_cluster.master_url)


class Timed:
    """Event-time and processing-time timers, by record: ``{"k", "ts"}`` with ts the input's watermark column."""

    def process(self, input, context):
        assert context.get_message_eventtime() == input["ts"]  # the withWatermark column, in ms
        context.register_timer(input["ts"] + 1000, "event")
        context.register_timer(context.get_current_processing_time() + 1500, "processing")

    def on_timer(self, key, timestamp_ms, context):
        return {"k": key, "at": timestamp_ms}


def test_timers_fire_on_the_inputs_watermark_and_while_the_input_is_idle(spark, tmp_path):
    """The input's withWatermark gives the function's event time: a key's event-time timer fires once a later
    record (another key's) moved the watermark past it; processing-time timers fire with no more input. Each
    fires once."""
    from statekeep.spark import apply_function

    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text('{"k": "a", "ts": "2020-01-01T12:00:00Z"}\n')
    events = (spark.readStream.schema("k string, ts timestamp").json(str(source))
              .withWatermark("ts", "0 seconds"))
    out = apply_function(events, Timed, name="public/default/timed", key="k", store=f"local://{tmp_path}/data",
                         output_schema="k string, at long")
    fired: list[tuple[str, int]] = []
    query = (out.writeStream.foreachBatch(lambda frame, _: fired.extend(map(tuple, frame.collect())))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start())
    try:
        base = int(datetime.datetime(2020, 1, 1, 12, tzinfo=datetime.timezone.utc).timestamp() * 1000)
        assert wait_for(lambda: len(fired) == 1, timeout=60), fired  # the processing-time timer, input idle
        assert fired[0][0] == "a" and fired[0][1] > base + 10**9  # a clock time, not an event time
        (source / "b.json").write_text('{"k": "b", "ts": "2020-01-01T12:00:05Z"}\n')
        assert wait_for(lambda: len(fired) == 3, timeout=60), fired  # a's event timer, b's processing timer
        query.processAllAvailable()
        with FunctionService.open(f"local://{tmp_path}/data") as service:  # running, as functions status says
            assert wait_for(lambda: function_status(service.registry.store, "public", "default", "timed")[
                "processed"] == 2, timeout=30)
            assert function_status(service.registry.store, "public", "default", "timed")["running"]
    finally:
        query.stop()
    # b's event-time timer (base + 6000) waits for a watermark past b's own time (base + 5000): it has not fired
    assert sorted(f for f in fired if f[1] < base + 10**6) == [("a", base + 1000)]
    assert sorted(k for k, _ in fired) == ["a", "a", "b"]


def test_the_kafka_example_writes_parquet_from_a_kafka_shaped_stream(spark, tmp_path):
    """examples/kafka_to_parquet.py's pipeline on a stream of Kafka's shape (no broker here: read from files and
    cast as Kafka's source gives it), to its Parquet sink: one row per click, each user's clicks counted once."""
    from pyspark.sql import functions as F

    sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))
    try:
        import kafka_to_parquet
    finally:
        sys.path.pop(0)
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(kafka_to_parquet)  # as a script, its function is __main__'s: by value
    source = tmp_path / "kafka"
    source.mkdir()
    clicks = [("u1", "home"), ("u2", "cart"), ("u1", "cart")]
    (source / "0.json").write_text("".join(
        json.dumps({"key": u, "value": json.dumps({"page": p}), "timestamp": f"2026-11-28T12:00:0{i}Z"}) + "\n"
        for i, (u, p) in enumerate(clicks)))
    events = (spark.readStream.schema("key string, value string, timestamp timestamp").json(str(source))
              .select(F.col("key").cast("binary").alias("key"), F.col("value").cast("binary").alias("value"),
                      F.lit("clicks").alias("topic"), "timestamp"))
    query = (kafka_to_parquet.pipeline(events, f"local://{tmp_path}/data").writeStream.format("parquet")
             .option("path", str(tmp_path / "out")).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    rows = spark.read.schema(kafka_to_parquet.OUTPUT).parquet(str(tmp_path / "out")).collect()
    assert sorted((r.user, r.page, r.clicks) for r in rows) == [("u1", "cart", 2), ("u1", "home", 1),
                                                                 ("u2", "cart", 1)]
    assert {r.at for r in rows} == {int(datetime.datetime(2026, 11, 28, 12, 0, s, tzinfo=datetime.timezone.utc)
                                        .timestamp() * 1000) for s in range(3)}
