"""The test infrastructure itself, on real servers: moto's S3 API behind BlobStore (``s3_server``), a
3-node ZooKeeper ensemble (``zk_ensemble``) that keeps a zk:// store serving through a leader crash and
through an outage of all its servers, and a 3-node etcd cluster (``etcd_cluster``) through a leader crash."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import pytest
from conftest import need

from statekeep.errors import PossibleInconsistentStateError, StoreUnavailableError
from statekeep.handles.blobs import BlobStore
from statekeep.metadata import open_store
from statekeep.retry import OUTAGE
from statekeep.testing import wait_for

T = TypeVar("T")

# ---- S3 (moto) ----------------------------------------------------------------------------------------


def _read(blobs: BlobStore, ref) -> bytes:
    with blobs.open(ref.url, ref.size, ref.sha256) as reader:
        return reader.read()


@pytest.mark.parametrize("how", ["storage_options", "environment"])
def test_blobstore_writes_reads_lists_and_deletes_on_moto(s3_server, how):
    options = s3_server.storage_options if how == "storage_options" else None  # else AWS_ENDPOINT_URL
    base = s3_server.url("blobs")
    blobs = BlobStore(base, options=options, chunk_size=1 << 20)
    assert blobs.url == base and not blobs.local
    small = blobs.write("scope", "small", b"hello")
    large_state = os.urandom(11 << 20)  # more than two 5 MiB parts: a multipart upload
    large = blobs.write("scope", "large", iter([large_state[i:i + 700_000]
                                                for i in range(0, len(large_state), 700_000)]))
    assert small.url.startswith(base + "/") and large.size == len(large_state)
    assert _read(blobs, small) == b"hello" and _read(blobs, large) == large_state
    listed = blobs.list("scope")
    assert sorted(info.url for info in listed) == sorted([small.url, large.url])
    assert {info.url: info.size for info in listed} == {small.url: 5, large.url: len(large_state)}
    assert not any(info.temporary for info in listed)
    assert blobs.list("other-scope") == []

    assert blobs.delete(small.url) and not blobs.exists(small.url) and blobs.exists(large.url)
    # a second delete does not fail; on S3 it returns True, not the False of BlobStore.delete's docstring:
    # DeleteObject of a missing key succeeds, so s3fs's rm_file raises no FileNotFoundError
    blobs.delete(small.url)
    assert not blobs.exists(small.url)
    assert [info.url for info in blobs.list("scope")] == [large.url]
    assert blobs.delete(large.url) and blobs.list("scope") == []


def test_two_buckets_and_fresh_prefixes(s3_server):
    first, second = s3_server.url("p"), s3_server.url("p")
    assert first != second and first.startswith(f"s3://{s3_server.bucket}/p-")
    other = BlobStore(s3_server.url("p", bucket=s3_server.buckets[1]))
    ref = other.write("s", "k", b"elsewhere")
    assert ref.url.startswith(f"s3://{s3_server.buckets[1]}/") and _read(other, ref) == b"elsewhere"
    assert BlobStore(first).list("s") == []


def test_a_child_process_reaches_moto_through_the_inherited_environment(s3_server):
    """What a Spark executor does: it inherits the environment and passes no storage options."""
    url = s3_server.url("child") + "/object"
    script = ("import sys, fsspec\n"
              "fs = fsspec.filesystem('s3')\n"
              "with fs.open(sys.argv[1], 'wb') as f:\n"
              "    f.write(b'from the child')\n")
    subprocess.run([sys.executable, "-c", script, url], check=True, timeout=120, env=dict(os.environ))
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
    assert fs.cat(url) == b"from the child"


# ---- a ZooKeeper ensemble ------------------------------------------------------------------------------


def _retry(action: Callable[[], T], seconds: float = 20.0) -> T:
    """``action()`` until it stops raising StoreUnavailableError (bounded, so a dead store fails the test)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return action()
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class _Writer(threading.Thread):
    """Puts distinct keys through one store until stopped, sorting each put by its outcome."""

    def __init__(self, store) -> None:
        super().__init__(name="ensemble-writer", daemon=True)
        self.store = store
        self.acked: dict[str, bytes] = {}
        self.unknown: list[str] = []   # PossibleInconsistentStateError: may or may not be written
        self.refused: list[str] = []   # StoreUnavailableError: nothing was written
        self.errors: list[BaseException] = []
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            path, value = f"/w/{n:07d}", f"value {n}".encode()
            n += 1
            try:
                self.store.put(path, value)
            except PossibleInconsistentStateError:
                self.unknown.append(path)
            except StoreUnavailableError:
                self.refused.append(path)
                time.sleep(0.05)
            except BaseException as e:  # anything else is a failure of the test
                self.errors.append(e)
                return
            else:
                self.acked[path] = value
            time.sleep(0.005)

    def acks_beyond(self, count: int, more: int = 20) -> bool:
        return wait_for(lambda: len(self.acked) >= count + more, timeout=60, interval=0.05)


@pytest.mark.slow
def test_a_store_on_the_ensemble_survives_a_leader_crash_and_a_full_outage(zk_ensemble):
    ensemble = zk_ensemble
    url = ensemble.url(f"/t{uuid.uuid4().hex[:12]}")
    assert url.startswith("zk://") and url.count("127.0.0.1:") == 3
    store = open_store(url, timeout=5)
    writer = _Writer(store)
    try:
        store.put("/before", b"1")
        writer.start()
        assert writer.acks_beyond(0)

        # the leader crashes: two servers keep the quorum and elect a new leader
        old_leader = ensemble.leader()
        ensemble.kill(old_leader)
        assert ensemble.modes()[old_leader] is None
        _retry(lambda: store.put("/after-leader-crash", b"2"))
        assert _retry(lambda: store.get("/after-leader-crash")).value == b"2"
        assert ensemble.leader() != old_leader
        assert writer.acks_beyond(len(writer.acked))
        ensemble.restart(old_leader)  # rejoins on its dataDir
        assert ensemble.modes()[old_leader] in ("follower", "leader")
        assert writer.acks_beyond(len(writer.acked))

        # all three down for 8 s, then started again on their dataDirs: the same store object recovers
        ensemble.stop_all_for(8)
        assert all(mode in ("follower", "leader") for mode in ensemble.modes())
        _retry(lambda: store.put("/after-outage", b"3"), seconds=30)
        assert _retry(lambda: store.get("/after-outage")).value == b"3"
        assert writer.acks_beyond(len(writer.acked))
    finally:
        writer.halt.set()
        writer.join(30)
        ensemble.start_all()  # leave the shared ensemble whole for the next test

    assert writer.errors == []
    acked = writer.acked
    paths = sorted(acked)
    for reader in (store, open_store(url, timeout=10)):  # this session, and another client's
        got = _retry(lambda: reader.get_many(paths))
        lost = [p for p, result in zip(paths, got) if result is None or result.value != acked[p]]
        assert lost == [], f"{len(lost)} of {len(paths)} acknowledged writes lost"
        assert [_retry(lambda: reader.get(p)).value for p in ("/before", "/after-leader-crash", "/after-outage")] \
            == [b"1", b"2", b"3"]
        # "nothing was written" where a put raised StoreUnavailableError rather than PossibleInconsistentStateError
        assert _retry(lambda: reader.get_many(writer.refused)) == [None] * len(writer.refused)
        reader.close()


# ---- an etcd cluster ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_store_on_the_etcd_cluster_survives_a_leader_crash(etcd_cluster):
    """The etcd cluster has the ensemble's shape (url, leader, kill, restart): after its leader's SIGKILL the
    two others elect another, and plain overwrites through the retry policy (OUTAGE.repeat) all land; the
    killed member restarts on its data dir (``--initial-cluster-state existing``) and serves what was
    written while it was down."""
    cluster = etcd_cluster
    prefix = f"/t{uuid.uuid4().hex[:12]}"
    url = cluster.url(prefix)
    assert url.startswith("etcd://") and url.count("127.0.0.1:") == 3
    store = open_store(url)
    killed = None
    try:
        OUTAGE.repeat(lambda: store.put("/before", b"1"))
        killed = cluster.leader()
        cluster.kill(killed)
        for n in range(20):  # the first ones go while the others notice the crash and elect a leader
            OUTAGE.repeat(lambda: store.put(f"/after/{n:02d}", b"%d" % n))
        assert cluster.leader() != killed
        restarted, killed = killed, None
        cluster.restart(restarted)
        assert cluster.leader() in range(3)
        with open_store(f"etcd://{cluster.servers[restarted].address}{prefix}") as member:
            assert wait_for(lambda: OUTAGE.repeat(lambda: member.get("/after/19")) is not None, timeout=30)
            assert [r.value for r in OUTAGE.repeat(lambda: member.get_many(
                ["/before", *(f"/after/{n:02d}" for n in range(20))]))] == [b"1", *(b"%d" % n for n in range(20))]
    finally:
        if killed is not None:
            cluster.restart(killed)  # leave the shared cluster whole for the next test
        store.close()


# ---- Kafka: a broker, a 3-node cluster ----------------------------------------------------------------------


def _producer(bootstrap: str, **settings):
    confluent = need("confluent_kafka")
    from statekeep.kafka import client_config

    return confluent.Producer(client_config(bootstrap, **{"acks": "all", "enable.idempotence": True, **settings}))


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], **settings) -> None:
    """Send ``records`` (key, value), keyed to partitions by the default partitioner, and wait until each
    is acknowledged by every in-sync replica; any delivery error fails."""
    producer, failed = _producer(bootstrap, **settings), []
    for key, value in records:
        producer.produce(topic, value, key, on_delivery=lambda err, msg: err and failed.append(err))
    assert producer.flush(60) == 0 and failed == []


def _consume(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[tuple]:
    """Every record of ``topic`` from its start to its end now (each partition's high watermark),
    ``(partition, key, value)`` sorted, read with ``isolation`` by a consumer of no group. A read_committed
    read waits for every transaction open there to end (its position passes the markers)."""
    confluent = need("confluent_kafka")
    from statekeep.kafka import admin, client_config

    def consumer_of(isolation: str):
        return confluent.Consumer(client_config(bootstrap, **{
            "group.id": "unused", "enable.auto.commit": False, "isolation.level": isolation}))

    deadline = time.monotonic() + 60
    partitions = sorted(admin.describe(bootstrap, topic))
    marks = consumer_of("read_uncommitted")  # its watermarks are the high ones (read_committed's: the stable ones)

    def watermarks(partition: int) -> tuple[int, int]:
        while True:  # a leader just elected or restarted answers "not available" for a moment
            try:
                return marks.get_watermark_offsets(confluent.TopicPartition(topic, partition), timeout=5)
            except confluent.KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    ends = {p: high for p, (low, high) in ((p, watermarks(p)) for p in partitions)
            if high > low}  # an empty partition has no position to wait for
    marks.close()
    consumer = consumer_of(isolation)
    consumer.assign([confluent.TopicPartition(topic, p, confluent.OFFSET_BEGINNING) for p in partitions])
    got: list[tuple] = []
    try:
        # the position passes aborted records and transaction markers too: at the end it is the watermark
        while any(tp.offset < ends[tp.partition] for tp in consumer.position(
                [confluent.TopicPartition(topic, p) for p in ends])):
            assert time.monotonic() < deadline, f"{topic} not read to {ends} in time"
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                got.append((message.partition(), message.key(), message.value()))
    finally:
        consumer.close()
    return sorted(got)


def _records(prefix: str, n: int) -> list[tuple[bytes, bytes]]:
    return [(f"k{i % 7}".encode(), f"{prefix}-{i}".encode()) for i in range(n)]


def _values(consumed: list[tuple]) -> list[bytes]:
    return sorted(value for _, _, value in consumed)


def test_a_kafka_broker_serves_records_and_transactions(kafka):
    """The session broker: records in, the same records out; a committed transaction is read by
    read_committed consumers and an aborted one is not (read_uncommitted sees both)."""
    from statekeep.kafka import admin

    assert kafka.address == f"127.0.0.1:{kafka.port}" and admin.wait_reachable(kafka.address) == [1]
    topic = f"t-{uuid.uuid4().hex[:12]}"
    kafka.create_topic(topic, partitions=3)
    assert sorted(admin.describe(kafka.address, topic)) == [0, 1, 2]
    plain = _records("plain", 30)
    _produce(kafka.address, topic, plain)
    consumed = _consume(kafka.address, topic)
    assert _values(consumed) == sorted(v for _, v in plain)
    assert {p for p, _, _ in consumed} == {0, 1, 2}  # keys spread over the partitions
    by_key = {key: {p for p, k, _ in consumed if k == key} for key, _ in plain}
    assert all(len(partitions) == 1 for partitions in by_key.values())  # one key, one partition

    producer = _producer(kafka.address, **{"transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
                                           "transaction.timeout.ms": 10_000})
    producer.init_transactions(30)
    for outcome in ("committed", "aborted"):
        producer.begin_transaction()
        for key, value in _records(outcome, 10):
            producer.produce(topic, value, key)
        producer.flush(30)
        (producer.commit_transaction if outcome == "committed" else producer.abort_transaction)(30)
    committed = sorted(v for _, v in plain + _records("committed", 10))
    assert _values(_consume(kafka.address, topic, "read_committed")) == committed
    assert _values(_consume(kafka.address, topic, "read_uncommitted")) == sorted(
        committed + [v for _, v in _records("aborted", 10)])


@pytest.mark.slow
def test_a_killed_kafka_broker_restarts_with_its_topics_and_records(start_kafka):
    """SIGKILL, then a start on the same data dir and ports: the topic, its committed records and its
    committed transaction are all there, and it takes new ones. The broker creates topics on request, as
    many do (``auto.create.topics.enable``): describing an unknown topic still creates none."""
    from statekeep.errors import NotFoundError
    from statekeep.kafka import admin

    server = start_kafka({"auto.create.topics.enable": "true"})
    try:
        for _ in range(2):  # the first request would have created it; the second would see it
            with pytest.raises(NotFoundError):
                admin.describe(server.address, "never-created")
        topic, port = "kept", server.port
        server.create_topic(topic, partitions=2)
        _produce(server.address, topic, _records("before", 20))
        producer = _producer(server.address, **{"transactional.id": "tx-kept"})
        producer.init_transactions(30)
        producer.begin_transaction()
        _ = [producer.produce(topic, value, key) for key, value in _records("tx", 5)]
        producer.commit_transaction(30)
        # killed only once the commit's markers are written: a single node killed before (commit_transaction
        # returns when the coordinator has logged the commit) may come back with the transaction hanging, every
        # read_committed reader stopped before it for good (see statekeep.testing.servers.KafkaServer)
        assert len(_consume(server.address, topic)) == 25
        server.kill()
        assert not server.running
        with pytest.raises(StoreUnavailableError):
            admin.wait_reachable(server.address, timeout=1.0)
        server.restart()
        assert server.port == port and sorted(admin.describe(server.address, topic)) == [0, 1]
        _produce(server.address, topic, _records("after", 5))
        assert _values(_consume(server.address, topic)) == sorted(
            v for _, v in _records("before", 20) + _records("tx", 5) + _records("after", 5))
    finally:
        server.stop()
    assert not server.data_dir.exists()


@pytest.mark.slow
def test_a_kafka_cluster_elects_new_leaders_and_survives_a_full_outage(kafka_cluster):
    """Three nodes, a topic of 3 partitions at replication 3 (min ISR 2), listed by every broker once created: its
    leader's SIGKILL moves the leadership to a live node and acks=all writes and reads go on; the node restarts
    and rejoins the ISR; after all three are down for 8 s everything works again, and no acknowledged record is
    lost."""
    from statekeep.kafka import admin

    cluster = kafka_cluster
    assert cluster.bootstrap == ",".join(s.address for s in cluster.servers) and cluster.bootstrap.count(",") == 2
    topic = f"t-{uuid.uuid4().hex[:12]}"
    cluster.create_topic(topic, partitions=3)  # replication 3 by default
    for server in cluster.servers:  # created: every broker lists it with its leaders (each learns it a little later)
        assert all(leader > 0 for leader, _, _ in admin.describe(server.address, topic).values())
    described = admin.describe(cluster.bootstrap, topic)
    assert sorted(described) == [0, 1, 2]
    assert all(sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3] for _, replicas, isr in described.values())
    sent = _records("first", 30)
    _produce(cluster.bootstrap, topic, sent)

    killed = cluster.leader(topic, 0)
    assert described[0][0] == killed + 1  # the index is the node id less one
    try:
        cluster.kill(killed)
        moved = cluster.leader(topic, 0)
        assert moved != killed and cluster.servers[moved].running
        isr = admin.describe(cluster.bootstrap, topic)[0][2]
        assert killed + 1 not in isr and len(isr) == 2
        sent += _records("one-down", 30)
        _produce(cluster.bootstrap, topic, _records("one-down", 30))  # min ISR 2 of the 2 left
        assert _values(_consume(cluster.bootstrap, topic)) == sorted(v for _, v in sent)
        cluster.restart(killed)
        killed = None
        assert wait_for(lambda: all(sorted(isr) == [1, 2, 3] for _, _, isr in admin.describe(
            cluster.bootstrap, topic).values()), timeout=60, interval=0.2)  # caught up, back in every ISR

        cluster.stop_all_for(8)
        assert all(server.running for server in cluster.servers)
        assert all(cluster.leader(topic, p) in range(3) for p in range(3))
        sent += _records("after-outage", 30)
        _produce(cluster.bootstrap, topic, _records("after-outage", 30))
        assert _values(_consume(cluster.bootstrap, topic)) == sorted(v for _, v in sent)
    finally:
        if killed is not None:
            cluster.restart(killed)  # leave the shared cluster whole for the next test
        cluster.start_all()
