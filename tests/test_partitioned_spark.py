"""Partition-owned state (``--state-dir``) on Spark: records routed to the partition owning their key
group, exact and once across restarts, SIGKILLs and rescaling, REST writes during a run ordered with
the function's batches. Without Spark: test_partitioned_state.py; on a cluster and S3:
test_partitioned_cluster.py."""

from __future__ import annotations

import json
import threading
from collections import Counter

import httpx
import pytest

from statekeep.functions.config.service import FunctionService
from statekeep.state.partitioned import state_storage
from statekeep.state.keygroups import spark_hash_int
from statekeep.testing import wait_for
from support.server_process import create_function
from support.spark import (EXAMPLE, MIRROR, WORDCOUNT, counters, expected_counts, kill_driver_then_rerun, register,
                           run_once, write_word_files, write_words)


def test_routing_matches_spark(spark):
    """The Python side computes key groups and routes as the Spark plan does."""
    import zlib

    from pyspark.sql import functions as F

    values = list(range(-300, 300)) + [2**31 - 1, -(2**31)]
    rows = spark.createDataFrame([(v,) for v in values], "v int").select("v", F.hash("v").alias("h")).collect()
    assert {r.v: r.h for r in rows} == {v: spark_hash_int(v) for v in values}
    words = ["", "a", "spark", "ünïcödé", "x" * 300]
    rows = spark.createDataFrame([(w,) for w in words], "w string").select(
        "w", F.crc32(F.col("w").cast("binary")).alias("c")).collect()
    assert {r.w: r.c for r in rows} == {w: zlib.crc32(w.encode()) for w in words}


@pytest.fixture
def service(tmp_path):
    with FunctionService.open(f"local://{tmp_path / 'data'}") as s:
        yield s


def test_word_count_exact_then_rescaled_2_to_3(spark, service, tmp_path):
    inputs, out, shared = tmp_path / "in", tmp_path / "out", tmp_path / "shared"
    for part in sorted(EXAMPLE.glob("input/*.jsonl")):
        write_words(inputs, part.name, [json.loads(line)["word"] for line in part.read_text().splitlines()])
    register(service, "wc", inputs, out, stateStorage=state_storage(str(shared)),
             userConfig={"inputOptions": {"maxFilesPerTrigger": "1"}})
    query = run_once(service, spark, tmp_path, "wc")
    assert counters(service, "wc") == expected_counts(inputs)
    assert sorted(query.totals["instances"]) == ["0", "1"]  # both partitions ran
    state = service.registry.state_store("public", "default", "wc")
    assert state.layout().parallelism == 2

    service.registry.update("public", "default", "wc", {"parallelism": 3})
    write_words(inputs, "more.jsonl", ["state"] * 7 + ["brand-new"] * 3 + [f"n{i}" for i in range(50)])
    run_once(service, spark, tmp_path, "wc")
    assert counters(service, "wc") == expected_counts(inputs)
    layout = state.layout(refresh=True)
    assert (layout.parallelism, layout.generation) == (3, 1)
    lines = [line for p in out.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(lines) == sum(expected_counts(inputs).values())  # each output once


COUNT_BY_MESSAGE_KEY = b'''
def process(input, context):
    key = context.get_message_key()
    return {"key": key, "n": context.incr_counter(key), "instance": context.get_instance_id()}
'''

TIMER_BY_MESSAGE_KEY = COUNT_BY_MESSAGE_KEY.replace(b"    return", b"""\
    context.register_timer(context.get_current_processing_time(), "processing")
    return""") + b'''
def on_timer(key, ts, context):
    return {"fired": key, "instance": context.get_instance_id()}
'''


@pytest.mark.parametrize("state", ["partition-owned", "time"])
def test_a_topic_input_without_a_key_field_runs_keyed_by_its_messages_keys(state, spark, service, tmp_path,
                                                                           monkeypatch):
    """Issue 52: the runner took a topic's messages as keyed (each message its own key) while the routing of
    partition-owned and time state took a function without a key field as unkeyed, so both ran every record in one
    partition of a function of parallelism 2. One rule now: each key's messages reach the partition owning its key
    group, the function's partitions all run, and a key's timer fires where its state is."""
    from statekeep.functions.messaging import topics
    from statekeep.functions.messaging.messages import Message
    from statekeep.state.keygroups import key_group, owner

    keys = [f"k{i}" for i in range(20)]
    monkeypatch.setenv("STATEKEEP_TOPICS_DIR", str(tmp_path / "data" / "topics"))
    topics.write(str(tmp_path / "data" / "topics"), "persistent://public/default/keyed",
                 [Message(f"m{n}", key).to_json() for n in range(3) for key in keys])
    extra = ({"stateStorage": state_storage(str(tmp_path / "shared"))} if state == "partition-owned" else {})
    code = COUNT_BY_MESSAGE_KEY if state == "partition-owned" else TIMER_BY_MESSAGE_KEY
    register(service, "keyed", "persistent://public/default/keyed", tmp_path / "out", code=code, keyField=None, **extra)
    query = run_once(service, spark, tmp_path, "keyed")
    assert sorted(query.totals["instances"]) == ["0", "1"]  # both partitions ran
    out = [json.loads(line) for p in (tmp_path / "out").glob("*.jsonl") for line in p.read_text().splitlines()]
    where = {key: owner(key_group(key, 128), 2, 128) for key in keys}
    counted = [r for r in out if "n" in r]
    assert sorted((r["key"], r["n"]) for r in counted) == sorted((key, n) for key in keys for n in (1, 2, 3))
    assert all(r["instance"] == where[r["key"]] for r in counted)
    if state == "time":  # one timer per key (registered three times at one time: idempotent), fired at its owner
        assert sorted((r["fired"], r["instance"]) for r in out if "fired" in r) == sorted(where.items())


@pytest.mark.parametrize("backend", ["local"])  # coordination on ZooKeeper: the ensemble test below
def test_sigkill_of_the_driver_then_rerun_is_exact(backend, request, tmp_path, spark_env, spark):
    """A localrun with partition-owned state is SIGKILLed after two micro-batches; the rerun (on the shared
    session: localrun's own rerun is tests/test_functions_spark.py's) ends exact, its state in the blobs."""
    shared = tmp_path / "shared"
    url, words, out = kill_driver_then_rerun(backend, request, tmp_path, EXAMPLE / "wordcount.py",
                                             spark_env, ["--state-dir", str(shared)], spark=spark)
    with FunctionService.open(url) as service:
        assert counters(service, "crash") == Counter(words)
        assert service.registry.get("public", "default", "crash").stateStorage["provider"] == "partitioned"
    lines = [line for p in out.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(lines) == len(words)
    assert list(shared.rglob("*.blob"))  # the state's truth is there


SLOW_COUNT = b'''
import time

def process(input, context):
    time.sleep(0.002)
    context.incr_counter(input["word"], 1)
'''


def test_rest_writes_during_a_run_are_ordered_with_its_batches(server_process, tmp_path):
    """A server with --state-dir runs a function; meanwhile REST writes keys of the same partitions:
    no write is lost or overwritten by a batch, and the function's counts stay exact."""
    inputs, shared = tmp_path / "in", tmp_path / "shared"
    words = [f"w{i % 40}" for i in range(3000)]
    write_word_files(inputs, words)
    server = server_process(tmp_path / "data", worker=True, extra=["--state-dir", str(shared)])
    stop, written, errors = threading.Event(), Counter(), []
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            response = create_function(client, "public", "default", "slow", SLOW_COUNT, inputs=[str(inputs)],
                                       keyField="word", parallelism=2,
                                       userConfig={"inputOptions": {"maxFilesPerTrigger": "1"}})
            assert response.status_code == 200, response.text
            config = client.get("/admin/v3/functions/public/default/slow").json()
            assert config["stateStorage"]["provider"] == "partitioned"

            def count(key: str):
                r = client.get(f"/admin/v3/functions/public/default/slow/state/{key}")
                return r.json().get("numberValue") if r.status_code == 200 else None

            def writer():
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    i = 0
                    while not stop.is_set():
                        key = f"rest{i % 8}"
                        written[key] += 1
                        r = own.post(f"/admin/v3/functions/public/default/slow/state/{key}",
                                     json={"key": key, "numberValue": written[key]})
                        if r.status_code != 200:
                            errors.append(r.text)
                        i += 1

            thread = threading.Thread(target=writer)
            assert wait_for(lambda: count("w0") is not None, timeout=240), server.log.name
            thread.start()
            assert wait_for(lambda: count("w0") == 75, timeout=300), server.log.name
            stop.set()
            thread.join()
            assert errors == []
            assert {f"w{i}": count(f"w{i}") for i in range(40)} == Counter(words)
            assert {k: count(k) for k in written} == dict(written)  # every REST write's last value kept
    finally:
        stop.set()
        server.stop()


def _localrun_ens(url: str, py, inputs, out, tmp_path, spark_env: dict[str, str]):
    """``localrun --once`` of function ``ens`` (file ``py``) with state under ``tmp_path/shared`` and its store at
    ``url``, one input file per micro-batch, in a process group of its own; returns (process, its log file)."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", "ens", "--py", str(py),
               "--inputs", str(inputs), "--key-field", "word", "--parallelism", "2", "--output", str(out),
               "--store", url, "--checkpoint-dir", str(tmp_path / "checkpoints"), "--state-dir",
               str(tmp_path / "shared"), "--once", "--user-config",
               json.dumps({"inputOptions": {"maxFilesPerTrigger": "1"}})]
    log = tmp_path / "localrun.log"
    with open(log, "w") as stderr:
        run = subprocess.Popen(command, env={**os.environ, **spark_env}, stdout=subprocess.DEVNULL, stderr=stderr,
                               start_new_session=True)
    return run, log


def test_zookeeper_ensemble_loses_its_leader_then_all_servers_mid_run(zk_ensemble, tmp_path, spark_env):
    """Coordinated by a 3-node ZooKeeper ensemble, state under a shared directory: the ensemble's leader is
    SIGKILLed mid-run, later all three servers are down for 8 s; the run finishes without failing, exact."""
    import os

    from statekeep.functions.driver.spark import read_status

    url = zk_ensemble.url(f"/ens{os.urandom(4).hex()}") + "?timeout=30&session_timeout=20"
    inputs, out = tmp_path / "in", tmp_path / "out"
    words = [f"w{i % 31}" for i in range(4000)]
    write_word_files(inputs, words)
    py = tmp_path / "slow.py"
    py.write_bytes(SLOW_COUNT)
    run, log = _localrun_ens(url, py, inputs, out, tmp_path, spark_env)
    try:
        with FunctionService.open(url) as service:
            def batches() -> int:
                return (read_status(service.registry.store, "public", "default", "ens") or {}).get("batches", 0)

            assert wait_for(lambda: batches() >= 1 or run.poll() is not None, timeout=300), log.read_text()[-3000:]
            zk_ensemble.kill(zk_ensemble.leader())
            assert wait_for(lambda: batches() >= 3 or run.poll() is not None, timeout=300), log.read_text()[-3000:]
        killed_all = run.poll() is None
        zk_ensemble.stop_all_for(8)
        assert run.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
        zk_ensemble.start_all()
    assert killed_all, "the run ended before the outage"
    with FunctionService.open(url) as service:
        assert counters(service, "ens") == Counter(words)
    lines = [line for p in out.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert len(lines) == 0  # SLOW_COUNT returns nothing: no output files with records


def test_etcd_cluster_loses_its_leader_mid_run(etcd_cluster, tmp_path, spark_env):
    """Coordinated by a 3-node etcd cluster, state under a shared directory: the cluster's leader is SIGKILLed
    after a micro-batch was committed; the run finishes without failing, each record counted once and each
    output written once (issue 31, defect 6: the driver's status write failed the query)."""
    import os

    from statekeep.functions.driver.spark import read_status
    from statekeep.retry import OUTAGE

    url = etcd_cluster.url(f"/ens{os.urandom(4).hex()}")
    inputs, out = tmp_path / "in", tmp_path / "out"
    words = [f"w{i % 37}" for i in range(3000)]
    write_word_files(inputs, words, per_file=250)  # 12 micro-batches
    py = tmp_path / "wordcount.py"
    py.write_bytes(WORDCOUNT)
    run, log = _localrun_ens(url, py, inputs, out, tmp_path, spark_env)
    killed = None
    try:
        with FunctionService.open(url) as service:
            def batches() -> int:
                # the test's own reads ride out the leader change as the driver's writes do
                status = OUTAGE.repeat(lambda: read_status(service.registry.store, "public", "default", "ens"))
                return (status or {}).get("batches", 0)

            assert wait_for(lambda: batches() >= 1 or run.poll() is not None, timeout=300), log.read_text()[-3000:]
            killed, before = etcd_cluster.leader(), (batches(), run.poll())
            etcd_cluster.kill(killed)
            assert run.wait(timeout=600) == 0, log.read_text()[-3000:]
            after = batches()
    finally:
        if run.poll() is None:
            run.kill()
        if killed is not None:
            etcd_cluster.restart(killed)  # leave the shared cluster whole for the next test
    assert before[1] is None and before[0] < after, (before, after)  # killed mid-run, batches committed after
    with FunctionService.open(url) as service:
        assert counters(service, "ens") == Counter(words)
    seen: dict[str, list[int]] = {}
    for path in out.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            output = json.loads(line)
            seen.setdefault(output["word"], []).append(output["count"])
    # each output once: a word seen n times was output with counts 1..n, each once
    assert {w: sorted(c) for w, c in seen.items()} == {w: list(range(1, n + 1)) for w, n in Counter(words).items()}


def test_changelog_of_partition_owned_state_is_a_stream_and_an_input(spark, service, tmp_path):
    """Moving to --state-dir keeps the changelog readable (issue 31): the statekeep-changelog source
    reads every partition's records, and a statekeep://T/N/F input mirrors the function, exactly."""
    inputs, shared = tmp_path / "in", tmp_path / "shared"
    write_words(inputs, "a.jsonl", ["x", "y", "x", "z", "x", "y"] + [f"n{i}" for i in range(20)])
    register(service, "counts", inputs, stateStorage=state_storage(str(shared)))
    run_once(service, spark, tmp_path, "counts")
    counts = service.registry.state_store("public", "default", "counts")
    assert counts.changelog_partitions() == 2
    store_url = f"local://{tmp_path / 'data'}"
    changes = (spark.readStream.format("statekeep-changelog").option("function", "public/default/counts")
               .option("store", store_url).load())
    query = changes.writeStream.format("memory").queryName("counts_changelog").trigger(availableNow=True).start()
    query.awaitTermination()
    rows = spark.sql("select key, number from counts_changelog").collect()
    assert {r.key: r.number for r in rows} == counters(service, "counts")  # one record per key: one batch
    assert not [r for r in rows if r.key.startswith("\x00")]

    service.registry.create({"tenant": "public", "namespace": "default", "name": "mirror", "keyField": "key",
                             "inputs": ["statekeep://public/default/counts"], "parallelism": 2}, MIRROR)
    run_once(service, spark, tmp_path, "mirror")
    mirror = service.registry.state_store("public", "default", "mirror")
    assert {k: int(v) for k, v in mirror.scan()} == counters(service, "counts")
