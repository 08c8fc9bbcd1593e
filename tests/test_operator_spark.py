"""The DataFrame operator (``statekeep.spark.apply_function``) on local Spark: any DataFrame in, the function's
rows out, state exactly-once and kept rows given again on a replay; the driver SIGKILLed between the state commit
and the sink's, and after both, and a Python worker SIGKILLed, each ending exact on a file sink and on
``foreachBatch``."""

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


def run_query(tmp_path: Path, spark_env: dict[str, str], sink: str, pause: str, *,
              master: str = "local[2,4]", store: str | None = None, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    command = [sys.executable, str(QUERY), "--store", store or f"local://{tmp_path}/data",
               "--input", str(tmp_path / "in"), "--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"),
               "--flags", str(tmp_path), "--sink", sink, "--pause", pause, "--master", master, *extra]
    log = open(tmp_path / "driver.log", "a")
    return subprocess.Popen(command, env={**os.environ, **spark_env}, stdout=log, stderr=log,
                            start_new_session=True)  # its own process group: the JVM and workers die with it


def finish(run: subprocess.Popen, tmp_path: Path) -> list[tuple[str, int]]:
    assert run.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()[-4000:]
    return sorted((r["word"], r["n"]) for r in json.loads((tmp_path / "out.result.json").read_text()))


def state_counts(url: str) -> Counter:
    with FunctionService.open(url) as service:
        state = service.registry.state_store("public", "default", "opcount")
        return Counter({e.key: e.counter for e in state.scan_entries()})


def fault_ends_exact(tmp_path: Path, spark_env: dict[str, str], sink: str, pauses: tuple[str, ...], *,
                     master: str = "local[2,4]", store: str | None = None, extra: tuple[str, ...] = ()) -> None:
    """Arm the faults ``pauses`` (``WHERE@BATCH``, see support/operator_query.py) and run the query; at each fault
    but a killed Python worker (which Spark retries), SIGKILL the driver where the query stopped (for ``function``:
    once partition 0 of the batch committed its state) and run it again from its checkpoint. At the end every
    input is counted once, every output row is in the sink once, and every fault happened."""
    write_word_files(tmp_path / "in", WORDS, per_file=PER_FILE)
    url = store or f"local://{tmp_path}/data"
    for pause in pauses:
        (tmp_path / f"armed-{pause.split('@')[0]}").touch()
    run = run_query(tmp_path, spark_env, sink, ",".join(pauses), master=master, store=url, extra=extra)
    for where, batch in (pause.split("@") for pause in pauses):
        if where == "kill-worker":  # Spark retries the task; the run goes on by itself
            continue
        assert wait_for(lambda: (tmp_path / f"paused-{where}").exists() or run.poll() is not None, timeout=180)
        assert run.poll() is None, (tmp_path / "driver.log").read_text()[-4000:]
        if where == "function":  # partition 0 of the batch committed; partition 1 is stopped in the function
            with FunctionService.open(url) as service:
                state = service.registry.state_store("public", "default", "opcount")
                assert wait_for(lambda: state.task(int(batch), 0, 2).has_marker(f"{batch}-0"), timeout=60)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        run = run_query(tmp_path, spark_env, sink, ",".join(pauses), master=master, store=url, extra=extra)
    rows = finish(run, tmp_path)
    assert not list(tmp_path.glob("armed-*")), "a fault never happened"
    assert rows == expected_rows(WORDS)
    assert state_counts(url) == Counter(WORDS)
    if "kill-worker@3" in pauses:  # the last run's status, as functions status reads it: the retried batch 3 once
        with FunctionService.open(url) as service:
            status = function_status(service.registry.store, "public", "default", "opcount")
        assert (status["running"], status["processed"], status["error"]) == (False, PER_FILE, None)


def test_faults_end_exact_with_foreach_batch(tmp_path, spark_env):
    """One query through three faults: the driver SIGKILLed in micro-batch 1 after the state commit and before
    ``foreachBatch`` wrote, again in batch 2 after it wrote; then a Python worker SIGKILLed in batch 3."""
    fault_ends_exact(tmp_path, spark_env, "foreach", ("before-sink@1", "after-sink@2", "kill-worker@3"))


def test_faults_end_exact_with_a_file_sink_and_partition_owned_state(tmp_path, spark_env):
    """The driver SIGKILLed after one partition of micro-batch 1 committed its state and before the file sink's
    commit, the state partition-owned (``state_dir``): the replay gives the kept rows of the committed partition
    (see fault_ends_exact). The file sink on a per-key store is the cluster's test (etcd)."""
    fault_ends_exact(tmp_path, spark_env, "file", ("function@1",), extra=("--state-dir", str(tmp_path / "shared")))


@pytest.mark.parametrize("sink,pauses", [("file", ("function@1",)), ("foreach", ("after-sink@1",))])
def test_faults_on_the_cluster_end_exact(sink, pauses, tmp_path, spark_env, spark_cluster, request):
    """On the standalone cluster (executors in other JVMs and Python workers), with the state in etcd and the
    kept rows in a directory every executor reaches: the driver killed between the commits, and after both."""
    etcd = request.getfixturevalue("etcd_server")
    fault_ends_exact(tmp_path, spark_env, sink, pauses, master=spark_cluster.master_url,
                     store=f"etcd://{etcd.address}/op{uuid.uuid4().hex[:12]}",
                     extra=("--outputs-dir", str(tmp_path / "rows")))


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
