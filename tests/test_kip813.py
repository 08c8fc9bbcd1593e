"""KIP-813 on Kafka, in Python against a real broker: a function's state changes on a compacted Kafka topic in the
byte forms Kafka Streams reads (keys placed by Kafka's default partitioner, counters as ``Serdes.Long()``, typed
values as JSON or MessagePack, deletes as tombstones, statekeep's internal entries never), and statekeep's
followers of a Kafka changelog topic (get, prefix scan, changes as they come, lag, compaction, a follower away
longer than the topic keeps tombstones). The tests against a Kafka Streams application are in
test_kip813_streams.py."""

from __future__ import annotations

import json
import uuid

import msgspec
import pytest

from statekeep.errors import InvalidArgumentError, NotFoundError
from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import run_registered
from statekeep.testing import wait_for
from support.kip813 import newest, partition_of, read_topic

TYPED = b'''
import dataclasses

@dataclasses.dataclass
class Seen:
    n: int
    last: str

def process(input, context):
    key = input["k"]
    if input.get("op") == "del":
        context.del_counter(key)
        context.del_state("b:" + key)
        context.value_state("seen", Seen).clear()
        return None
    context.incr_counter(key, 1)
    context.put_state("b:" + key, input["v"])
    seen = context.value_state("seen", Seen)
    old = seen.get()
    seen.update(Seen((old.n if old else 0) + 1, input["v"]))
    context.list_state("history", str).append(input["v"])
    context.map_state("tags", str, int).put(input["v"], len(input["v"]))
    context.register_timer(context.get_current_processing_time() + 3_600_000, "processing")  # internal time state
    return None
'''


def changelog(kafka, partitions: int = 3, **config) -> str:
    name = f"cl{uuid.uuid4().hex[:10]}"
    kafka.create_topic(name, partitions=partitions, config={"cleanup.policy": "compact", **config})
    return name


def run(service, url, tmp_path, name, spark) -> dict:
    query = run_registered(service, url, "public", "default", name, checkpoint_root=str(tmp_path / "ck" / name),
                           once=True, spark=spark)
    query.await_termination()
    return query.status()


def write_input(path, records) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with open(path / f"{uuid.uuid4().hex}.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def test_a_functions_state_changes_on_a_compacted_topic_in_kafka_streams_byte_forms(kafka, spark, tmp_path):
    """Counters as 8-byte big-endian, byte values as they are, typed entries keyed by their state key with JSON
    values (and MessagePack for a function asking for it), deletes as tombstones; each record in the partition
    Kafka's default partitioner gives its key; the topic's newest record per key is the function's state; no
    internal entry (timers, the TTL index, a list's bounds) on it."""
    url = f"local://{tmp_path / 'data'}"
    inputs = tmp_path / "in"
    write_input(inputs, [{"k": f"k{i % 7}", "v": f"v{i}"} for i in range(40)])
    topics = {"json": changelog(kafka), "msgpack": changelog(kafka)}
    with FunctionService.open(url) as service:
        for form, topic in topics.items():
            service.registry.create({"tenant": "public", "namespace": "default", "name": form, "inputs": [str(inputs)],
                                     "keyField": "k", "parallelism": 2, "changelogFormat": form,
                                     "changelogTopic": f"kafka://{kafka.address}/{topic}"}, TYPED)
            assert run(service, url, tmp_path, form, spark)["error"] is None
        write_input(inputs, [{"k": "k3", "op": "del"}, {"k": "k5", "op": "del"}, {"k": "k5", "v": "again"}])
        for form in topics:
            assert run(service, url, tmp_path, form, spark)["error"] is None
        for form, topic in topics.items():
            records = read_topic(kafka.address, topic)
            assert all(p == partition_of(key, 3) for p, _, key, _ in records)  # Java's default partitioner
            assert all(not key.startswith(b"\0") or key.startswith(b"\0v") for _, _, key, _ in records)
            assert not [key for _, _, key, _ in records if key.endswith(b"\0#")]  # a list's bounds: internal
            state = service.registry.state_store("public", "default", form)
            assert (b"k3", None) in [(k, v) for _, _, k, v in records]  # a delete is a tombstone
            got = newest(records)
            user = {e.key.encode(): e.counter.to_bytes(8, "big", signed=True) if e.kind == "counter" else e.value
                    for e in state.scan_entries() if not e.key.startswith("\0")}
            assert {k: v for k, v in got.items() if not k.startswith(b"\0")} == user
            assert user[b"k0"] == (6).to_bytes(8, "big") and user[b"b:k0"] == b"v35"
            assert b"k3" not in user and user[b"k5"] == (1).to_bytes(8, "big")  # deleted, then counted again
            typed = {k: v for k, v in got.items() if k.startswith(b"\0")}
            seen = typed["\0v2:k0seen\0=".encode()]
            decode = json.loads if form == "json" else msgspec.msgpack.decode
            assert decode(seen) == {"n": 6, "last": "v35"}
            assert decode(typed["\0v2:k0tags\0msv35".encode()]) == 3
            assert sorted(decode(v) for k, v in typed.items() if k.startswith(b"\0v2:k0history\0l")) == sorted(
                f"v{i}" for i in range(0, 40, 7))
            assert "\0v2:k3seen\0=".encode() not in typed and "\0v2:k5seen\0=".encode() in typed


def test_changelog_settings_are_checked_before_anything_runs(kafka, spark, tmp_path):
    """A changelogTopic that is not compacted, that the cluster does not have, or on another cluster than the
    function's Kafka output, fails the function before it starts, naming it; nothing is written."""
    url = f"local://{tmp_path / 'data'}"
    inputs = tmp_path / "in"
    write_input(inputs, [{"k": "a", "v": "x"}])
    plain = f"t{uuid.uuid4().hex[:10]}"
    kafka.create_topic(plain, partitions=1)
    code = b"def process(input, context):\n    context.incr_counter(input['k'], 1)\n"
    with FunctionService.open(url) as service:
        for name, topic, error in (("plain", plain, "cleanup.policy is 'delete', not compact"),
                                   ("absent", "nosuchtopic", "no topic 'nosuchtopic'")):
            service.registry.create({"tenant": "public", "namespace": "default", "name": name, "keyField": "k",
                                     "inputs": [str(inputs)], "changelogTopic": f"kafka://{kafka.address}/{topic}"},
                                    code)
            with pytest.raises((InvalidArgumentError, NotFoundError), match=error):
                run(service, url, tmp_path, name, spark)
            assert list(service.registry.state_store("public", "default", name).scan_entries()) == []
        other = changelog(kafka)
        service.registry.create({"tenant": "public", "namespace": "default", "name": "two", "keyField": "k",
                                 "inputs": [str(inputs)], "output": f"kafka://127.0.0.1:1/{other}",
                                 "changelogTopic": f"kafka://{kafka.address}/{other}"}, code)
        with pytest.raises(InvalidArgumentError, match="one cluster"):
            run(service, url, tmp_path, "two", spark)
        assert read_topic(kafka.address, plain) == []


# -- statekeep's followers of a Kafka changelog topic ---------------------------------------------------------------


def follow(kafka, topic: str, tmp_path, where: str = "f", **options):
    from statekeep.changelog import FollowerStore

    return FollowerStore.open(f"kafka://{kafka.address}/{topic}?value=long", "public", "default", "counts",
                              local_dir=str(tmp_path / where), **options)


def test_a_follower_of_a_kafka_topic_serves_gets_scans_changes_lag_and_resumes(kafka, tmp_path):
    """A follower of a 3-partition topic of ``Serdes.Long()`` counts: it serves get, get_counter and prefix scans
    from its own copy, hands over each batch of changes as they come, reports its lag in records and ms, never
    shows an aborted transaction's records, applies tombstones, refuses writes, resumes where it stopped (no
    bootstrap), and stops on a record its serde cannot read, naming it."""
    from statekeep.errors import ReadOnlyStoreError
    from statekeep.kafka.follower import KafkaFollowerStore, SerdeError
    from support.kip813 import long, produce_raw

    topic = changelog(kafka)
    produce_raw(kafka.address, topic, [(f"user-{i}".encode(), long(i)) for i in range(20)])
    produce_raw(kafka.address, topic, [(b"user-3", long(999))], abort=True)  # never seen
    seen: list = []
    follower = follow(kafka, topic, tmp_path, on_apply=seen.extend)
    try:
        assert isinstance(follower, KafkaFollowerStore)
        assert follower.wait_until_caught_up(30)
        assert follower.get_counter("user-3") == 3 and follower.get("user-4") == long(4)
        assert [k for k, _ in follower.scan(prefix="user-1")] == ["user-1"] + [f"user-1{i}" for i in range(10)]
        assert (follower.lag, follower.lag_ms) == (0, 0)
        produce_raw(kafka.address, topic, [(b"user-3", long(30)), (b"user-5", None), (b"new", long(-1))])
        assert follower.wait_until_caught_up(30)
        assert (follower.get_counter("user-3"), follower.get("user-5"), follower.get_counter("new")) == (30, None, -1)
        assert {(r.key, r.value) for r in seen[-3:]} == {("user-3", long(30)), ("user-5", None), ("new", long(-1))}
        with pytest.raises(ReadOnlyStoreError):
            follower.put("x", b"y")
        status = follower.status()
        assert status["source"].endswith(f"/{topic}?key=string&value=long") and status["phase"] == "tailing"
        ends = follower.leader.offsets([0, 1, 2])  # each partition's end for a read_committed reader
        assert status["positions"] == {str(p): end for p, end in ends.items()}
        generation = status["generation"]
    finally:
        follower.close()
    produce_raw(kafka.address, topic, [(b"user-7", long(70))])  # while it was away
    follower = follow(kafka, topic, tmp_path)
    try:
        assert follower.wait_until_caught_up(30)
        assert follower.status()["generation"] == generation  # resumed, not bootstrapped again
        assert follower.get_counter("user-7") == 70 and follower.get_counter("user-3") == 30
        produce_raw(kafka.address, topic, [(b"odd", b"\x01\x02\x03")])  # not 8 bytes
        with pytest.raises(SerdeError, match=rf"{topic}.*partition \d, offset \d+.*3 bytes"):
            follower.wait_until_caught_up(30)
        with pytest.raises(SerdeError):
            follower.get("user-1")
    finally:
        follower.close()


def compacted(kafka, topic: str, gone: bytes, timeout: float = 90) -> list:
    """Roll the topic's segments (a record every 0.2 s: its segment.ms is small) until compaction has dropped
    every record of key ``gone`` (its values, then its tombstone); the topic's records then."""
    import time

    from support.kip813 import long, produce_raw

    rolls = {}  # a key of each partition: a segment rolls when a record comes after its segment.ms
    for i in range(1000):
        rolls.setdefault(partition_of(b"roll%d" % i, 3), b"roll%d" % i)
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        records = read_topic(kafka.address, topic)
        if not [r for r in records if r[2] == gone]:
            return records
        n += 1
        produce_raw(kafka.address, topic, [(key, long(n)) for key in rolls.values()])
        time.sleep(0.2)
    raise AssertionError(f"{topic}: compaction did not drop {gone!r} within {timeout} s")


def test_followers_are_right_after_compaction_from_scratch_and_after_being_away_past_tombstones(kafka, tmp_path):
    """A topic compacted (small segments, a dirty ratio of 0.01, tombstones kept 1 s): a follower from scratch
    holds each key's newest value, deleted keys absent; one that stopped before a delete and comes back after
    compaction dropped its tombstone (away longer than half of delete.retention.ms) bootstraps again instead of
    resuming, so the deleted key is not served; both equal what a reader of the whole topic holds."""
    from support.kip813 import long, produce_raw

    topic = changelog(kafka, **{"segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
                                "delete.retention.ms": "1000", "min.compaction.lag.ms": "0"})
    for round_ in range(3):
        produce_raw(kafka.address, topic, [(f"k{i}".encode(), long(100 * round_ + i)) for i in range(6)])
    away = follow(kafka, topic, tmp_path, "away")
    assert away.wait_until_caught_up(30) and away.get_counter("k0") == 200
    generation = away.status()["generation"]
    away.close()
    produce_raw(kafka.address, topic, [(b"k0", None), (b"k1", long(-5))])
    records = compacted(kafka, topic, b"k0")
    assert len(records) < 3 * 6  # compacted: older values are gone
    want = {k.decode(): int.from_bytes(v, "big", signed=True) for k, v in newest(records).items()}
    assert "k0" not in want and want["k1"] == -5
    for where in ("away", "scratch"):
        follower = follow(kafka, topic, tmp_path, where)
        try:
            assert follower.wait_until_caught_up(30)
            got = {k: follower.get_counter(k) for k, _ in follower.scan()}
            assert {k: v for k, v in got.items() if not k.startswith("roll")} == {
                k: v for k, v in want.items() if not k.startswith("roll")}
            if where == "away":
                assert follower.status()["generation"] > generation  # bootstrapped again, not resumed
        finally:
            follower.close()


def test_a_kafka_topics_follower_through_the_cli_and_rest(kafka, tmp_path, capsys):
    """``statekeep followers get|status`` and a server's ``followers`` (``standalone --follow
    T/N/F@kafka://...?value=long``) take a Kafka topic as the leader: the key as FunctionState JSON, the lag,
    writes refused with 405."""
    from conftest import need
    from statekeep.cli.standalone import follower_specs
    from support.cli import run as cli
    from support.kip813 import long, produce_raw

    topic = changelog(kafka)
    produce_raw(kafka.address, topic, [(b"user-1", long(7)), (b"user-2", long(8)), (b"other", long(9))])
    leader = f"kafka://{kafka.address}/{topic}?value=long"
    named = ["--name", "counts", "--leader-store", leader, "--local-dir", str(tmp_path / "cli")]
    code, out, _ = cli(capsys, "followers", "get", *named, "--key", "user-1")
    assert code == 0 and json.loads(out) == {"key": "user-1", "numberValue": 7, "version": json.loads(out)["version"]}
    assert cli(capsys, "followers", "get", *named, "--key", "nope")[0] == 1
    code, out, _ = cli(capsys, "followers", "status", "--local-dir", str(tmp_path / "cli"), "--json")
    (row,) = json.loads(out)
    assert code == 0 and (row["name"], row["lag"], row["source"]) == ("counts", 0, leader.replace("?", "?key=string&"))
    code, _, err = cli(capsys, "followers", "get", "--name", "c", "--leader-store", f"{leader}&value=xml", "--key", "k")
    assert code != 0 and "value='xml'" in err

    need("fastapi")
    from fastapi.testclient import TestClient

    from statekeep.server import ServerConfig, create_app

    (spec,) = follower_specs([f"public/default/counts@{leader}&prefix=user-"], str(tmp_path / "srv"))
    assert spec["leader"] == leader and spec["key_prefix"] == "user-"
    with TestClient(create_app(ServerConfig(metadata_url="memory://", followers=[spec]))) as server:
        fol = "/admin/v3/followers/public/default/counts/state"
        assert wait_for(lambda: server.get(f"{fol}/user-2").status_code == 200, timeout=30)
        got = server.get(f"{fol}/user-2").json()
        assert got == {"key": "user-2", "numberValue": 8, "version": got["version"]}  # its version: its offset
        assert server.get(f"{fol}/other").status_code == 404  # not in the prefix
        assert [i["key"] for i in server.get(fol).json()["items"]] == ["user-1", "user-2"]
        assert server.post(f"{fol}/user-1", json={"numberValue": 1}).status_code == 405
        (status,) = server.get("/admin/v3/followers").json()
        assert (status["lag"], status["lagMs"], status["source"]) == (0, 0, spec["leader"].replace("?", "?key=string&"))


def test_a_partitions_delivery_goes_on_after_another_process_delivered_its_previous_batch(kafka, tmp_path):
    """Spark may run a partition's micro-batches in different Python workers: this process delivers batch 1 of a
    transactional id, another process batch 2 (its producer fences this one's), then this process batch 3. The
    third delivery fences again and goes through (it used to fail on the fenced producer, which without Spark's
    task retries failed the query); a read_committed reader has each batch once."""
    import subprocess
    import sys

    from statekeep.functions.messaging.kafka import KafkaDelivery, raw_table

    topic = changelog(kafka, partitions=1)
    ident = f"kip813-{uuid.uuid4().hex[:8]}"

    def table(batch: int):
        return raw_table(topic, [b"k%d" % batch], [b"%d" % batch])

    assert KafkaDelivery(kafka.address, ident).deliver(1, table(1))
    other = ("import sys; from statekeep.functions.messaging.kafka import KafkaDelivery, raw_table; "
             "assert KafkaDelivery(sys.argv[1], sys.argv[2]).deliver(2, raw_table(sys.argv[3], [b'k2'], [b'2']))")
    subprocess.run([sys.executable, "-c", other, kafka.address, ident, topic], check=True, timeout=120)
    assert KafkaDelivery(kafka.address, ident).deliver(3, table(3))
    assert not KafkaDelivery(kafka.address, ident).deliver(3, table(3), replay=True)  # delivered: not again
    assert [(k, v) for _, _, k, v in read_topic(kafka.address, topic)] == [(b"k1", b"1"), (b"k2", b"2"), (b"k3", b"3")]
