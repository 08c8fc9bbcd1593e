"""``spark.readStream.format("statekeep-pulsar")`` (statekeep.functions.driver.pulsar_source): a Pulsar topic on the
run's real broker (the ``pulsar`` fixture) as a Spark stream whose offsets are message ids in the checkpoint; bad
options and an unreachable broker refused in one line."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import datetime

import pytest

from statekeep.errors import InvalidArgumentError, NotFoundError, StoreUnavailableError
from statekeep.testing.servers import free_port
from support.pulsar import create_topic, read_all


def _options(**changes):
    return {"serviceUrl": f"pulsar://127.0.0.1:{free_port()}", "adminUrl": f"http://127.0.0.1:{free_port()}",
            "topic": "persistent://public/default/t", "timeoutSeconds": "2", **changes}


def test_bad_options_and_an_unreachable_broker_are_one_line_errors():
    from statekeep.functions.driver.pulsar_source import PulsarStreamReader

    for changes, message in [({"serviceUrl": "http://x"}, 'option "serviceUrl" must be given, e.g. pulsar://'),
                             ({"adminUrl": None}, 'option "adminUrl" must be given'),
                             ({"topic": "t"}, 'option "topic" must be given, e.g. persistent://public/default/t'),
                             ({"topic": "persistent://public/t"}, 'option "topic" must be persistent://TENANT/'),
                             ({"startingOffsets": "first"}, 'option "startingOffsets" must be earliest or latest'),
                             ({"timeoutSeconds": "soon"}, 'option "timeoutSeconds" must be a number')]:
        with pytest.raises(InvalidArgumentError, match="^" + message.replace("(", r"\(")) as caught:
            PulsarStreamReader({k: v for k, v in _options(**changes).items() if v is not None})
        assert "\n" not in str(caught.value)
    reader = PulsarStreamReader(_options())  # nothing listens on its ports
    with pytest.raises(StoreUnavailableError, match=r"^Pulsar at pulsar://127\.0\.0\.1:\d+ did not answer within 2 s"):
        reader.initialOffset()


def test_a_pulsar_topic_is_a_spark_stream_whose_replayed_batch_reads_the_same_messages(pulsar, spark, tmp_path):
    import pulsar as lib

    from statekeep.pulsar import register
    from statekeep.functions.driver.pulsar_source import PulsarStreamReader

    register(spark)
    topic = f"persistent://public/default/src-{uuid.uuid4().hex[:8]}"
    create_topic(pulsar.web_url, topic.rsplit("/", 1)[1], partitions=2)
    client = lib.Client(pulsar.service_url)
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    event_ms = 1_796_000_000_000

    sent: dict[bytes, bytes] = {}  # value -> its message id, serialized, as the producer got it

    def produce(first: int, n: int) -> None:
        for i in range(first, first + n):
            value = f"v{i}".encode()
            producer.send_async(value, lambda result, ident, value=value: sent.update({value: ident.serialize()}),
                                partition_key=f"k{i % 10}", properties={"i": str(i)}, event_timestamp=event_ms + i)
        producer.flush()

    produce(0, 40)
    batches: list[tuple[int, list[dict]]] = []

    def keep(frame, batch_id):
        batches.append((batch_id, [row.asDict() for row in frame.collect()]))

    checkpoint = tmp_path / "checkpoint"

    def run_once() -> None:
        query = (spark.readStream.format("statekeep-pulsar").option("serviceUrl", pulsar.service_url)
                 .option("adminUrl", pulsar.web_url).option("topic", topic).option("startingOffsets", "earliest")
                 .load().writeStream.foreachBatch(keep).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    try:
        run_once()
        assert [b for b, _ in batches] == [0]
        first = batches[0][1]
        assert sorted(r["value"] for r in first) == sorted(f"v{i}".encode() for i in range(40))
        row = next(r for r in first if r["value"] == b"v7")
        assert (row["key"], row["topic"], row["offset"], row["headers"]) == (b"k7", topic, None, [("i", b"7")])
        assert {r["value"]: r["messageId"] for r in first} == {v: sent[v] for v in sent}  # batched: batch indexes
        assert {lib.MessageId.deserialize(r["messageId"]).partition() for r in first} == {0, 1}
        assert row["eventTime"] == datetime.fromtimestamp((event_ms + 7) / 1000)  # Spark's: naive, local time
        assert row["timestamp"] is not None
        assert all(lib.MessageId.deserialize(r["messageId"]).partition() == r["partition"] for r in first)
        for p in (0, 1):  # each partition's messages in publish order
            order = [int(r["value"][1:]) for r in first if r["partition"] == p]
            assert order == sorted(order)
        offsets = json.loads((checkpoint / "offsets" / "0").read_text().splitlines()[-1])
        assert offsets["topic"] == topic and set(offsets["partitions"]) == {"0", "1"}

        # batch 0's commit lost (as in a crash after the sink wrote): it is run again from its offsets in the
        # checkpoint and reads the same messages, although the topic has more now; the next batch reads those
        produce(40, 10)
        (checkpoint / "commits" / "0").unlink()
        run_once()
        assert [b for b, _ in batches] == [0, 0, 1]
        assert sorted(r["messageId"] for r in batches[1][1]) == sorted(r["messageId"] for r in first)
        assert sorted(r["value"] for r in batches[2][1]) == sorted(f"v{i}".encode() for i in range(40, 50))

        # an unknown topic: one line
        with pytest.raises(NotFoundError, match=r"^Pulsar topic persistent://public/default/nope does not exist on "
                                                r"pulsar://127\.0\.0\.1:\d+: create it \(pulsar-admin topics create"):
            PulsarStreamReader(_options(serviceUrl=pulsar.service_url, adminUrl=pulsar.web_url,
                                        topic="persistent://public/default/nope")).initialOffset()
    finally:
        client.close()
        shutil.rmtree(checkpoint, ignore_errors=True)


def test_a_read_limit_splits_a_topic_into_micro_batches_of_whole_entries(pulsar, spark, tmp_path):
    """maxEntriesPerTrigger: each micro-batch reads at most that many broker entries (split over the partitions
    behind), a batching producer's entry whole; every message once, each partition's in order."""
    import pulsar as lib

    from statekeep.pulsar import register
    from statekeep.functions.driver.pulsar_source import PulsarStreamReader

    with pytest.raises(InvalidArgumentError, match='^option "maxEntriesPerTrigger" must be a positive int, not'):
        PulsarStreamReader(_options(maxEntriesPerTrigger="0"))
    register(spark)
    topic = f"persistent://public/default/limit-{uuid.uuid4().hex[:8]}"
    create_topic(pulsar.web_url, topic.rsplit("/", 1)[1], partitions=2)
    client = lib.Client(pulsar.service_url)
    try:
        single = client.create_producer(topic, batching_enabled=False)
        for i in range(30):  # an entry each
            single.send(f"v{i}".encode(), partition_key=f"k{i % 5}")
        batched = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=60_000)
        for i in range(30, 40):  # one key: one partition, one entry
            batched.send_async(f"v{i}".encode(), None, partition_key="kb")
        batched.flush()
        batches: list[list[dict]] = []
        query = (spark.readStream.format("statekeep-pulsar").option("serviceUrl", pulsar.service_url)
                 .option("adminUrl", pulsar.web_url).option("topic", topic).option("startingOffsets", "earliest")
                 .option("maxEntriesPerTrigger", "4").load().writeStream
                 .foreachBatch(lambda frame, _: batches.append([r.asDict() for r in frame.collect()]))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None
        values = [r["value"] for rows in batches for r in rows]
        assert sorted(values) == sorted(f"v{i}".encode() for i in range(40))
        assert len(batches) >= 8
        for rows in batches:
            ids = [lib.MessageId.deserialize(r["messageId"]) for r in rows]
            assert 0 < len({(r["partition"], i.ledger_id(), i.entry_id()) for r, i in zip(rows, ids)}) <= 4
        whole = [i for i, rows in enumerate(batches) if any(r["key"] == b"kb" for r in rows)]
        assert len(whole) == 1 and sum(r["key"] == b"kb" for r in batches[whole[0]]) == 10
        for p in (0, 1):
            order = [int(r["value"][1:]) for rows in batches for r in rows if r["partition"] == p]
            assert order == sorted(order)
    finally:
        client.close()


def test_the_sink_delivers_a_replayed_batch_once_and_refuses_a_topic_without_deduplication(pulsar, spark, tmp_path):
    import httpx
    import pulsar as lib
    from pyspark.sql.types import BinaryType, StructField, StructType

    from statekeep.pulsar import register
    from statekeep.functions.driver.pulsar_sink import PulsarStreamWriter

    register(spark)
    name = uuid.uuid4().hex[:8]
    source, sink = f"persistent://public/default/in-{name}", f"persistent://public/default/out-{name}"
    create_topic(pulsar.web_url, f"in-{name}", partitions=2)
    create_topic(pulsar.web_url, f"out-{name}", partitions=2)
    client = lib.Client(pulsar.service_url)
    producer = client.create_producer(source)

    def produce(first: int, n: int) -> None:
        for i in range(first, first + n):
            producer.send(f"v{i}".encode(), partition_key=f"k{i % 10}", properties={"i": str(i)},
                          event_timestamp=1_796_000_000_000 + i)

    checkpoint = tmp_path / "checkpoint"

    def run_once() -> None:
        query = (spark.readStream.format("statekeep-pulsar").option("serviceUrl", pulsar.service_url)
                 .option("adminUrl", pulsar.web_url).option("topic", source).option("startingOffsets", "earliest")
                 .load().select("key", "value", "headers", "eventTime")
                 .writeStream.format("statekeep-pulsar").option("serviceUrl", pulsar.service_url)
                 .option("adminUrl", pulsar.web_url).option("topic", sink)
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    try:
        produce(0, 30)
        run_once()
        (checkpoint / "commits" / "0").unlink()  # batch 0 delivered, its commit lost: it runs again
        produce(30, 10)
        run_once()
        out = read_all(client, sink, pulsar.web_url)
        assert sorted(m.data() for m in out) == sorted(f"v{i}".encode() for i in range(40))  # each once
        seven = next(m for m in out if m.data() == b"v7")
        assert (seven.partition_key(), seven.properties(), seven.event_timestamp()) == (
            "k7", {"i": "7"}, 1_796_000_000_007)
        query = json.loads((checkpoint / "metadata").read_text())["id"]  # kept in the checkpoint: stable names
        assert {m.producer_name() for m in out} == {f"statekeep-{query}-0", f"statekeep-{query}-1"}

        # a namespace without deduplication: refused in one line, before anything is sent
        namespace = f"public/nodedup-{name}"
        assert httpx.put(f"{pulsar.web_url}/admin/v2/namespaces/{namespace}", timeout=30).status_code == 204
        assert httpx.post(f"{pulsar.web_url}/admin/v2/namespaces/{namespace}/deduplication", json=False,
                          timeout=30).status_code == 204
        assert httpx.put(f"{pulsar.web_url}/admin/v2/persistent/{namespace}/t", timeout=30).status_code == 204
        schema = StructType([StructField("value", BinaryType())])
        with pytest.raises(InvalidArgumentError, match=(
                rf"^Pulsar topic persistent://{namespace}/t has no deduplication, so a replayed micro-batch would be "
                rf"delivered twice: enable it \(pulsar-admin namespaces set-deduplication {namespace} --enable, or "
                r"the broker's brokerDeduplicationEnabled=true\)$")):
            PulsarStreamWriter({"serviceUrl": pulsar.service_url, "adminUrl": pulsar.web_url,
                                "topic": f"persistent://{namespace}/t"}, schema)
        with pytest.raises(NotFoundError, match="^Pulsar topic persistent://public/default/nope does not exist"):
            PulsarStreamWriter({"serviceUrl": pulsar.service_url, "adminUrl": pulsar.web_url,
                                "topic": "persistent://public/default/nope"}, schema)
    finally:
        client.close()
