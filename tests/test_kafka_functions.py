"""Functions on a real Kafka broker: Kafka topics as inputs, outputs, publish, log and dead-letter targets, exactly
once into Kafka through transactions tied to the state commit, and bad input refused with nothing written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from statekeep.errors import InvalidArgumentError, NotFoundError, StoreUnavailableError
from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import run_registered
from statekeep.functions.messaging import kafka as sk_kafka
from statekeep.functions.messaging import kafkatxn
from statekeep.functions.messaging.sink import kept_sink
from statekeep.testing import wait_for

SUPPORT = Path(__file__).parent / "support"


def topic(server, partitions: int = 2, **config) -> str:
    """A new topic on ``server`` (the kafka fixture), as statekeep names it."""
    name = f"t{uuid.uuid4().hex[:10]}"
    server.create_topic(name, partitions=partitions, config=config or None)
    return f"kafka://{server.address}/{name}"


def produce(name: str, messages: list[dict]) -> None:
    sk_kafka.produce(name, messages)


def values(name: str) -> list[str]:
    """What a read_committed consumer reads of the topic, every partition."""
    return [m["value"] for m in sk_kafka.consume(name)]


def run(service, url, tmp_path, name, spark):
    query = run_registered(service, url, "public", "default", name, checkpoint_root=str(tmp_path / "ck" / name),
                           once=True, spark=spark)
    try:
        query.await_termination()
    except Exception:  # noqa: BLE001 - a failed query: its status says why
        pass
    return query.status()


ECHO = b'''
def process(value, context):
    n = context.incr_counter(context.get_message_key(), 1)
    context.publish(context.get_user_config_value("side"), f"side-{value}",
                    properties={"from": context.get_current_message_topic_name()})
    if value == "log-me":
        context.get_logger().info("logged %s", value)
    return {"value": value, "n": n, "props": context.get_message_properties(),
            "time": context.get_message_eventtime(), "id": context.get_message_id()}
'''


def test_kafka_in_and_out_with_keys_headers_times_publish_and_log(kafka, spark, tmp_path):
    """Kafka in, Kafka out through the runner: each message's key, headers and timestamp reach the function as a
    Pulsar message's and go on with its output; ``publish`` and the log topic go to Kafka too; a second run
    resumes from its checkpoint and writes nothing twice."""
    source, out, side, logs = topic(kafka), topic(kafka), topic(kafka, 1), topic(kafka, 1)
    # recent times: the broker's retention (7 days) deletes records whose timestamps are older
    start = int(time.time() * 1000)
    produce(source, [{"key": f"k{i % 3}", "value": "log-me" if i == 4 else f"v{i}", "properties": {"h": str(i)},
                      "eventTime": start + i} for i in range(12)])
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "echo", "inputs": [source],
                                 "output": out, "logTopic": logs, "parallelism": 2, "userConfig": {"side": side}},
                                ECHO)
        status = run(service, url, tmp_path, "echo", spark)
        assert (status["error"], status["processed"]) == (None, 12)
        got = list(sk_kafka.consume(out))
        assert len(got) == 12
        for message in got:
            result = json.loads(message["value"])
            i = int(result["props"]["h"])
            assert message["key"] == f"k{i % 3}"  # the input's key, properties and event time go on with the output
            assert message["properties"] == {"h": str(i)} and message["eventTime"] == start + i
            assert result["time"] == start + i
        assert Counter(json.loads(m["value"])["n"] for m in got) == Counter({1: 3, 2: 3, 3: 3, 4: 3})
        # a message's id is where it is in Kafka
        assert {json.loads(m["value"])["id"] for m in got} == {f"{source}:{m['partition']}:{m['offset']}"
                                                               for m in sk_kafka.consume(source)}
        published = list(sk_kafka.consume(side))
        assert sorted(m["value"] for m in published) == sorted(f"side-{'log-me' if i == 4 else f'v{i}'}"
                                                                for i in range(12))
        assert {m["properties"]["from"] for m in published} == {source}
        assert [m["value"] for m in sk_kafka.consume(logs)] == ["logged log-me"]
        assert run(service, url, tmp_path, "echo", spark)["processed"] == 0  # resumed: nothing again
        assert len(values(out)) == 12
        counters = {e.key: e.counter for e in service.registry.state_store("public", "default", "echo").scan_entries()}
        assert counters == {"k0": 4, "k1": 4, "k2": 4}


def test_a_records_table_is_the_same_from_wrapped_results_and_message_records_and_needs_no_pandas():
    wrapped = sk_kafka.records_table([("o", ("v", "k", {"p": "q"}, 5)), ("o", (b"\xff", None, None, None)),
                                      ("d", 7)])
    recorded = sk_kafka.records_table([("o", {"key": "k", "value": "v", "properties": {"p": "q"}, "eventTime": 5}),
                                       ("o", {"valueBase64": "/w=="}), ("d", {"value": 7})])
    assert wrapped.equals(recorded)
    assert wrapped.to_pylist()[1:] == [{"topic": "o", "key": None, "value": b"\xff", "headers": None, "timestamp": 0},
                                       {"topic": "d", "key": None, "value": b"7", "headers": None, "timestamp": 0}]
    # records without headers convert no Python list in Arrow: pa.array would import pandas in each new worker
    code = ("import sys; from statekeep.functions.messaging.kafkarecords import records_table, raw_table; "
            "records_table([('o', ('v', 'k', None, 5))]); raw_table('c', [b'k'], [None]); "
            "print('pandas' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_topics_create_produce_and_consume_on_kafka(kafka, capsys):
    from statekeep.cli import main

    name = f"kafka://{kafka.address}/t{uuid.uuid4().hex[:10]}"
    assert main(["topics", "create", name, "--partitions", "2", "--config", "cleanup.policy=compact"]) == 0
    assert len(__import__("statekeep.kafka.admin", fromlist=["describe"]).describe(kafka.address,
                                                                                  sk_kafka.parse(name).topic)) == 2
    now = int(time.time() * 1000)  # a recent time: the broker deletes at once a record older than its retention
    assert main(["topics", "produce", name, "-m", "a", "-m", "b", "-k", "K", "-p", "x=1", "--event-time",
                 str(now)]) == 0
    capsys.readouterr()
    assert main(["topics", "consume", name]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(m["value"], m["key"], m["properties"], m["eventTime"]) for m in lines] == [
        ("a", "K", {"x": "1"}, now), ("b", "K", {"x": "1"}, now)]
    assert main(["topics", "consume", name, "-n", "1"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_bad_kafka_names_and_topics_are_refused_before_anything_runs(kafka, spark, tmp_path, monkeypatch):
    """A malformed name, a topic the broker does not have, and an unreachable cluster: each refused with an error
    naming it, before the query starts (nothing written)."""
    monkeypatch.setattr(kafka_module(), "TIMEOUT", 2.0)
    for bad in ("kafka://nohost/t", "kafka://h:99999/t", "kafka://h:1/bad name"):
        with pytest.raises(InvalidArgumentError, match="kafka://"):
            kafka_module().parse(bad)
    out = topic(kafka)
    url = f"local://{tmp_path / 'data'}"
    missing = f"kafka://{kafka.address}/no-such-topic-{uuid.uuid4().hex[:8]}"
    unreachable = "kafka://127.0.0.1:9/t"
    with FunctionService.open(url) as service:
        for name, inputs, output, error in (("a", [missing], out, NotFoundError), ("b", [out], missing, NotFoundError),
                                            ("c", [unreachable], out, StoreUnavailableError)):
            service.registry.create({"tenant": "public", "namespace": "default", "name": name, "inputs": inputs,
                                     "output": output}, ECHO)
            with pytest.raises(error, match="no-such-topic|127.0.0.1:9"):
                run(service, url, tmp_path, name, spark)
    assert values(out) == []


def kafka_module():
    return sk_kafka


BIG = b'''
def process(value, context):
    context.incr_counter("seen", 1)
    return "x" * int(value)
'''

STRICT = b'''
def process(value, context):
    context.incr_counter("seen", 1)
    return value
'''


def test_a_message_over_the_topics_limit_fails_the_batch_with_nothing_written(kafka, spark, tmp_path):
    source, out = topic(kafka, 1), topic(kafka, 1, **{"max.message.bytes": "2000"})
    produce(source, [{"value": "10"}, {"value": "5000"}])
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "big", "inputs": [source],
                                 "output": out}, BIG)
        status = run(service, url, tmp_path, "big", spark)
        assert "over the topic's max.message.bytes (2000)" in status["error"] and out in status["error"]
        assert values(out) == []  # nothing half-written: neither the small output nor the state
        assert service.registry.state_store("public", "default", "big").get_counter("seen") == 0


def test_a_value_that_is_not_utf8_under_a_string_serde_fails_or_goes_to_the_dead_letter(kafka, spark, tmp_path):
    """Under ``statekeep.serde.StringSerDe`` a value that is not UTF-8 is the record's error, naming its topic,
    partition and offset; with a dead-letter topic (on Kafka) it goes there as it came and the others count. So
    does a message with a header that is not UTF-8 (its properties, which its output carries on, are text)."""
    from statekeep.kafka import client_config, confluent

    source, out, dead = topic(kafka, 1), topic(kafka, 1), topic(kafka, 1)
    sk_kafka.KafkaDelivery(kafka_address(source), f"t-{uuid.uuid4().hex}").deliver(None, sk_kafka.records_table(
        [(source.rsplit("/", 1)[1], {"value": "ok"}), (source.rsplit("/", 1)[1], {"valueBase64": "/w=="})]))
    producer = confluent().Producer(client_config(kafka.address))
    producer.produce(source.rsplit("/", 1)[1], b"fine", headers=[("h", b"\xff")])
    producer.flush(30)
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        serde = {source: {"serdeClassName": "statekeep.serde.StringSerDe"}}
        service.registry.create({"tenant": "public", "namespace": "default", "name": "strict", "inputs": [source],
                                 "output": out, "inputSpecs": serde}, STRICT)
        status = run(service, url, tmp_path, "strict", spark)
        # named by where it is in Kafka, not by its place in the micro-batch
        assert f"the message of {source} at partition 0, offset 1: " in status["error"] and "UTF-8" in status["error"]
        assert values(out) == []
        assert service.registry.state_store("public", "default", "strict").get_counter("seen") == 0
        service.registry.create({"tenant": "public", "namespace": "default", "name": "lenient", "inputs": [source],
                                 "output": out, "inputSpecs": serde, "deadLetterTopic": dead}, STRICT)
        status = run(service, url, tmp_path, "lenient", spark)
        assert (status["error"], status["processed"]) == (None, 1)
        assert values(out) == ["ok"]
        assert [(m.get("valueBase64"), m.get("value")) for m in sk_kafka.consume(dead)] == [("/w==", None),
                                                                                          (None, "fine")]
        assert service.registry.state_store("public", "default", "lenient").get_counter("seen") == 1


def kafka_address(name: str) -> str:
    return sk_kafka.parse(name).bootstrap


def test_a_partition_whose_batches_alternate_between_python_workers_delivers_each_once(kafka, tmp_path, monkeypatch):
    """Spark hands a partition's tasks to whichever Python worker is idle: worker A delivers batch 0, B batch 1 (its
    new producer of the id fences A's), A batch 2. A's kept producer is fenced, so A delivers as a replay (a fresh
    producer) instead of failing the batch; every batch reaches Kafka once."""
    from types import SimpleNamespace

    out = topic(kafka, 1)
    spec = SimpleNamespace(tenant="public", namespace="default", name="swap", function_id="i1",
                           topics_dir=str(tmp_path / "topics"))
    workers = {"A": ({}, {}), "B": ({}, {})}  # each worker process's kept producers and last delivered batches
    for batch, worker in enumerate("ABA"):
        monkeypatch.setattr(kafkatxn, "_producers", workers[worker][0])
        monkeypatch.setattr(kafkatxn, "_delivered", workers[worker][1])
        table = sk_kafka.records_table([(sk_kafka.parse(out).topic, {"key": "k", "value": f"b{batch}"})])
        sk_kafka.deliver_kept(spec, batch, 0, table.replace_schema_metadata({"bootstrap": kafka.address}),
                              replay=False)  # each batch's state newly committed: no replay of its own
    assert values(out) == ["b0", "b1", "b2"]


def test_a_batch_whose_delivery_behind_its_task_failed_is_caught_up_in_order(kafka, tmp_path, monkeypatch):
    """A task hands its batch to the executor's agent and ends before the Kafka commit (kafkaagent.behind). Batch 1's
    delivery there fails: it stays kept, the agent refuses batch 2 behind it, and batch 2's task catches the
    partition up (1, then 2). Batch 3 goes behind again, and the query's end (kafka.settle) waits for it; batch 4,
    kept by a task stopped before its state commit, is not delivered but stays kept for its replay. Each committed
    batch reaches Kafka once, in order."""
    from types import SimpleNamespace

    from statekeep.functions.messaging import kafkaagent

    out = topic(kafka, 1)
    spec = SimpleNamespace(tenant="public", namespace="default", name="behind", function_id="i1",
                           topics_dir=str(tmp_path / "topics"))
    path = os.path.join(kafkaagent._directory(), f"test-{uuid.uuid4().hex[:8]}.sock")
    agent = subprocess.Popen([sys.executable, str(SUPPORT / "failing_agent.py"), path, str(os.getpid()), "1"])
    try:
        assert wait_for(lambda: os.path.exists(path), timeout=60)
        monkeypatch.setattr(kafkaagent, "wanted", lambda: True)  # as in a Spark task
        monkeypatch.setattr(kafkaagent, "_connect", lambda: kafkaagent._try_connect(path))
        kept = kept_sink(spec, "kafka")
        left = []
        for batch in range(5):
            table = sk_kafka.records_table([(sk_kafka.parse(out).topic, {"key": "k", "value": f"b{batch}"})])
            table = table.replace_schema_metadata({"bootstrap": kafka.address})
            kept.write(batch, 0, table)  # as BatchOutputs.keep, before the state commit
            if batch == 4:
                break  # its task stopped before the state commit
            sk_kafka.deliver_kept(spec, batch, 0, table, replay=False)  # the state newly committed
            if batch == 1:
                kafkaagent.drain("", 60)  # batch 1's delivery has failed by now
            left.append([b for b, _ in kept.batches()])
        assert left[2] == [] and left[3] == [3]  # batch 2 caught 1 and 2 up in its task; 3 went behind
        sk_kafka.settle(spec, lambda batch, partition: batch != 4)  # batch 4: kept, its state never committed
        assert values(out) == ["b0", "b1", "b2", "b3"]
        assert kept.batches() == [(4, 0)]
    finally:
        agent.kill()
        agent.wait()


STEADY = b"def process(value, context):\n    key = context.get_message_key()\n" \
         b"    return f'{key}:{context.incr_counter(key, 1)}'\n"


def test_a_partitions_producer_is_initialised_once_over_a_run_of_many_micro_batches(kafka, spark, tmp_path):
    """Spark runs a partition's micro-batches in whichever Python worker is idle; the executor's delivery agent
    (statekeep.functions.messaging.kafkaagent) keeps each partition's transactional producer across them, so the
    broker initialises each id once in a run of ten micro-batches (before the agent: about every other batch, each
    init fencing the previous worker's producer), and every output is there once."""
    source, out = topic(kafka), topic(kafka)
    produce(source, [{"key": f"k{i % 5}", "value": f"v{i}"} for i in range(200)])
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "steady", "inputs": [source],
                                 "output": out, "parallelism": 2,
                                 "userConfig": {"inputOptions": {"maxOffsetsPerTrigger": "20"}}}, STEADY)
        status = run(service, url, tmp_path, "steady", spark)
        assert (status["error"], status["processed"]) == (None, 200) and status["batches"] >= 10
        incarnation = service.registry.incarnation("public", "default", "steady")
    assert Counter(values(out)) == Counter(f"k{i}:{n}" for i in range(5) for n in range(1, 41))
    ident = kafkatxn.transactional_id("public", "default", "steady", incarnation, 0)[:-1]
    said = f"Initialized transactionalId {ident}"
    inits = Counter(line.split("Initialized transactionalId ")[1].split()[0]
                    for line in kafka.log_path.read_text().splitlines() if said in line)
    assert inits == {f"{ident}0": 1, f"{ident}1": 1}


def test_the_operator_into_kafka_exactly_once_with_the_statekeep_kafka_sink(kafka, spark, tmp_path):
    """``apply_function`` on Spark's Kafka source, its rows to the ``statekeep-kafka`` sink: each row once in the
    output topic; a second query run from the checkpoint adds nothing."""
    from statekeep.spark import apply_function

    source, out = topic(kafka), topic(kafka)
    produce(source, [{"key": f"u{i % 4}", "value": json.dumps({"page": f"p{i}"})} for i in range(20)])

    def count(value, context):
        return {"key": context.get_message_key(), "value": str(context.incr_counter(context.get_message_key(), 1))}

    def start():
        events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka.address)
                  .option("subscribe", sk_kafka.parse(source).topic).option("startingOffsets", "earliest").load())
        rows = apply_function(events, count, name="public/default/opk", key="key", store=f"local://{tmp_path}/data",
                              output_schema="key string, value string")
        query = (rows.writeStream.format("statekeep-kafka").option("kafka.bootstrap.servers", kafka.address)
                 .option("topic", sk_kafka.parse(out).topic).option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    start()
    got = list(sk_kafka.consume(out))
    assert sorted((m["key"], int(m["value"])) for m in got) == sorted((f"u{k}", n) for k in range(4)
                                                                       for n in range(1, 6))
    start()
    assert len(values(out)) == 20


def test_the_kafka_example_runs_as_it_is_against_the_broker(kafka, spark_env, tmp_path):
    """examples/kafka_to_parquet.py unchanged: Spark's Kafka source through apply_function into Parquet."""
    source = topic(kafka)
    example = Path(__file__).parent.parent / "examples" / "kafka_to_parquet.py"
    command = [sys.executable, str(example), "--bootstrap-servers", kafka.address, "--topic",
               sk_kafka.parse(source).topic, "--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck"),
               "--store", f"local://{tmp_path / 'data'}"]
    log = open(tmp_path / "example.log", "wb")
    process = subprocess.Popen(command, env={**os.environ, **spark_env}, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)

    def rows():  # of the files the file sink committed (its _spark_metadata log), not those being written
        import pyarrow.parquet as pq

        log = tmp_path / "out" / "_spark_metadata"
        entries = [json.loads(line) for f in (log.glob("[0-9]*") if log.exists() else [])
                   for line in f.read_text().splitlines()[1:]]
        return [r for e in entries for r in pq.read_table(e["path"].removeprefix("file://")).to_pylist()]

    try:  # it reads what comes after it started (Spark's Kafka source starts at the latest offsets)
        assert wait_for(lambda: (tmp_path / "ck" / "commits" / "0").exists() or process.poll() is not None,
                        timeout=240), (tmp_path / "example.log").read_text()[-3000:]
        start = int(time.time() * 1000)  # recent: the broker's retention deletes older records
        produce(source, [{"key": f"u{i % 2}", "value": json.dumps({"page": f"p{i}"}), "eventTime": start + i}
                         for i in range(6)])
        assert wait_for(lambda: len(rows()) >= 6 or process.poll() is not None, timeout=240), \
            (tmp_path / "example.log").read_text()[-3000:]
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert sorted((r["user"], r["clicks"], r["page"], r["at"]) for r in rows()) == sorted(
        (f"u{i % 2}", i // 2 + 1, f"p{i}", start + i) for i in range(6))


# -- faults -------------------------------------------------------------------------------------------------------


def start_run(tmp_path, spark_env, url, source, out, pauses):
    env = {**os.environ, **spark_env, "SK_FLAGS": str(tmp_path), "SK_PAUSE": ",".join(pauses)}
    log = open(tmp_path / "driver.log", "ab")
    return subprocess.Popen([sys.executable, str(SUPPORT / "kafka_run.py"), "--store", url, "--checkpoints",
                             str(tmp_path / "ck"), "--input", source, "--output", out, "--per-batch", "60"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def expected(keys: list[str]) -> Counter:
    seen: Counter = Counter()
    want: Counter = Counter()
    for key in keys:
        seen[key] += 1
        want[f"{key}:{seen[key]}"] += 1
    return want


def test_exactly_once_into_kafka_through_driver_worker_and_broker_kills(start_kafka, spark_env, tmp_path):
    """One function's run through its faults, each a driver lifetime at most: the driver SIGKILLed after
    partition 0 of micro-batch 1 committed its state and before its Kafka transaction; a Python worker SIGKILLed
    in micro-batch 2 (Spark retries the task); the broker SIGKILLed and restarted while micro-batch 3 runs. At
    the end a read_committed consumer has each output once and the state counts each input once."""
    kafka = start_kafka()
    source, out = topic(kafka), topic(kafka)
    keys = [f"k{i % 17}" for i in range(360)]  # micro-batches of 60 messages per input partition
    produce(source, [{"key": k, "value": str(i)} for i, k in enumerate(keys)])
    url = f"local://{tmp_path / 'data'}"
    pauses = ("before-commit@1", "kill-worker@2", "function@3")
    for pause in pauses:
        (tmp_path / f"armed-{pause.split('@')[0]}").touch()
    first = start_run(tmp_path, spark_env, url, source, out, pauses)
    assert wait_for(lambda: (tmp_path / "paused-before-commit").exists() or first.poll() is not None, timeout=240), \
        (tmp_path / "driver.log").read_text()[-3000:]
    with FunctionService.open(url) as service:  # partition 0's state of batch 1 is committed, its Kafka records not
        state = service.registry.state_store("public", "default", "kcount")
        assert state.task(1, 0, 1).has_marker("1-0")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    second = start_run(tmp_path, spark_env, url, source, out, pauses)
    assert wait_for(lambda: all((tmp_path / f"paused-function-{p}").exists() for p in (0, 1))
                    or second.poll() is not None, timeout=240), (tmp_path / "driver.log").read_text()[-3000:]
    kafka.kill()  # with no transaction in flight (a single broker killed mid-commit may keep it open for good)
    kafka.restart()
    (tmp_path / "go-function").touch()
    assert second.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()[-4000:]
    assert not list(tmp_path.glob("armed-*")), "a fault never happened"
    assert Counter(values(out)) == expected(keys)
    with FunctionService.open(url) as service:
        state = service.registry.state_store("public", "default", "kcount")
        assert {e.key: e.counter for e in state.scan_entries()} == dict(Counter(keys))


def test_on_a_three_broker_cluster_leader_kills_and_a_full_outage_end_exact(kafka_cluster, spark_env, tmp_path):
    """Input and output replicated 3 times (min ISR 2): the leader of input partition 0 and of output partition 0
    SIGKILLed while micro-batch 2 runs (started again once the batch goes on), then every broker down for 8 s while
    micro-batch 4 runs (its tasks held in the function meanwhile). The run goes on, or fails with its error and a
    rerun from the checkpoint goes on, the faults not yet made still armed: either way each output once."""
    cluster = kafka_cluster
    names = [f"t{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for name in names:
        cluster.create_topic(name, partitions=2, replication=3)
    source, out = (f"kafka://{cluster.bootstrap}/{name}" for name in names)
    keys = [f"k{i % 13}" for i in range(360)]
    produce(source, [{"key": k, "value": str(i)} for i, k in enumerate(keys)])
    url = f"local://{tmp_path / 'data'}"
    pauses = ("function@2", "function2@4")
    for pause in pauses:
        (tmp_path / f"armed-{pause.split('@')[0]}").touch()
    log = tmp_path / "driver.log"
    runs = [start_run(tmp_path, spark_env, url, source, out, pauses)]

    def failed_then_rerun() -> None:  # the run failed with its error: run again from its checkpoint
        assert runs[-1].returncode != 0 and "Error" in log.read_text(), log.read_text()[-3000:]
        assert len(runs) < 4, f"{len(runs)} runs failed: {log.read_text()[-3000:]}"
        for paused in tmp_path.glob("paused-*"):
            paused.unlink()
        runs.append(start_run(tmp_path, spark_env, url, source, out, pauses))

    def held(where: str) -> None:  # every partition of the batch held in the function (reruns as needed)
        deadline = time.monotonic() + 300
        while not all((tmp_path / f"paused-{where}-{p}").exists() for p in (0, 1)):
            if runs[-1].poll() is not None:
                failed_then_rerun()
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)

    held("function")
    killed = {cluster.leader(names[0], 0), cluster.leader(names[1], 0)}
    for i in killed:
        cluster.kill(i)
    (tmp_path / "go-function").touch()
    time.sleep(3)  # the batch goes on against the new leaders meanwhile
    for i in killed:
        cluster.restart(i)
    held("function2")
    cluster.stop_all_for(8)
    (tmp_path / "go-function2").touch()
    while runs[-1].wait(timeout=400) != 0:
        failed_then_rerun()
    assert not list(tmp_path.glob("armed-*")), "a fault never happened"
    assert Counter(values(out)) == expected(keys)


def test_a_function_created_on_standalone_streams_kafka_to_kafka(kafka, server_process, tmp_path):
    """``functions create`` (REST, as pulsar-admin posts it) with Kafka topics: the standalone worker's query
    reads what is produced while it runs and writes each output once."""
    import httpx
    from support.server_process import create_function

    source, out = topic(kafka), topic(kafka)
    produce(source, [{"key": f"k{i % 3}", "value": f"v{i}"} for i in range(6)])
    server = server_process(tmp_path / "data", worker=True)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            response = create_function(client, "public", "default", "kc", (SUPPORT / "kafka_function.py").read_bytes(),
                                       inputs=[source], output=out, parallelism=2, py="kafka_function.py")
            assert response.status_code == 200, response.text
            assert wait_for(lambda: len(values(out)) == 6, timeout=240), server.log.name
            produce(source, [{"key": "k0", "value": "late"}])  # the running query takes it
            assert wait_for(lambda: len(values(out)) == 7, timeout=120), server.log.name
            assert Counter(values(out)) == expected([f"k{i % 3}" for i in range(6)] + ["k0"])
    finally:
        server.stop()
