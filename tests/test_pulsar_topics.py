"""Functions on the run's real Pulsar broker (the ``pulsar`` fixture): Pulsar topics (``pulsar://HOST:PORT/persistent://
...``) as inputs, outputs, publish, log and dead-letter targets, effectively-once through broker deduplication tied
to the state commit, faults (driver, Python worker and broker SIGKILLed), and bad input refused with nothing
written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from statekeep.errors import InvalidArgumentError, NotFoundError, StoreUnavailableError
from statekeep.functions.config.locations import parse_pulsar
from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import run_registered
from statekeep.functions.messaging import pulsartopics
from statekeep.testing import wait_for
from support.pulsar import create_topic

SUPPORT = Path(__file__).parent / "support"


def topic(pulsar, partitions: int = 0, namespace: str = "default") -> str:
    """A new topic on the run's broker, as statekeep names it."""
    name = f"t{uuid.uuid4().hex[:10]}"
    if namespace == "default":
        create_topic(pulsar.web_url, name, partitions)
    else:
        path = f"{pulsar.web_url}/admin/v2/persistent/public/{namespace}/{name}"
        answer = httpx.put(path + "/partitions", json=partitions, timeout=30) if partitions else httpx.put(path)
        assert answer.status_code == 204, answer.text
    return f"{pulsar.service_url}/persistent://public/{namespace}/{name}?admin={pulsar.web_url}"


def values(name: str) -> list[str]:
    """Every message of the topic (each partition's, from its first), as the broker keeps them."""
    return [m.get("value", m.get("valueBase64")) for m in pulsartopics.consume(name)]


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
    if value == "fail":
        raise ValueError("refused " + value)
    n = context.incr_counter(context.get_message_key(), 1)
    context.publish(context.get_user_config_value("side"), f"side-{value}",
                    properties={"from": context.get_current_message_topic_name()})
    if value == "log-me":
        context.get_logger().info("logged %s", value)
    ident = context.get_message_id()
    return {"value": value, "n": n, "props": context.get_message_properties(), "time": context.get_message_eventtime(),
            "id": [ident.ledger_id(), ident.entry_id(), ident.partition()]}
'''


def test_pulsar_in_and_out_with_keys_properties_times_ids_publish_log_and_dead_letter(pulsar, spark, tmp_path,
                                                                                      capsys):
    """A partitioned Pulsar input to a partitioned Pulsar output, with publish, log and dead-letter topics on the
    broker: each message reaches the function with its key, properties, event time and message id; each output
    is on the broker once, also after a second run from the checkpoint, and again once after more input
    (produced by ``statekeep topics produce``, read back by ``topics consume``)."""
    from statekeep.cli import main

    source, out, side, log, dead = topic(pulsar, 2), topic(pulsar, 2), topic(pulsar), topic(pulsar), topic(pulsar)
    event = 1_796_000_000_000
    pulsartopics.produce(source, [{"key": f"k{i % 3}", "value": f"v{i}", "properties": {"i": str(i)},
                                   "eventTime": event + i} for i in range(12)]
                         + [{"key": "k0", "value": "log-me"}, {"key": "k1", "value": "fail"}])
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "echo", "inputs": [source],
                                 "output": out, "logTopic": log, "deadLetterTopic": dead, "maxMessageRetries": 0,
                                 "userConfig": {"side": side}}, ECHO)
        status = run(service, url, tmp_path, "echo", spark)
        assert status["error"] is None, status
        outputs = [json.loads(v) for v in values(out)]
        by_value = {o["value"]: o for o in outputs}
        assert sorted(by_value) == sorted([f"v{i}" for i in range(12)] + ["log-me"]) and len(outputs) == 13
        assert by_value["v7"]["props"] == {"i": "7"} and by_value["v7"]["time"] == event + 7
        assert by_value["log-me"]["time"] is None
        received = {m["value"]: m for m in pulsartopics.consume(source)}
        partitions = {v: m["partition"] for v, m in received.items()}
        assert {o["value"]: o["id"][2] for o in outputs} == {v: p for v, p in partitions.items() if v != "fail"}
        assert sorted(values(side)) == sorted(f"side-{v}" for v in by_value)
        assert {m["properties"]["from"] for m in pulsartopics.consume(side)} == {source}
        logged = list(pulsartopics.consume(log))
        assert [m["value"] for m in logged] == ["logged log-me"] and logged[0]["properties"]["level"] == "INFO"
        assert values(dead) == ["fail"]
        counts = {e.key: e.counter for e in service.registry.state_store("public", "default", "echo").scan_entries()}
        assert counts == {"k0": 5, "k1": 4, "k2": 4}
        # the output keeps the input message's key
        assert {m["key"] for m in pulsartopics.consume(out)} == {"k0", "k1", "k2"}

        assert run(service, url, tmp_path, "echo", spark)["error"] is None  # nothing new: nothing more
        assert main(["topics", "produce", source, "-m", "late", "-k", "k2", "-p", "x=1"]) == 0
        assert run(service, url, tmp_path, "echo", spark)["error"] is None
        capsys.readouterr()
        assert main(["topics", "consume", out, "-n", "20"]) == 0
        late = [m for m in map(json.loads, capsys.readouterr().out.splitlines()) if '"late"' in m["value"]]
        assert [(m["key"], json.loads(m["value"])["props"]) for m in late] == [("k2", {"x": "1"})]
        assert Counter(json.loads(v)["value"] for v in values(out)) == Counter([*by_value, "late"])
        assert len(values(side)) == 14 and values(dead) == ["fail"]


STRICT = b'''
def process(value, context):
    context.incr_counter("seen", 1)
    return value
'''

BIG = b'''
def process(value, context):
    context.incr_counter("seen", 1)
    return "x" * int(value)
'''


def test_bad_pulsar_names_topics_brokers_messages_and_namespaces_change_nothing(pulsar, spark, tmp_path,
                                                                               monkeypatch):
    """Each refused in one line naming it, with nothing written: a malformed name; an unknown topic and an unknown
    namespace (input or output); an unreachable service URL (within the bounded timeout); an output namespace
    without deduplication (the error says how to enable it); a message over the broker's maxMessageSize; a
    message the serde refuses (the error names topic, partition and message id; with a dead-letter topic it goes
    there and the rest counts)."""
    monkeypatch.setattr(pulsartopics, "TIMEOUT", 3.0)
    for bad in ("pulsar://nohost/persistent://public/default/t", "pulsar://h:6650/public/default/t",
                "pulsar://h:6650/persistent://public/t", "pulsar://h:1/persistent://a/b/c?adm=http://h:1"):
        with pytest.raises(InvalidArgumentError, match="is not a Pulsar topic name") as caught:
            parse_pulsar(bad)
        assert "\n" not in str(caught.value)
    source, out, dead = topic(pulsar, 1), topic(pulsar, 1), topic(pulsar)
    assert httpx.put(f"{pulsar.web_url}/admin/v2/namespaces/public/nodedup", timeout=30).status_code == 204
    assert httpx.post(f"{pulsar.web_url}/admin/v2/namespaces/public/nodedup/deduplication", json=False,
                      timeout=30).status_code == 204
    undeduplicated = topic(pulsar, namespace="nodedup")
    missing = source.replace(parse_pulsar(source).topic, f"persistent://public/default/none-{uuid.uuid4().hex[:6]}")
    no_namespace = source.replace("public/default", "public/nosuchns")
    unreachable = "pulsar://127.0.0.1:9/persistent://public/default/t?admin=http://127.0.0.1:9"
    pulsartopics.produce(source, [{"value": "10"}, {"valueBase64": "/w=="}, {"value": "20"}])
    sized = topic(pulsar, 1)
    pulsartopics.produce(sized, [{"value": "10"}, {"value": "6000000"}])
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        for name, inputs, output, error, match in (
                ("a", [missing], out, NotFoundError, "does not exist"),
                ("b", [source], missing, NotFoundError, "does not exist"),
                ("c", [no_namespace], out, NotFoundError, "nosuchns"),
                ("d", [unreachable], out, StoreUnavailableError, "did not answer within 3 s"),
                ("e", [source], undeduplicated, InvalidArgumentError,
                 "has no deduplication.*set-deduplication public/nodedup --enable")):
            service.registry.create({"tenant": "public", "namespace": "default", "name": name, "inputs": inputs,
                                     "output": output}, STRICT)
            with pytest.raises(error, match=match) as caught:
                run(service, url, tmp_path, name, spark)
            assert "\n" not in str(caught.value)
        serde = {source: {"serdeClassName": "statekeep.serde.StringSerDe"}}
        service.registry.create({"tenant": "public", "namespace": "default", "name": "strict", "inputs": [source],
                                 "output": out, "inputSpecs": serde}, STRICT)
        status = run(service, url, tmp_path, "strict", spark)
        where = next(m for m in pulsartopics.consume(source) if "valueBase64" in m)
        assert f"the message of {source} at partition 0, message id {where['messageId']}: " in status["error"]
        assert "UTF-8" in status["error"]
        service.registry.create({"tenant": "public", "namespace": "default", "name": "big", "inputs": [sized],
                                 "output": out}, BIG)
        status = run(service, url, tmp_path, "big", spark)  # 6 MB after 10 bytes: over the broker's 5 MiB
        assert "over the broker's maxMessageSize (5242880): nothing was written" in status["error"]
        for name in ("a", "b", "c", "d", "e", "strict", "big"):
            assert service.registry.state_store("public", "default", name).get_counter("seen") == 0
        assert values(out) == [] and values(undeduplicated) == []
        service.registry.create({"tenant": "public", "namespace": "default", "name": "lenient", "inputs": [source],
                                 "output": out, "inputSpecs": serde, "deadLetterTopic": dead}, STRICT)
        status = run(service, url, tmp_path, "lenient", spark)
        assert (status["error"], status["processed"]) == (None, 2)
        assert values(out) == ["10", "20"] and values(dead) == ["/w=="]


# -- faults -------------------------------------------------------------------------------------------------------


def start_run(tmp_path, spark_env, url, source, out, pauses):
    env = {**os.environ, **spark_env, "SK_FLAGS": str(tmp_path), "SK_PAUSE": ",".join(pauses)}
    log = open(tmp_path / "driver.log", "ab")
    return subprocess.Popen([sys.executable, str(SUPPORT / "kafka_run.py"), "--store", url, "--checkpoints",
                             str(tmp_path / "ck"), "--input", source, "--output", out, "--until",
                             str(tmp_path / "stop"), "--trigger-ms", "1000"],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def expected(keys: list[str]) -> Counter:
    seen: Counter = Counter()
    want: Counter = Counter()
    for key in keys:
        seen[key] += 1
        want[f"{key}:{seen[key]}"] += 1
    return want


def test_effectively_once_into_pulsar_through_driver_worker_and_broker_kills(pulsar, spark_env, tmp_path):
    """One function's run (the Kafka tests' counting function, support/kafka_function.py), input produced in four
    steps of 60 messages, each a micro-batch: the driver SIGKILLed after partition 0 of micro-batch 1 committed its
    state and before its Pulsar sends, partition 1 having sent its own (sent again by the replay); a Python worker
    SIGKILLed in micro-batch 2 (Spark retries the task); the broker SIGKILLed and restarted while micro-batch 3 runs.
    At the end the output topic holds each output once and the state counts each input once."""
    source, out = topic(pulsar, 2), topic(pulsar, 2)
    keys = [f"k{i % 17}" for i in range(240)]

    def step(n: int) -> None:
        pulsartopics.produce(source, [{"key": k, "value": str(60 * n + i)}
                                      for i, k in enumerate(keys[60 * n:60 * (n + 1)])])

    def delivered(count: int, process) -> bool:
        return wait_for(lambda: len(values(out)) >= count or process.poll() is not None, timeout=300)

    log = tmp_path / "driver.log"
    url = f"local://{tmp_path / 'data'}"
    pauses = ("before-commit@1", "kill-worker@2", "function@3")
    for pause in pauses:
        (tmp_path / f"armed-{pause.split('@')[0]}").touch()
    step(0)
    first = start_run(tmp_path, spark_env, url, source, out, pauses)
    try:
        assert delivered(60, first) and first.poll() is None, log.read_text()[-3000:]
        step(1)
        assert wait_for(lambda: (tmp_path / "paused-before-commit").exists() or first.poll() is not None,
                        timeout=240), log.read_text()[-3000:]
        with FunctionService.open(url) as service:  # partition 0's state of batch 1 is committed, its sends not
            assert service.registry.state_store("public", "default", "kcount").task(1, 0, 1).has_marker("1-0")
        # partition 1 of batch 1 sent its outputs: the restarted driver's replay of batch 1 sends them again, and
        # only the broker's deduplication keeps them once
        assert delivered(61, first) and first.poll() is None, log.read_text()[-3000:]
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    step(2)
    second = start_run(tmp_path, spark_env, url, source, out, pauses)
    try:
        assert delivered(180, second) and second.poll() is None, log.read_text()[-3000:]
        step(3)
        assert wait_for(lambda: all((tmp_path / f"paused-function-{p}").exists() for p in (0, 1))
                        or second.poll() is not None, timeout=240), log.read_text()[-3000:]
        pulsar.broker.kill()  # while no send is in flight: the tasks of batch 3 wait in the function
        pulsar.broker.start()
        (tmp_path / "go-function").touch()
        assert delivered(240, second) and second.poll() is None, log.read_text()[-4000:]
        (tmp_path / "stop").touch()
        assert second.wait(timeout=120) == 0, log.read_text()[-4000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
            second.wait()
    assert not list(tmp_path.glob("armed-*")), "a fault never happened"
    assert Counter(values(out)) == expected(keys)
    with FunctionService.open(url) as service:
        state = service.registry.state_store("public", "default", "kcount")
        assert {e.key: e.counter for e in state.scan_entries()} == dict(Counter(keys))
