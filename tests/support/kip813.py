"""Helpers of the KIP-813 tests: Kafka's default partitioner (murmur2) in Python, a raw read of a topic (tombstones
as None), and the Kafka Streams test application (tests/kafka_streams_app) as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (as an unsigned 32-bit int)."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(length // 4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Java's default partitioner gives a record of ``key``: ``toPositive(murmur2(key)) % n``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def read_topic(bootstrap: str, topic: str) -> list[tuple[int, int, bytes, bytes | None]]:
    """Every committed record of ``topic`` as ``(partition, offset, key, value)`` (None: a tombstone), partition
    after partition, offset order: a ``read_committed`` reader of its own."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kip813-test", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    out = []
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, p, low)])
            while True:
                message = consumer.poll(10)
                assert message is not None, f"{topic}[{p}]: no end within 10 s"
                if message.error():
                    assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                    break
                out.append((p, message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return out


def newest(records: list[tuple[int, int, bytes, bytes | None]]) -> dict[bytes, bytes]:
    """Each key's newest value in ``records`` (as :func:`read_topic` gives them), keys whose newest is a tombstone
    left out: what a reader of the whole compacted topic holds."""
    out: dict[bytes, bytes | None] = {}
    for _, _, key, value in records:
        out[key] = value
    return {k: v for k, v in out.items() if v is not None}


APP = Path(__file__).parent.parent / "kafka_streams_app"
#: the command that builds the application (at setup: scripts/test runs it)
BUILD_COMMAND = "scripts/kafka-streams-app"


def app_jar() -> Path:
    """Where the application's jar is built: a cache outside the repository (beside statekeep's jar cache),
    named after a hash of the application's pom and sources and of the Kafka version (another source, another
    build)."""
    import hashlib

    from statekeep import jars

    digest = hashlib.sha256(jars.KAFKA_VERSION.encode())
    for path in sorted([APP / "pom.xml", *APP.rglob("*.java")]):
        digest.update(path.relative_to(APP).as_posix().encode() + b"\0" + path.read_bytes())
    return jars.cache_dir().parent / "test-apps" / f"kafka-streams-app-{digest.hexdigest()[:12]}" / "app.jar"


def build() -> Path:
    """Build the application with Maven (``mvn -q package``: Maven Central for its plugins and Kafka Streams, so at
    setup, never while the tests run) unless it is built; its jar."""
    import shutil
    import tempfile

    from statekeep import jars

    jar = app_jar()
    if jar.exists():
        return jar
    jar.parent.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=jar.parent.parent))
    try:
        subprocess.run(["mvn", "-q", "-B", "package", f"-Dapp.build={work}", f"-Dkafka.version={jars.KAFKA_VERSION}"],
                       cwd=APP, check=True)
        (work / "out").mkdir()
        (work / "kafka-streams-app.jar").rename(work / "out" / "app.jar")
        (work / "out").rename(jar.parent)  # whole, or not there
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return jar


def app_classpath() -> str | None:
    """The application's ``java -cp``: its jar and the ``kafka-streams`` jar bundle's; None if either is missing
    (``scripts/kafka-streams-app`` builds both)."""
    from statekeep import jars
    from statekeep.errors import MissingDependencyError

    jar = app_jar()
    try:
        return f"{jar}:{jars.classpath('kafka-streams')}" if jar.exists() else None
    except MissingDependencyError:
        return None


class StreamsApp:
    """The Kafka Streams test application (``tests/kafka_streams_app``) as a subprocess: ``mode`` ``follow``
    (a read-only store of ``topic``, Topology.addReadOnlyStateStore) or ``count`` (groupByKey().count() of
    ``topic``), with interactive queries over HTTP on a free port (:meth:`get`, :meth:`all`)."""

    def __init__(self, jar_classpath: str, mode: str, bootstrap: str, app_id: str, topic: str, state_dir: Path,
                 log: Path, *, value: str = "long", store: str = "counts", extra: dict[str, str] | None = None) -> None:
        from statekeep.testing.servers import free_port

        self.port = free_port()
        self.log = log
        args = {"mode": mode, "bootstrap": bootstrap, "app-id": app_id, "topic": topic, "port": str(self.port),
                "state-dir": str(state_dir), "value": value, "store": store, **(extra or {})}
        command = ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                   "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", jar_classpath,
                   "statekeep.test.StreamsApp", *[f"--{k}={v}" for k, v in args.items()]]
        with open(log, "ab") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def _ask(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def wait_running(self, timeout: float = 120) -> None:
        """Until the application is RUNNING (its stores restored) and answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the Kafka Streams app exited: {self.log.read_text()[-3000:]}"
            try:
                if self._ask("/ready") == {"state": "RUNNING"}:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"the Kafka Streams app was not RUNNING within {timeout} s: "
                             f"{self.log.read_text()[-3000:]}")

    def get(self, key: str) -> dict[str, Any] | None:
        """``{"key", "value", "partition"}`` of ``key`` from its interactive query (``partition``: where Kafka
        Streams' key-to-instance metadata puts the key), None if the store has no such key."""
        from urllib.parse import quote

        return self._ask(f"/get?key={quote(key)}")  # type: ignore[no-any-return]

    def all(self) -> dict[str, Any]:
        return self._ask("/all")  # type: ignore[no-any-return]

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)
        self.process.wait()

    def stop(self) -> None:
        """A clean shutdown (SIGTERM: KafkaStreams.close()), SIGKILL after 30 s."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


def produce_raw(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None]], *,
                abort: bool = False) -> None:
    """``(key, value)`` records (a None value: a tombstone) into ``topic`` in one transaction, each in the
    partition Java's default partitioner gives its key; ``abort``: the transaction is aborted instead."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"kip813-test-{uuid.uuid4().hex}",
                         "partitioner": "murmur2_random", "linger.ms": 1})
    producer.init_transactions(30)
    producer.begin_transaction()
    for key, value in records:
        producer.produce(topic, value, key)
    if abort:
        producer.flush(30)
        producer.abort_transaction(30)
    else:
        producer.commit_transaction(30)


def long(n: int) -> bytes:
    """``Serdes.Long()``'s bytes of ``n``."""
    return n.to_bytes(8, "big", signed=True)


if __name__ == "__main__":  # scripts/kafka-streams-app
    print(build())
