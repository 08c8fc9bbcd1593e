"""Functions on Spark Structured Streaming: exact state across batches, restarts and crashes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import read_status, run_registered
from support.spark import (
    EXAMPLE,
    MIRROR,
    KEYS_PER_FILE,
    backend_store,
    counters,
    expected_counts,
    kill_driver_then_rerun,
    register,
    run_once,
    write_words,
)

@pytest.fixture
def service(tmp_path):
    with FunctionService.open(f"local://{tmp_path / 'data'}") as s:
        yield s


def test_word_count_exact_and_restart_continues_from_checkpoint(spark, service, tmp_path):
    inputs, out = tmp_path / "in", tmp_path / "out"
    for part in EXAMPLE.glob("input/*.jsonl"):
        inputs.mkdir(exist_ok=True)
        shutil.copy(part, inputs / part.name)
    register(service, "wc", inputs, out, userConfig={"inputOptions": {"maxFilesPerTrigger": "1"}})
    query = run_once(service, spark, tmp_path, "wc")
    assert counters(service, "wc") == expected_counts(inputs)
    status = read_status(service.registry.store, "public", "default", "wc")
    assert status["processed"] == 1200 and status["batches"] == 3 and status["running"] is False
    assert query.totals["outputs"] == 1200

    write_words(inputs, "more.jsonl", ["state"] * 7 + ["brand-new"] * 3)
    run_once(service, spark, tmp_path, "wc")  # resumes from the checkpoint: only the new file
    assert counters(service, "wc") == expected_counts(inputs)
    lines = [line for p in out.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(lines) == 1210  # each output record written once


def test_state_readable_as_dataframe_and_changelog_as_stream(spark, service, tmp_path):
    inputs = tmp_path / "in"
    write_words(inputs, "a.jsonl", ["x", "y", "x"])
    register(service, "small", inputs)
    run_once(service, spark, tmp_path, "small")
    store_url = f"local://{tmp_path / 'data'}"
    rows = spark.read.format("statekeep").option("function", "public/default/small").option("store", store_url).load()
    assert {(r.key, r.number, r.kind) for r in rows.collect()} == {("x", 2, "counter"), ("y", 1, "counter")}

    changes = (spark.readStream.format("statekeep-changelog").option("function", "public/default/small")
               .option("store", store_url).load())
    query = changes.writeStream.format("memory").queryName("small_changelog").trigger(availableNow=True).start()
    query.awaitTermination()
    records = spark.sql("select key, number from small_changelog").collect()
    assert sorted((r.key, r.number) for r in records) == [("x", 2), ("y", 1)]


def test_changelog_source_prefix_option(spark, service, tmp_path):
    """The prefix is applied in the reader: only the prefix's records become rows."""
    register(service, "pfx", tmp_path / "in")
    state = service.registry.state_store("public", "default", "pfx")
    state.apply_batch({"a/1": b"x", "b/1": b"y", "a/2": b"z"}, {"a/n": 2, "b/n": 3})
    state.delete("a/2")
    store_url = f"local://{tmp_path / 'data'}"
    changes = (spark.readStream.format("statekeep-changelog").option("function", "public/default/pfx")
               .option("store", store_url).option("prefix", "a/").load())
    query = changes.writeStream.format("memory").queryName("pfx_changelog").trigger(availableNow=True).start()
    query.awaitTermination()
    rows = spark.sql("select key, tombstone from pfx_changelog").collect()
    assert sorted((r.key, r.tombstone) for r in rows) == [("a/1", False), ("a/2", False), ("a/2", True),
                                                          ("a/n", False)]
    state_rows = (spark.read.format("statekeep").option("function", "public/default/pfx")
                  .option("store", store_url).option("prefix", "b/").load().collect())
    assert sorted(r.key for r in state_rows) == ["b/1", "b/n"]


FAILING = b'''
def process(input, context):
    if input["word"] == "boom":
        raise ValueError("cannot count boom")
    context.incr_counter(input["word"], 1)
'''


def test_failing_record_fails_the_query_with_its_position(spark, service, tmp_path):
    inputs = tmp_path / "in"
    write_words(inputs, "a.jsonl", ["ok", "boom", "ok"])
    register(service, "fails", inputs, code=FAILING)
    query = run_registered(service, f"local://{tmp_path / 'data'}", "public", "default", "fails",
                           checkpoint_root=str(tmp_path / "checkpoints"), once=True, spark=spark)
    with pytest.raises(Exception) as failure:
        query.await_termination()
    message = str(failure.value)
    assert "cannot count boom" in message and "record" in message and "batch 0" in message
    assert counters(service, "fails") == {}  # the failed batch wrote nothing


def test_failing_record_skipped_and_counted_when_configured(spark, service, tmp_path):
    inputs = tmp_path / "in"
    write_words(inputs, "a.jsonl", ["ok", "boom", "ok", "boom", "w" * 1000])  # the last: too long a key
    (inputs / "b.jsonl").write_text('{"word": "cut\n')  # malformed JSON
    register(service, "skips", inputs, code=FAILING, userConfig={"skipErrors": True})
    query = run_once(service, spark, tmp_path, "skips")
    assert counters(service, "skips") == {"ok": 2}
    assert query.totals["skipped"] == 4 and query.totals["processed"] == 2


def test_a_running_function_takes_its_trigger_interval_and_the_latency_settings(spark, service, tmp_path):
    """``triggerIntervalMs`` (``--trigger-interval``) is the running query's trigger, the function runs with
    it, and the session spark_session built has its latency settings (Python workers on a unix socket, no
    ``.crc`` files beside its checkpoint's logs)."""
    from statekeep.functions.driver.session import CHECKPOINT_MANAGER, latency_conf

    inputs = tmp_path / "in"
    write_words(inputs, "a.jsonl", ["x", "y", "x"])
    register(service, "paced", inputs, triggerIntervalMs=1500)
    query = run_registered(service, f"local://{tmp_path / 'data'}", "public", "default", "paced",
                           checkpoint_root=str(tmp_path / "checkpoints"), spark=spark)
    try:
        assert query.spec.trigger_interval_ms == 1500
        assert query.query._jsq.streamingQuery().trigger().toString() == "ProcessingTimeTrigger(1500)"
        query.query.processAllAvailable()
        assert counters(service, "paced") == {"x": 2, "y": 1}
        # its logs are written through the FileSystem-based checkpoint manager (no chmod/readlink processes)
        log = query.query._jsq.streamingQuery().offsetLog()
        assert log.fileManager().getClass().getName() == CHECKPOINT_MANAGER[1]
        # and without Hadoop's .crc side files
        logs = [p.name for p in (tmp_path / "checkpoints").rglob("*") if p.is_file()]
        assert "0" in logs and not [name for name in logs if name.endswith(".crc")]
    finally:
        query.stop()
    conf = spark.sparkContext.getConf()
    assert {key: conf.get(key) for key in latency_conf("4.3.0")} == latency_conf("4.3.0")
    assert latency_conf("4.3.0")["spark.python.unix.domain.socket.enabled"] == "true"


def test_stopping_a_function_mid_batch_stops_its_query_quietly(spark, service, tmp_path):
    """A query stopped while its micro-batch's job runs ends as a stop: before, Spark's check of the interrupted
    job's error (a regular expression over the whole Java stack in its message) overflowed the stream thread's
    stack, which died printing a StackOverflowError's thousand-line trace."""
    jvm = spark.sparkContext._jvm
    started = tmp_path / "started"
    code = f"import time\n\ndef process(input, context):\n    open({str(started)!r}, 'w').close()\n    time.sleep(60)\n"
    inputs = tmp_path / "in"
    write_words(inputs, "a.jsonl", ["slow"])
    register(service, "slow", inputs, code=code.encode())
    errors = tmp_path / "jvm-stderr"
    console = jvm.System.err
    jvm.System.setErr(jvm.java.io.PrintStream(jvm.java.io.FileOutputStream(str(errors)), True))
    try:
        query = run_registered(service, f"local://{tmp_path / 'data'}", "public", "default", "slow",
                               checkpoint_root=str(tmp_path / "checkpoints"), spark=spark)
        deadline = time.monotonic() + 120
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), "the micro-batch's task never ran the function"
        query.stop()
    finally:
        jvm.System.setErr(console)
    assert "StackOverflowError" not in errors.read_text()
    assert query.query.exception() is None and not query.query.isActive
    assert counters(service, "slow") == {}  # the stopped batch committed nothing


def test_json_key_is_get_json_object_on_every_valid_document(spark):
    """The key a record gets from its JSON document is ``get_json_object``'s, whichever way it is found: the
    quick match of the usual layouts, or the parser for everything else (escapes, nesting, floats, a field
    after a nested member or named twice, whitespace, a path); an invalid document starting as the usual
    layout takes its key from that start."""
    from pyspark.sql import functions as F

    from statekeep.functions.driver.inputs import with_json_key

    valid = [
        '{"k": "a"}', '{ "k" : "a b" , "x": 1}', '\t{\n"k":\r"a"}', '{"k": ""}', '{"k": "é ✓"}', '{"k": 0}',
        '{"k": -12}', '{"k": 123456789012345678901234567890}', '{"k": -0}', '{"k": 1.5}', '{"k": 1e3}',
        '{"k": 1.0}', '{"k": true}', '{"k": null}', '{"k": {"a": 1}}', '{"k": [1, "x"]}', '{"k": "a\\"b"}',
        '{"k": "a\\u0041"}', '{"a": 1, "b": "x", "c": null, "d": true, "e": -1.5e-3, "k": "y"}',
        '{"a": {"k": "inner"}, "k": "outer"}', '{"a": [1], "k": 7}', '{"a": "x\\"y", "k": "z"}',
        '{"k": 5, "k": "second"}', '{"k": "first", "k": 6}', '{"K": "case", "k": "lower"}', '{"kk": 1, "k": 2}',
        '{"x": 1}', '[{"k": "in a list"}]', '"k"', '{}',
        '{' + ", ".join(f'"f{i}": {i}' for i in range(20)) + ', "k": "after 20"}',
        '{"\\u006b": "escaped name", "k": "plain"}', '{"k":"compact","x":1}', '{"k":"a"}', '{"k": "a" }',
        '{"k":"tab\\tx", "y": 2}', '{"k":"é ✓","x":"y"}', '{"k" : "spaced"}', '{"k":"a\\\\"}',
    ]
    rows = [(doc,) for doc in valid]
    frame = spark.createDataFrame(rows, "value string")
    for field in ("k", "a.b", "f3"):
        keyed, key = with_json_key(frame, field)
        parsed = F.get_json_object("value", f"$.{field}")
        got = keyed.select("value", key.alias("ours"), parsed.alias("parsed")).collect()
        assert [(r.value, r.ours) for r in got] == [(r.value, r.parsed) for r in got]
    invalid = spark.createDataFrame([('{"k": "a", oops',), ('{"k": 3',), ('{"k": "a" "x"}',), ("not json",),
                                     ('{"k":"a",',), ('{"k":"a"x',), ('{"k": "unclosed',)], "value string")
    keyed, key = with_json_key(invalid, "k")
    assert [r[0] for r in keyed.select(key).collect()] == ["a", None, None, None, "a", None, None]


def test_a_function_without_a_key_runs_each_micro_batch_in_one_task(spark, service, tmp_path):
    """Records without a key all belong to one partition: its micro-batch is one task (the other partitions'
    tasks would scan the whole batch to keep nothing); with a key field, every partition runs."""
    inputs = tmp_path / "in"
    write_words(inputs, "a.jsonl", ["x", "y", "x", "z"])
    code = b"def process(input, context):\n    context.incr_counter('seen', 1)\n"
    register(service, "keyless", inputs, code=code, keyField=None)
    register(service, "keyed", inputs)
    for name, partitions, expected in (("keyless", [0], {"seen": 4}), ("keyed", [0, 1], {"x": 2, "y": 1, "z": 1})):
        query = run_once(service, spark, tmp_path, name)
        ran = sorted(row["partition"] for row in query._stats.value["last"])  # the tasks' stats rows of the batch
        assert ran == partitions and counters(service, name) == expected


def test_changed_inputs_are_refused_in_one_line_before_anything_runs(spark, tmp_path, capsys, monkeypatch):
    """Issue 52, as a new user tried it: localrun on input a, then on b, died with ``[STREAM_FAILED] ... Wrong
    basePath b`` and a page of Spark's plan (the checkpoint holds the old source). Now the second localrun, and a
    created function's ``functions update --inputs``, are refused in one line saying why and what to do, and
    change nothing; the function still runs on its own inputs."""
    from support.cli import run as cli

    monkeypatch.chdir(tmp_path)
    for name in ("STATEKEEP_URL", "STATEKEEP_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STATEKEEP_TOPICS_DIR", str(tmp_path / "data" / "topics"))  # localrun sets it: put back after
    (tmp_path / "f.py").write_text("def process(input, context):\n    context.incr_counter(input['word'], 1)\n")
    write_words(tmp_path / "a", "part-0.jsonl", ["x", "y"])
    write_words(tmp_path / "b", "part-0.jsonl", ["z"])
    data = ["--data-dir", str(tmp_path / "data")]
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for name in ("f", "g"):  # f by localrun alone; g created, then run by localrun as a worker would run it
        if name == "g":
            assert cli(capsys, "functions", "create", "--name", "g", "--py", "f.py", "--inputs", a, *data)[0] == 0
        code, _, err = cli(capsys, "functions", "localrun", "--name", name, "--py", "f.py", "--inputs", a,
                           "--once", *data)
        assert code == 0, err
        if name == "f":
            code, out, err = cli(capsys, "functions", "localrun", "--name", "f", "--py", "f.py", "--inputs", b,
                                 "--once", *data)
        else:
            code, out, err = cli(capsys, "functions", "update", "--name", "g", "--inputs", b, *data)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
        assert f"function public/default/{name} has read {a}," in err and f"cannot read {b} instead" in err
        assert "STREAM_FAILED" not in err and "delete and create it" in err
        code, out, _ = cli(capsys, "functions", "get", "--name", name, *data)
        assert json.loads(out)["inputs"] == [a]  # nothing changed
        write_words(tmp_path / "a", f"part-{name}.jsonl", ["x"])
        code, _, err = cli(capsys, "functions", "localrun", "--name", name, "--py", "f.py", "--inputs", a,
                           "--once", *data)
        assert code == 0, err
        code, out, _ = cli(capsys, "functions", "querystate", "--name", name, "--key", "x", *data)
        assert json.loads(out)["numberValue"] == (2 if name == "f" else 3)  # g read part-f too


def test_stats_type_is_the_stats_schema_as_spark_parses_it(spark):
    from statekeep.functions.driver.spark import _stats_type
    from statekeep.functions.executor.task import STATS_SCHEMA

    assert _stats_type() == spark.createDataFrame([], STATS_SCHEMA).schema


def test_latency_settings_ask_for_the_unix_socket_only_where_pyspark_has_it():
    from statekeep.functions.driver.session import latency_conf

    threshold = "spark.sql.sources.parallelPartitionDiscovery.threshold"
    assert "spark.python.unix.domain.socket.enabled" not in latency_conf("4.0.1")  # PySpark before 4.1: TCP only
    assert latency_conf("4.1.0.dev1")["spark.python.unix.domain.socket.enabled"] == "true"
    assert int(latency_conf("4.3.0")[threshold]) > 32  # Spark's default lists a batch of > 32 files by a job
    assert latency_conf("4.0.1")["spark.sql.streaming.pollingDelay"] == "50ms"  # an idle query's polls


def test_the_worker_daemon_preloads_only_modules_that_are_safe_before_a_fork():
    """The daemon imports what a function's task needs before it forks workers (sparkpython.PRELOAD): none of it
    may start a thread or import pyarrow or pandas (which do), since a forked worker has none of its parent's
    threads."""
    from statekeep.functions.driver.sparkpython import PRELOAD

    code = ("import importlib, sys, threading\n"
            f"for name in {PRELOAD!r}:\n    importlib.import_module(name)\n"
            "print(threading.active_count(), sorted({'pyarrow', 'pandas'} & set(sys.modules)))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert found == ["1", "[]"]


def test_spark_python_takes_only_the_installed_pysparks_own_zips_off_the_python_path(tmp_path):
    """statekeep-spark-python runs this interpreter without the zipped copies of the installed PySpark and py4j
    that Spark puts first on a Python process's path (compiled at every import); other entries stay, and so
    do the zips of a Spark installed elsewhere."""
    import pyspark

    from statekeep.functions.driver.sparkpython import spark_python, without_own_zips

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    own = [str(lib / "pyspark.zip"), *map(str, lib.glob("py4j-*.zip"))]
    assert len(own) == 2 and all(map(os.path.exists, own))
    other = [str(tmp_path / "mine"), "/opt/spark/python/lib/pyspark.zip", "/opt/spark/python/lib/py4j-0.10.zip"]
    path = os.pathsep.join([*own, *other])
    assert without_own_zips(path) == os.pathsep.join(other)
    assert without_own_zips(os.pathsep.join(other)) == os.pathsep.join(other)
    assert without_own_zips("") == ""

    launcher = spark_python()
    assert launcher != sys.executable and os.path.basename(launcher) == "statekeep-spark-python"
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "probe.py").write_text("import sys, pyspark, py4j\nprint(pyspark.__file__, py4j.__file__)\n")
    ran = subprocess.run([launcher, "-m", "probe"], env={**os.environ, "PYTHONPATH": path}, capture_output=True,
                         text=True, check=True)
    assert ran.stdout.split() == [pyspark.__file__, __import__("py4j").__file__]  # from the package, not a zip


def test_spark_starts_its_python_workers_with_spark_python(spark):
    """The session's Python processes import PySpark from the installed package (statekeep-spark-python)."""
    import pyspark

    where = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("pyspark").__file__).collect()
    assert where == [pyspark.__file__]


def test_bad_function_file_refused_before_spark(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def process(input, context)\n    return 1\n")
    result = subprocess.run(
        [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", "bad", "--py", str(bad),
         "--inputs", str(tmp_path), "--once", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "bad.py:1" in result.stderr and "syntax error" in result.stderr
    assert "Traceback" not in result.stderr and "py4j" not in result.stderr


def test_a_failing_record_is_one_line_naming_spark_s_log(tmp_path, spark_env):
    """A record the function cannot take ends localrun with one line (the record, the error, where Spark's log
    is), not Spark's page of task failures and Python tracebacks (about 600 lines before): those are in the log
    file the line names."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "p.jsonl").write_text('{"word": "a"}\nnot json\n')
    (tmp_path / "f.py").write_text("def process(input, context):\n    return input\n")
    result = subprocess.run(
        [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", "e", "--py", str(tmp_path / "f.py"),
         "--inputs", str(tmp_path / "in"), "--key-field", "word", "--once", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=300, env={**os.environ, **spark_env})
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert "failed on batch 0" in last and "JSONDecodeError" in last, result.stderr[-2000:]
    log = tmp_path / "data" / "logs" / "public.default.e.spark.log"
    assert last.endswith(f"(Spark's log: {log})") and "JSONDecodeError" in log.read_text()
    assert result.stderr.splitlines() == [last]  # the JVM's start is in the log too


# once per commit path: embedded here; staged metadata: tests/test_functions_batch_spark.py's (the record path is
# one for per-record and process_batch functions); partition-owned: tests/test_partitioned_spark.py's
@pytest.mark.parametrize("backend", ["local"])
def test_sigkill_of_the_driver_then_rerun_is_exact(backend, request, tmp_path, spark_env):
    """A localrun process is killed at a random moment mid-run; a rerun from the checkpoint
    ends with every counter equal to its number of input records and each output once."""
    url, words, out = kill_driver_then_rerun(backend, request, tmp_path, EXAMPLE / "wordcount.py", spark_env)
    with FunctionService.open(url) as service:
        assert counters(service, "crash") == Counter(words)
    lines = [line for p in out.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(lines) == len(words)


def _python_task_workers(pid: int) -> list[int]:
    """Pids of the forked Python workers (children of a ``pyspark.daemon pyspark.worker``) below ``pid``."""
    parent_of, command = {}, {}
    for entry in Path("/proc").iterdir():
        try:
            parent_of[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (ValueError, OSError, IndexError):
            continue

    def below(p: int) -> bool:
        while p in parent_of and p > 1:
            p = parent_of[p]
            if p == pid:
                return True
        return False

    daemons = {p for p, cmd in command.items() if "pyspark.daemon pyspark.worker" in cmd}
    return [p for p in daemons if parent_of.get(p) in daemons and below(p)]


SLOW_COUNT = b'''
import time

def process(input, context):
    time.sleep(0.001)  # keeps Python workers busy long enough to be killed mid-partition
    context.incr_counter(input["word"], 1)
    return input
'''


@pytest.mark.parametrize("backend", ["local", "etcd"])  # embedded; staged (etcd: the most transactions)
def test_sigkill_of_python_workers_mid_run_is_exact(backend, request, tmp_path, spark_env):
    """Python workers are killed with SIGKILL while the driver lives: Spark retries the tasks,
    and every counter still equals its number of input records, each output record once."""
    inputs, out = tmp_path / "in", tmp_path / "out"
    url, where = backend_store(backend, request, tmp_path)
    per = max(500, KEYS_PER_FILE[backend])
    words = [f"w{i % (per if backend != 'local' else 53)}" for i in range(6 * per)]
    for part in range(6):
        write_words(inputs, f"part-{part}.jsonl", words[part * per:(part + 1) * per])
    py = tmp_path / "slow.py"
    py.write_bytes(SLOW_COUNT)
    command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", "killed",
               "--py", str(py), "--inputs", str(inputs), "--key-field", "word",
               "--parallelism", "2", "--output", str(out), *where, "--once",
               "--user-config", json.dumps({"inputOptions": {"maxFilesPerTrigger": "1"}})]
    env = {**os.environ, **spark_env}
    # Spark's log: in the data directory (--data-dir, else ./.statekeep-data: the run's own directory here)
    log = (tmp_path / "data" if backend == "local" else tmp_path / ".statekeep-data") / "logs" / \
        "public.default.killed.spark.log"
    with open(tmp_path / "localrun.log", "w") as stderr:
        run = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp_path)
    killed = 0
    try:  # kill until a task died of it (a worker killed between tasks is replaced without a failure)
        while run.poll() is None and killed < 10 and (
                not log.exists() or "Python worker exited unexpectedly" not in log.read_text()):
            workers = _python_task_workers(run.pid)
            if workers:
                time.sleep(0.3)
                for pid in workers:
                    try:
                        os.kill(pid, signal.SIGKILL)
                        killed += 1
                    except ProcessLookupError:
                        pass
                time.sleep(2)
            time.sleep(0.1)
        run.wait(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    assert killed >= 1, "no Python worker was ever seen"
    assert run.returncode == 0, (tmp_path / "localrun.log").read_text()[-2000:]
    assert "Python worker exited unexpectedly" in log.read_text(), log.read_text()[-3000:]  # tasks died, were retried
    with FunctionService.open(url) as service:
        assert counters(service, "killed") == Counter(words)
    lines = [line for p in out.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(lines) == len(words)


def test_function_reads_another_functions_compacted_changelog(spark, service, tmp_path):
    from statekeep.changelog import compact

    inputs = tmp_path / "in"
    write_words(inputs, "a.jsonl", ["x", "y", "x", "z", "x", "y"])
    register(service, "counts", inputs)
    run_once(service, spark, tmp_path, "counts")
    counts = service.registry.state_store("public", "default", "counts")
    counts.delete("z")
    result = compact(counts, tombstone_retention_s=3600)  # leaves gaps: superseded records are gone
    assert result.removed > 0
    service.registry.create({"tenant": "public", "namespace": "default", "name": "mirror", "keyField": "key",
                             "inputs": ["statekeep://public/default/counts"], "parallelism": 2}, MIRROR)
    run_once(service, spark, tmp_path, "mirror")
    mirror = service.registry.state_store("public", "default", "mirror")
    assert {k: int(v) for k, v in mirror.scan()} == counters(service, "counts") == {"x": 3, "y": 2}


TTL_COUNT = b'''
def process(input, context):
    context.value_state("seen", int, ttl=3600).update(1)
    context.incr_counter(input["word"], 1)
'''
PLAIN_COUNT = b'''
def process(input, context):
    context.incr_counter(input["word"], 1)
'''


@pytest.mark.parametrize("first, then", [(TTL_COUNT, PLAIN_COUNT), (PLAIN_COUNT, TTL_COUNT)],
                         ids=["time-removed", "time-added"])
def test_an_accepted_update_resumes_its_query_exactly_once(spark, service, tmp_path, first, then):
    """A function's query keeps the sources its checkpoint has, whatever its updated code uses: a typed value
    with a TTL (time: a clock source in the query) removed by an update, or added by one, and the next run resumes
    from the checkpoint and counts each input once (before: Spark refused the checkpoint's two sources for one)."""
    inputs = tmp_path / "in"
    write_words(inputs, "a.jsonl", ["x", "y", "x"])
    register(service, "evolve", inputs, code=first)
    run_once(service, spark, tmp_path, "evolve")
    service.registry.update("public", "default", "evolve", code=then)
    write_words(inputs, "b.jsonl", ["x", "z"])
    query = run_once(service, spark, tmp_path, "evolve")
    assert query.status()["error"] is None and query.totals["processed"] == 2
    counted = {k: n for k, n in counters(service, "evolve").items() if not k.startswith("\x00")}  # not internal
    assert counted == {"x": 3, "y": 1, "z": 1}


ROWS = '''
def process(row, context):
    context.incr_counter(row["word"], row["n"])
    return {"word": row["word"], "n": row["n"], "type": type(row["n"]).__name__,
            "from": context.get_current_message_topic_name().rsplit("/", 1)[-1]}
'''


def test_csv_and_parquet_rows_arrive_as_rows_with_the_readers_types(spark, service, tmp_path):
    """CSV and Parquet inputs through the runner: each row a dict of its columns as Spark's reader typed them (no
    JSON between the JVM and the function), keyed by its key field, naming the input it came from; a trigger of
    the same function takes a row as a JSON object, and refuses anything else in one line."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from statekeep.errors import InvalidArgumentError
    from statekeep.functions.admin.lifecycle import trigger

    csv_dir, parquet_dir, out = tmp_path / "csv", tmp_path / "parquet", tmp_path / "out"
    csv_dir.mkdir()
    parquet_dir.mkdir()
    (csv_dir / "a.csv").write_text("word,n\nstate,2\nkeep,5\nstate,1\n")
    pq.write_table(pa.table({"word": ["keep", "rows"], "n": pa.array([10, 7], pa.int64())}), parquet_dir / "b.parquet")
    for name, inputs in (("fromcsv", csv_dir), ("fromparquet", parquet_dir)):
        options = {"inputOptions": {"inferSchema": "true"}} if name == "fromcsv" else {}  # Spark's own option
        register(service, name, inputs, out / name, code=ROWS.encode(), inputFormat=name.removeprefix("from"),
                 userConfig=options)
        run_once(service, spark, tmp_path, name)
    rows = {name: sorted((r["word"], r["n"], r["type"], r["from"]) for p in (out / name).glob("*.jsonl")
                         for r in map(json.loads, p.read_text().splitlines())) for name in ("fromcsv", "fromparquet")}
    assert rows == {"fromcsv": [("keep", 5, "int", "csv"), ("state", 1, "int", "csv"), ("state", 2, "int", "csv")],
                    "fromparquet": [("keep", 10, "int", "parquet"), ("rows", 7, "int", "parquet")]}
    assert counters(service, "fromcsv") == {"state": 3, "keep": 5}
    assert counters(service, "fromparquet") == {"keep": 10, "rows": 7}
    assert trigger(service.registry, "public", "default", "fromcsv", '{"word": "state", "n": 4}')["type"] == "int"
    assert counters(service, "fromcsv") == {"state": 7, "keep": 5}
    for bad in ("state,4", "[1, 2]"):
        with pytest.raises(InvalidArgumentError, match="JSON object of its row's columns"):
            trigger(service.registry, "public", "default", "fromcsv", bad)
    assert counters(service, "fromcsv") == {"state": 7, "keep": 5}
