"""A real Pulsar standalone (the ``pulsar`` fixture): its broker's deduplication from the Python client, and PIP-312
on its real functions worker, a Java function's state kept by statekeep through statekeep's state provider
(java/pulsar-state-provider). Few tests, each doing much: the broker is one per run."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from support.cli import run, no_client_settings  # noqa: F401 - a fixture, used below
from support.pulsar import create_topic, deploy, function_jar, read_all, wait_running

pytestmark = pytest.mark.usefixtures("no_client_settings")  # no client settings of this machine


def _client(pulsar):
    import pulsar as pulsar_client

    return pulsar_client, pulsar_client.Client(pulsar.service_url, operation_timeout_seconds=30)


def test_the_broker_drops_what_a_producer_of_the_same_name_resends(pulsar):
    """Pulsar's effectively-once, from the Python client: with broker deduplication on, a producer of a fixed name
    that resends sequence ids it already sent (after a restart) has them dropped; last_sequence_id says where it
    stopped."""
    lib, client = _client(pulsar)
    topic = f"dedup-{uuid.uuid4().hex[:8]}"
    create_topic(pulsar.web_url, topic)
    full = f"persistent://public/default/{topic}"
    try:
        consumer = client.subscribe(full, "check", initial_position=lib.InitialPosition.Earliest)
        producer = client.create_producer(full, producer_name="writer-0", batching_enabled=False)
        for i in range(5):
            producer.send(f"m{i}".encode(), sequence_id=i)
        producer.close()
        producer = client.create_producer(full, producer_name="writer-0", batching_enabled=False)
        assert producer.last_sequence_id() == 4
        for i in range(3, 8):  # 3 and 4 again: a replay
            producer.send(f"m{i}".encode(), sequence_id=i)
        producer.close()
        got = []
        while True:
            try:
                message = consumer.receive(3000)
            except lib.Timeout:
                break
            got.append(message.data().decode())
            consumer.acknowledge(message)
        assert got == [f"m{i}" for i in range(8)]
    finally:
        client.close()


def test_batched_sends_replay_whole_chunks_once(pulsar):
    """statekeep's effectively-once send batches in chunks fixed by the messages (one broker entry each): a send
    stopped after some chunks, then the whole batch again (a replay), stores every message once, each chunk one
    entry; a replay of a stored batch sends nothing; a chunk ends at its byte limit too."""
    from statekeep.functions.messaging.pulsarclient import CHUNK_MESSAGES, PulsarOptions, chunks, send

    lib, client = _client(pulsar)
    topic = f"chunks-{uuid.uuid4().hex[:8]}"
    create_topic(pulsar.web_url, topic)
    full = f"persistent://public/default/{topic}"
    options = PulsarOptions.of(pulsar.service_url, pulsar.web_url, full, 30)
    messages = [{"content": f"m{i}".encode(), "partition_key": f"k{i % 7}", "properties": {"i": str(i)}}
                for i in range(2 * CHUNK_MESSAGES + 500)]
    big = [{"content": b"x" * 200_000} for _ in range(7)]  # 3 of them fill a chunk's bytes
    try:
        assert send(options, "w-0", 3, messages[:2 * CHUNK_MESSAGES]) == 2 * CHUNK_MESSAGES  # stopped there
        assert send(options, "w-0", 3, messages) == 500  # the replay sends the chunk not stored, whole
        assert send(options, "w-0", 3, messages) == 0
        assert send(options, "w-0", 4, big) == 7
        assert [len(c) for _, c in chunks(big)] == [2, 2, 2, 1]
        got = read_all(client, full, pulsar.web_url)
        assert [m.data() for m in got] == [m["content"] for m in messages + big]
        assert [m.partition_key() for m in got[:10]] == [f"k{i % 7}" for i in range(10)]
        assert got[1].properties() == {"i": "1"}
        entries: dict[tuple[int, int], int] = {}
        for m in got:
            ident = m.message_id()
            entries[ident.ledger_id(), ident.entry_id()] = entries.get((ident.ledger_id(), ident.entry_id()), 0) + 1
        assert list(entries.values()) == [CHUNK_MESSAGES, CHUNK_MESSAGES, 500, 2, 2, 2, 1]
    finally:
        client.close()


def _outputs(lib, consumer, n: int) -> list[str]:
    out = []
    for _ in range(n):
        message = consumer.receive(60_000)
        consumer.acknowledge(message)
        out.append(message.value())
    return out


def test_a_pulsar_functions_state_is_kept_by_statekeep(pulsar, tmp_path, capsys):
    """PIP-312 on Pulsar's own functions worker: a Java function's incrCounter/putState go to statekeep; Pulsar's
    state REST and statekeep's REST and CLI show the same values; a POST through either is seen by the function; a
    counter reads as 8 bytes big-endian through getState; the console lists the function and its changelog; the state
    survives the worker's restart (SIGKILL); deleting the function deletes its state."""
    lib, client = _client(pulsar)
    name = f"counter-{uuid.uuid4().hex[:6]}"
    source, sink = f"{name}-in", f"{name}-out"
    for topic in (source, sink):
        create_topic(pulsar.web_url, topic)
    deploy(pulsar.web_url, name, function_jar(tmp_path), source, sink)
    pulsar_state = f"{pulsar.web_url}/admin/v3/functions/public/default/{name}/state"
    statekeep_state = f"{pulsar.statekeep.url}/admin/v3/functions/public/default/{name}/state"
    string = lib.schema.StringSchema()

    def ask(consumer, producer, *inputs: str) -> list[str]:
        for one in inputs:
            producer.send(one)
        return _outputs(lib, consumer, len(inputs))

    try:
        consumer = client.subscribe(f"persistent://public/default/{sink}", "check", schema=string,
                                    initial_position=lib.InitialPosition.Earliest)
        producer = client.create_producer(f"persistent://public/default/{source}", schema=string)
        assert ask(consumer, producer, "count:a", "count:a", "count:b", "bytes:last") == [
            "a=1", "a=2", "b=1", "last=b"]
        for url in (pulsar_state, statekeep_state):
            assert httpx.get(f"{url}/a", timeout=30).json() == {"key": "a", "numberValue": 2, "version": 1}, url
            assert httpx.get(f"{url}/last", timeout=30).json()["stringValue"] == "b", url
        code, out, _ = run(capsys, "functions", "querystate", "--url", pulsar.statekeep.url, "--tenant", "public",
                           "--namespace", "default", "--name", name, "--key", "a")
        assert (code, json.loads(out)) == (0, {"key": "a", "numberValue": 2, "version": 1})
        assert httpx.get(f"{pulsar.statekeep.url}/admin/v3/hosted-state/public/default").json().count(name) == 1
        listed = httpx.get(f"{pulsar.statekeep.url}/ui/api/functions", timeout=30).json()  # the console's
        assert [f.get("hosted") for f in listed if f["name"] == name] == [True]
        changelog = httpx.get(f"{pulsar.statekeep.url}/ui/api/functions/public/default/{name}/changelog").json()
        assert [r["numberValue"] for r in changelog["records"] if r["key"] == "a"] == [1, 2]

        # a counter is 8 bytes big-endian to the function's getState, as in Pulsar's own store
        assert ask(consumer, producer, "bytes:a") == ["a=" + (2).to_bytes(8, "big").decode()]

        # writes through Pulsar's REST (multipart, as pulsar-admin putstate) and through statekeep's
        answer = httpx.post(f"{pulsar_state}/p", timeout=30, files={
            "state": (None, json.dumps({"key": "p", "stringValue": "from-pulsar"}), "application/json")})
        assert answer.status_code == 204, answer.text
        answer = httpx.post(f"{pulsar_state}/n", timeout=30, files={
            "state": (None, json.dumps({"key": "n", "numberValue": 41}), "application/json")})
        assert answer.status_code == 204, answer.text
        assert httpx.post(f"{statekeep_state}/q", json={"key": "q", "numberValue": 9}, timeout=30).status_code == 200
        assert ask(consumer, producer, "bytes:p", "read:n", "count:n", "read:q", "count:q") == [
            "p=from-pulsar", "n=41", "n=42", "q=9", "q=10"]
        assert httpx.get(f"{statekeep_state}/p", timeout=30).json()["stringValue"] == "from-pulsar"
        assert httpx.get(f"{pulsar_state}/n", timeout=30).json()["numberValue"] == 42
        assert httpx.get(f"{pulsar_state}/q", timeout=30).json()["numberValue"] == 10

        # the worker SIGKILLed and started again: the function comes back to its state. Pulsar's functions are
        # at-least-once: inputs whose acknowledgement the kill lost run again (the broker persists a subscription's
        # position about once a second: a count:q again makes q 11), and
        # outputs the check consumer had acknowledged may come again; "read:fresh" marks where the new ones begin
        producer.close()
        consumer.close()
        pulsar.broker.restart()
        wait_running(pulsar.web_url, name)
        consumer = client.subscribe(f"persistent://public/default/{sink}", "check", schema=string)
        producer = client.create_producer(f"persistent://public/default/{source}", schema=string)
        producer.send("read:fresh")
        while _outputs(lib, consumer, 1) != ["fresh=0"]:
            pass
        a, q = (int(out.split("=")[1]) for out in ask(consumer, producer, "read:a", "read:q"))
        assert a >= 2 and q >= 10  # none lost; more if the kill lost acknowledgements of count:a or count:q
        for url in (pulsar_state, statekeep_state):
            assert httpx.get(f"{url}/a", timeout=30).json()["numberValue"] == a
            assert httpx.get(f"{url}/q", timeout=30).json()["numberValue"] == q
        assert ask(consumer, producer, "count:a") == [f"a={a + 1}"]

        # deleted through Pulsar: its state is deleted with it (the provider's cleanUp)
        producer.close()
        consumer.close()
        assert httpx.delete(f"{pulsar.web_url}/admin/v3/functions/public/default/{name}",
                            timeout=60).status_code == 204
        assert name not in httpx.get(f"{pulsar.statekeep.url}/admin/v3/hosted-state/public/default").json()
        assert httpx.get(f"{statekeep_state}/a", timeout=30).status_code == 404
    finally:
        client.close()

