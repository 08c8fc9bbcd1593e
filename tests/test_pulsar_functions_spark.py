"""Pulsar Python functions on Spark, unchanged: a ``pulsar.Function`` subclass chosen by className and a
native ``def process(input)``; the whole Context per record; retries and the dead-letter output; the
per-instance stats the runner saves once per micro-batch."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from statekeep.functions.driver import stats
from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import read_status, run_registered
from support.spark import write_words

PULSAR_CLASS = b'''
from pulsar import Function


class WordCount(Function):
    def __init__(self):
        self.calls = 0

    def process(self, input, context):
        self.calls += 1
        word = input["word"]
        context.incr_counter(word, 1)
        context.record_metric("word_length", len(word))
        if word.startswith("x"):
            context.publish(context.get_user_config_value("side"), {"word": word})
        context.ack(context.get_message_id(), context.get_current_message_topic_name())
        return {"word": word, "key": context.get_message_key(), "partitionKey": context.get_partition_key(),
                "topic": context.get_current_message_topic_name(), "instance": context.get_instance_id(),
                "id": context.get_message_id(), "functionId": context.get_function_id(),
                "version": context.get_function_version(), "inputs": context.get_input_topics(),
                "output": context.get_output_topic(), "secret": context.get_secret("PYSPARK_PYTHON"),
                "noSecret": context.get_secret("HOME"), "eventTime": context.get_message_eventtime(),
                "properties": context.get_message_properties(), "config": context.get_user_config_map()}
'''

NATIVE = b'''
def process(input):
    assert isinstance(input, str), type(input)
    return input.upper()
'''

FAILING = b'''
def process(input, context):
    context.incr_counter(input["word"], 1)
    context.publish(context.get_user_config_value("side"), input)
    if input["word"] == "bad":
        raise ValueError("bad word")
    return input
'''


@pytest.fixture
def service(tmp_path):
    with FunctionService.open(f"local://{tmp_path / 'data'}") as s:
        yield s


def run(service, spark, tmp_path: Path, name: str):
    query = run_registered(service, f"local://{tmp_path / 'data'}", "public", "default", name,
                           checkpoint_root=str(tmp_path / "checkpoints"), once=True, spark=spark)
    query.await_termination()
    return read_status(service.registry.store, "public", "default", name)


def lines(directory: Path) -> list:
    return [json.loads(line) for p in sorted(directory.glob("*.jsonl")) for line in p.read_text().splitlines()]


def test_pulsar_class_function_with_the_whole_context(spark, service, tmp_path):
    in_a, in_b, out, side = tmp_path / "in-a", tmp_path / "in-b", tmp_path / "out", tmp_path / "side"
    words_a = [f"a{i % 7}" for i in range(60)] + ["x1", "x2"]
    words_b = [f"b{i % 5}" for i in range(40)] + ["x3"]
    write_words(in_a, "1.jsonl", words_a)
    write_words(in_b, "1.jsonl", words_b)
    config = {"tenant": "public", "namespace": "default", "name": "pwc", "inputs": [str(in_a), str(in_b)],
              "className": "wordcount.WordCount", "keyField": "word", "parallelism": 2, "output": str(out),
              "userConfig": {"side": str(side)}, "secrets": {"PYSPARK_PYTHON": "env"}}
    service.registry.create(config, PULSAR_CLASS)
    status = run(service, spark, tmp_path, "pwc")

    state = service.registry.state_store("public", "default", "pwc")
    assert {e.key: e.counter for e in state.scan_entries()} == Counter(words_a + words_b)
    records = lines(out)
    assert sorted(r["word"] for r in records) == sorted(words_a + words_b)
    incarnation = service.registry.incarnation("public", "default", "pwc")
    for r in records:
        assert r["key"] == r["partitionKey"] == r["word"]
        assert r["topic"] == str(in_a if r["word"] in words_a else in_b)
        assert r["instance"] in (0, 1) and r["id"].split(":")[1] == str(r["instance"])
        assert r["functionId"] == incarnation and r["version"] == 0
        assert r["inputs"] == [str(in_a), str(in_b)] and r["output"] == str(out)
        assert r["secret"] == os.environ["PYSPARK_PYTHON"] and r["noSecret"] is None  # not in the secrets map
        assert r["eventTime"] is None and r["properties"] == {}
        assert r["config"] == {"side": str(side)}
    assert len({r["id"] for r in records}) == len(records)
    assert sorted(m["word"] for m in lines(side)) == ["x1", "x2", "x3"]  # context.publish, exactly once

    # the stats saved with the status, per instance (a Spark partition), as Pulsar's JSON
    shaped = stats.function_stats(status, 2)
    total = len(words_a) + len(words_b)
    assert shaped["receivedTotal"] == shaped["processedSuccessfullyTotal"] == total
    assert shaped["userExceptionsTotal"] == 0 and shaped["avgProcessLatency"] > 0
    per = [i["metrics"] for i in shaped["instances"]]
    assert sum(m["receivedTotal"] for m in per) == total
    by_instance = Counter(r["instance"] for r in records)
    assert [m["receivedTotal"] for m in per] == [by_instance[0], by_instance[1]]
    lengths = [len(w) for w in words_a + words_b]
    assert sum(m["userMetricsDetail"]["word_length"]["count"] for m in per if m["userMetrics"]) == len(lengths)
    assert sum(m["userMetricsDetail"]["word_length"]["sum"] for m in per if m["userMetrics"]) == sum(lengths)


def test_native_function_gets_text_input_as_str(spark, service, tmp_path):
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    (inputs / "1.txt").write_text("hello world\nsecond line\n")
    service.registry.create({"tenant": "public", "namespace": "default", "name": "upper", "inputs": [str(inputs)],
                             "inputFormat": "text", "output": str(out)}, NATIVE)
    status = run(service, spark, tmp_path, "upper")
    assert sorted(lines(out)) == ["HELLO WORLD", "SECOND LINE"]
    assert status["processed"] == 2 and status["error"] is None


def test_retries_then_dead_letter_and_the_failed_records_state_is_not_applied(spark, service, tmp_path):
    inputs, out, side, dead = (tmp_path / d for d in ("in", "out", "side", "dead"))
    words = ["ok", "bad", "ok", "fine", "bad"]
    write_words(inputs, "1.jsonl", words)
    service.registry.create({"tenant": "public", "namespace": "default", "name": "dlq", "inputs": [str(inputs)],
                             "keyField": "word", "parallelism": 2, "output": str(out),
                             "userConfig": {"side": str(side)}, "maxMessageRetries": 2,
                             "deadLetterTopic": str(dead)}, FAILING)
    status = run(service, spark, tmp_path, "dlq")
    state = service.registry.state_store("public", "default", "dlq")
    assert {e.key: e.counter for e in state.scan_entries()} == {"ok": 2, "fine": 1}  # "bad" rolled back
    assert sorted(r["word"] for r in lines(out)) == ["fine", "ok", "ok"]
    assert sorted(r["word"] for r in lines(side)) == ["fine", "ok", "ok"]  # its publish rolled back too
    assert lines(dead) == [{"word": "bad"}, {"word": "bad"}]
    shaped = stats.function_stats(status, 2)
    assert shaped["receivedTotal"] == 5 and shaped["processedSuccessfullyTotal"] == 3
    assert shaped["userExceptionsTotal"] == 6  # two records, each tried 1 + 2 times
    exceptions = [e for i in stats.function_status(status, 2)["instances"] for e in i["status"]["latestUserExceptions"]]
    assert exceptions and all("ValueError: bad word" in e["exceptionString"] for e in exceptions)


RELAY = '''
def process(input, context):
    context.get_logger().info("got %s", input)
    context.incr_counter(input, 1)
    context.publish("persistent://public/default/side", input, message_conf={
        "properties": {"from": context.get_message_key()}, "partition_key": "pk-" + input, "event_timestamp": 7})
    return input + "!"
'''

TYPES = '''
def process(input):
    return [type(input).__name__, input]
'''


def test_a_pulsar_pipeline_through_topics_with_localrun_once(spark, tmp_path, capsys, monkeypatch):
    """Two functions created with pulsar-admin's flags only, chained by a topic name, on Spark: the first
    reads a topic (str payloads, keys and properties), publishes with message_conf and logs to a log
    topic; the second reads the first's output topic and a directory (text lines through Pulsar's serde,
    JSON lines as JSON)."""
    from support.cli import run as cli

    monkeypatch.chdir(tmp_path)
    for name in ("STATEKEEP_URL", "STATEKEEP_STORE", "STATEKEEP_TOPICS_DIR"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "relay.py").write_text(RELAY)
    (tmp_path / "types.py").write_text(TYPES)
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("hello world\n5\n")
    (files / "b.jsonl").write_text('{"a": 1}\n')
    data = ["--data-dir", str(tmp_path / "data")]
    assert cli(capsys, "topics", "produce", "in", "-m", "hello", "-m", "world", "-k", "k1", "-p", "p=1", *data)[0] == 0
    code, out, err = cli(capsys, "functions", "localrun", "--name", "relay", "--py", "relay.py", "--classname", "relay",
                         "--inputs", "persistent://public/default/in", "--output", "persistent://public/default/out",
                         "--log-topic", "persistent://public/default/log", "--once", *data)
    assert code == 0, err
    code, out, err = cli(capsys, "functions", "localrun", "--name", "types", "--py", "types.py",
                         "--inputs", f"persistent://public/default/out,{files}", "--output", str(tmp_path / "typed"),
                         "--once", *data)
    assert code == 0, err

    def consume(name: str) -> list[dict]:
        return [json.loads(line) for line in cli(capsys, "topics", "consume", name, *data)[1].splitlines()]

    out_topic = consume("out")  # the input message's key and properties go with the output, as Pulsar's
    assert sorted((m["value"], m["key"], m["properties"]) for m in out_topic) == [
        ("hello!", "k1", {"p": "1"}), ("world!", "k1", {"p": "1"})]
    side = consume("side")
    assert sorted((m["value"], m["key"], m["properties"], m["eventTime"]) for m in side) == [
        ("hello", "pk-hello", {"from": "k1"}, 7), ("world", "pk-world", {"from": "k1"}, 7)]
    log = consume("log")
    assert sorted(m["value"] for m in log) == ["got hello", "got world"]
    assert {(m["properties"]["level"], m["properties"]["function"]) for m in log} == {("INFO", "public/default/relay")}
    typed = sorted(map(json.dumps, lines(tmp_path / "typed")))
    assert typed == sorted(map(json.dumps, [["str", "hello!"], ["str", "world!"], ["str", "hello world"], ["int", 5],
                                            ["dict", {"a": 1}]]))
    assert cli(capsys, "topics", "ls", *data)[1].split() == [f"persistent://public/default/{t}"
                                                             for t in ("in", "log", "out", "side")]
    # the topic as a DataFrame, metadata included
    rows = (spark.read.format("statekeep-topic").option("topic", "side")
            .option("topicsDir", str(tmp_path / "data" / "topics")).load().collect())
    assert sorted((r.value, r.key, r.properties, r.eventTime) for r in rows) == [
        ("hello", "pk-hello", {"from": "k1"}, 7), ("world", "pk-world", {"from": "k1"}, 7)]
