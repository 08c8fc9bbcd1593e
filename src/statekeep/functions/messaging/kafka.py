"""Kafka topics as statekeep topics: ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``.

A function's input, output, log topic, dead-letter topic or ``publish`` target may be a Kafka topic, named by its
bootstrap servers and its Kafka name. A Kafka message is a Pulsar message to the function (see
:mod:`statekeep.functions.messaging.messages`): its key is the message key, its value the payload (through the
input's serde), its headers the properties (UTF-8 text), its timestamp the event time (ms). What a function
writes to a Kafka topic is written the same way back: key, value (the serde's bytes), properties as headers, the
event time as the record's timestamp.

**Exactly once into Kafka** (:class:`KafkaDelivery`), in the way of Kafka Streams' EOS and Flink's ``KafkaSink``,
tied to the (batch, partition) state commit of :mod:`statekeep.functions.executor.runtime`:

1. Before the state commit, a (batch, partition)'s Kafka records are checked (topics exist, sizes within the
   topic's ``max.message.bytes``) and kept in a file of their own (:meth:`BatchOutputs.keep`), which a replay
   reads again.
2. The state commit (state, changelog and the (batch, partition) marker, one atomic write).
3. Delivery: one Kafka transaction per (batch, partition), by a transactional producer whose
   ``transactional.id`` is the function's (tenant, namespace, name, incarnation) and partition. It writes the kept
   records and commits, in the same transaction, the offset ``batch + 1`` of the consumer group of that id (on
   partition 0 of each topic written): the record that (batch, partition) was delivered.

Each id's batches are delivered in batch order, and a kept batch is forgotten once delivered: Kafka has a prefix of
an id's batches, and the rest are kept. The delivery may run behind the task, in the executor's delivery agent
(:mod:`~statekeep.functions.messaging.kafkaagent`); a replay of a (batch, partition) whose state was committed
first, a batch the agent refuses, and the query's end (:func:`settle`) catch the partition up: fence the id
(``init_transactions``: an earlier producer's open transaction is aborted, and that producer can commit nothing
more), read the group's committed offset, and deliver the kept batches Kafka lacks, in order. So a
``read_committed`` consumer sees each record once, whichever process died where; a ``read_uncommitted`` one may
also see the records of an aborted attempt (a replayed batch's first try), as Kafka's own transactions allow.

**A function's changelog on Kafka** (KIP-813: ``changelogTopic``): :func:`changelog_records` turns a (batch,
partition)'s state changes into records of a compacted topic in the byte forms Kafka Streams' serdes read; they are
added to the batch's records (:meth:`BatchOutputs.add_records`) and so go out in the same transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, NotFoundError, StoreUnavailableError
from statekeep.functions.config.locations import SCHEME, KafkaTopic, is_kafka, parse
from statekeep.functions.messaging.sink import kept_sink
from statekeep.functions.messaging.kafkarecords import (COLUMNS, changelog_records, longs, message_of, raw_table,
                                                        records_table)
from statekeep.functions.messaging.kafkatxn import (DEADLINE, TIMEOUT, KafkaDelivery, KafkaDeliveryError,
                                                    transactional_id)
from statekeep.kafka import client_config, confluent
from statekeep.lru import memo

#: named where a function's names (config.locations), its records (kafkarecords) and its transactions (kafkatxn) are
__all__ = ["COLUMNS", "DEADLINE", "SCHEME", "KafkaDelivery", "KafkaDeliveryError", "KafkaTopic", "changelog_records",
           "is_kafka", "message_of", "parse", "raw_table", "records_table", "transactional_id"]

if TYPE_CHECKING:
    from statekeep.functions.config.spec import ExecutorSpec


def one_cluster(names: Iterable[str]) -> str | None:
    """The bootstrap servers every Kafka name in ``names`` shares (None: no Kafka name). A transaction is one
    cluster's: :class:`InvalidArgumentError` if they name two."""
    clusters = {parse(n).bootstrap for n in names if is_kafka(n)}
    if len(clusters) > 1:
        raise InvalidArgumentError(f"a function writes to Kafka in one transaction, so on one cluster: "
                                   f"{sorted(clusters)} are several")
    return next(iter(clusters), None)


#: a Kafka broker's default ``message.max.bytes`` (1 MiB + 12), the limit where a topic states none
DEFAULT_MAX_MESSAGE = 1_048_588


_configs: dict[tuple[str, str], dict[str, str]] = memo()
_configs_lock = threading.Lock()


def topic_config(topic: KafkaTopic) -> dict[str, str]:
    """The topic settings statekeep reads of ``topic`` (``max.message.bytes``, ``cleanup.policy``), asked once per
    process. Raises :class:`NotFoundError` if the cluster has no such topic, :class:`StoreUnavailableError` if the
    cluster does not answer within :data:`TIMEOUT`."""
    key = (topic.bootstrap, topic.topic)
    with _configs_lock:
        if key in _configs:
            return _configs[key]
    from statekeep.kafka import translate
    from statekeep.kafka.admin import admin_client, describe

    try:
        describe(topic.bootstrap, topic.topic, timeout=TIMEOUT)
    except NotFoundError:
        raise NotFoundError(f"{topic.name}: no topic {topic.topic!r} on the Kafka cluster at {topic.bootstrap} "
                            "(create it: statekeep topics create NAME --partitions N)") from None
    except StoreUnavailableError as e:
        raise StoreUnavailableError(f"{topic.name}: the Kafka cluster at {topic.bootstrap} did not answer within "
                                    f"{TIMEOUT:.0f} s: {e}") from e
    kafka = confluent()
    found: dict[str, str] = {}
    try:
        resource = kafka.admin.ConfigResource(kafka.admin.ConfigResource.Type.TOPIC, topic.topic)
        admin = admin_client(topic.bootstrap)
        entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
        for name in ("max.message.bytes", "cleanup.policy"):
            entry = entries.get(name)
            if entry is not None and entry.value is not None:
                found[name] = str(entry.value)
    except kafka.KafkaException as e:
        raise translate(e, f"reading the config of {topic.name}") from e
    with _configs_lock:
        _configs[key] = found
    return found


def topic_limit(topic: KafkaTopic) -> int:
    """The largest record ``topic`` takes (its ``max.message.bytes``); raises as :func:`topic_config`."""
    return int(topic_config(topic).get("max.message.bytes", DEFAULT_MAX_MESSAGE))


def check_changelog_topic(name: str) -> None:
    """Check that ``name`` (a function's ``changelogTopic``) is a Kafka topic that exists and is compacted (its
    ``cleanup.policy`` includes ``compact``: else a reader from its start would not find every key's newest
    value), before a query starts. :class:`InvalidArgumentError` for one that is not compacted; raises as
    :func:`topic_config` otherwise."""
    topic = parse(name)
    policy = topic_config(topic).get("cleanup.policy", "delete")
    if "compact" not in policy.split(","):
        raise InvalidArgumentError(f"changelogTopic {name}: the topic's cleanup.policy is {policy!r}, not compact "
                                   "(a changelog must keep each key's newest record: create it with "
                                   "--config cleanup.policy=compact)")


def check_topics(names: Iterable[str | None]) -> None:
    """Check that every Kafka topic ``names`` holds exists (an input's, an output's), before a query starts:
    :class:`NotFoundError` or :class:`StoreUnavailableError` naming the first that is not there or not reached."""
    for name in names:
        if is_kafka(name):
            assert name is not None
            topic_limit(parse(name))


def check_sizes(table: Any, bootstrap: str) -> None:
    """:class:`InvalidArgumentError` naming the largest record of ``table`` (:data:`COLUMNS`) over its topic's
    ``max.message.bytes``, and :class:`NotFoundError` for a topic the cluster does not have: checked before anything
    is written."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(table):
        return
    # a record as the broker counts it, near enough: key, value, headers and ~70 bytes of framing. No Python
    # scalar goes into Arrow here: converting one imports pandas (0.3 s in each new Python worker)
    zeros = longs([0] * len(table))
    sizes = pc.add(pc.coalesce(pc.binary_length(table["key"]).cast(pa.int64()), zeros),
                   pc.coalesce(pc.binary_length(table["value"]).cast(pa.int64()), zeros))  # a tombstone's is null
    if table["headers"].null_count < len(table):
        extra = [sum(len(h["key"].encode()) + len(h["value"]) for h in hs or ()) for hs in table["headers"].to_pylist()]
        sizes = pc.add(sizes, longs(extra))
    for topic in sorted(pc.unique(table["topic"]), key=str):
        name = topic.as_py()
        limit = topic_limit(KafkaTopic(bootstrap, name))
        biggest = pc.max(pc.filter(sizes, pc.equal(table["topic"], topic))).as_py() + 70
        if biggest > limit:
            raise InvalidArgumentError(f"a message of {biggest} bytes for {SCHEME}{bootstrap}/{name} is over the "
                                       f"topic's max.message.bytes ({limit}): nothing was written")


# -- a function's (batch, partition) ----------------------------------------------------------------------------


class BatchOutputs:
    """A function's records for Kafka of one (batch, partition) (``batch`` None: a trigger's one record), from its
    output, ``publish`` targets, log topic and dead letters: :meth:`add` them, :meth:`keep` them before the state
    commit, :meth:`deliver` them after it."""

    def __init__(self, spec: ExecutorSpec, batch: tuple[int, int] | None) -> None:
        self.spec, self.batch = spec, batch
        self.names: set[str] = set()
        self.pairs: list[tuple[str, Any]] = []
        self.raw: list[Any] = []  # tables of raw records (:func:`raw_table`): a changelog's
        self.table: Any = None

    def add(self, name: str, records: Any) -> None:
        """Records (message records, a list or a pyarrow Table of rows) for the Kafka topic ``name``."""
        topic = parse(name).topic
        self.names.add(name)
        rows = records if isinstance(records, list) else records.to_pylist()
        self.pairs.extend((topic, r) for r in rows)

    def add_records(self, name: str, keys: list[bytes], values: list[bytes | None]) -> None:
        """Records of these key and value bytes (None: a tombstone) for the Kafka topic ``name`` (a changelog's:
        :func:`changelog_records`), after the others."""
        if keys:
            self.names.add(name)
            self.raw.append(raw_table(parse(name).topic, keys, values))

    def keep(self) -> None:
        """Check the records (one cluster, topics that exist, sizes within their limits: else the error, nothing
        written) and keep them for a replay."""
        if not self.pairs and not self.raw:
            return
        bootstrap = one_cluster(self.names)
        assert bootstrap is not None  # names holds a Kafka name for each pair
        tables = ([records_table(self.pairs)] if self.pairs else []) + self.raw
        if len(tables) == 1:
            table = tables[0]
        else:
            import pyarrow as pa

            table = pa.concat_tables(tables)
        check_sizes(table, bootstrap)
        self.table = table.replace_schema_metadata({"bootstrap": bootstrap})
        if self.batch is not None:
            kept_sink(self.spec, "kafka").write(*self.batch, self.table)

    def deliver(self, applied: bool) -> None:
        """After the state commit: the kept records in one transaction. ``applied`` False: the state commit found
        the batch applied already (an earlier attempt's), whose records may have been delivered: looked up."""
        if self.table is None:
            return
        if self.batch is None:  # a trigger's: a transaction of its own, no batch to record
            import uuid

            KafkaDelivery(self.table.schema.metadata[b"bootstrap"].decode(),
                          f"statekeep-trigger-{uuid.uuid4().hex}").deliver(None, self.table)
            return
        deliver_kept(self.spec, *self.batch, self.table, replay=not applied)


def deliver_kept(spec: ExecutorSpec, batch: int, partition: int, table: Any = None, *, replay: bool = True) -> None:
    """Deliver what (batch, partition) kept for Kafka (``table``, else read back; nothing kept: delivered already, or
    nothing to deliver), after every earlier batch of the partition still kept, in order. Not a ``replay`` (this
    attempt's own state commit came first) and in a Spark task, the executor's delivery agent takes it to commit
    behind the task (:meth:`KafkaDelivery.behind`), unless the partition has kept batches it was not handed; else
    the partition catches up now (:meth:`KafkaDelivery.catch_up`). A kept batch known delivered is forgotten: Spark's
    replay of it then finds nothing to deliver."""
    kept = kept_sink(spec, "kafka")
    pending = [b for b, _ in kept.batches(partition) if b != batch]
    if table is None:
        table = kept.read(batch, partition)
        if table is None:
            return
    bootstrap = table.schema.metadata[b"bootstrap"].decode()
    delivery = KafkaDelivery(bootstrap, transactional_id(spec.tenant, spec.namespace, spec.name, spec.function_id,
                                                         partition))
    earlier = [b for b in pending if b < batch]
    done = None if replay else delivery.behind(batch, table, earlier)
    if done is None:
        delivery.catch_up([(b, kept.read(b, partition)) for b in earlier] + [(batch, table)])
        done = batch
    for b in [*earlier, batch]:
        if b <= done:
            kept.discard(b, partition)


def warm(spec: ExecutorSpec, partition: int) -> None:
    """At a Spark task's start, for a function that writes to Kafka (its output, dead letters, log or changelog
    topic): the executor's delivery agent readies the partition's producer while the function runs
    (:func:`~statekeep.functions.messaging.kafkaagent.warm`), so the first batch's delivery waits for neither."""
    from statekeep.functions.messaging import kafkaagent

    names = [n for n in (spec.output, spec.dead_letter, spec.log_topic, spec.changelog_topic) if is_kafka(n)]
    if names and kafkaagent.wanted():
        kafkaagent.warm(parse(str(names[0])).bootstrap,
                        transactional_id(spec.tenant, spec.namespace, spec.name, spec.function_id, partition))


def settle(spec: ExecutorSpec, committed: Callable[[int, int], bool]) -> None:
    """At a query's end (the driver's): every batch a function's tasks kept for Kafka whose state was committed
    (``committed(batch, partition)``: its marker) is delivered, in order, and forgotten. The executors' agents on
    this machine first end what they were handed (:func:`~statekeep.functions.messaging.kafkaagent.drain`); a
    partition whose last kept batch Kafka has then needs nothing more (its batches arrive in order), any other
    catches up (:meth:`KafkaDelivery.catch_up`, which fences its id). A partition's last kept batch whose state was
    not committed (a task stopped or failed between the two) stays kept, for the batch's replay. Raises as
    :meth:`KafkaDelivery.deliver`."""
    from statekeep.functions.messaging import kafkaagent

    kept = kept_sink(spec, "kafka")
    found = kept.batches()
    if not found:
        return
    kafkaagent.drain(transactional_id(spec.tenant, spec.namespace, spec.name, spec.function_id, 0)[:-1],
                     DEADLINE * 2)
    partitions: dict[int, list[int]] = {}
    for batch, partition in found:
        partitions.setdefault(partition, []).append(batch)
    for partition, batches in sorted(partitions.items()):
        if not committed(batches[-1], partition):  # only a partition's last can be: Spark runs batches in turn
            batches.pop()
        last = kept.read(batches[-1], partition) if batches else None
        if last is None:
            continue
        delivery = KafkaDelivery(last.schema.metadata[b"bootstrap"].decode(), transactional_id(
            spec.tenant, spec.namespace, spec.name, spec.function_id, partition))
        if not delivery.delivered(batches[-1], last["topic"].to_pylist()):
            delivery.catch_up([(b, kept.read(b, partition)) for b in batches[:-1]] + [(batches[-1], last)])
        for b in batches:
            kept.discard(b, partition)


# -- statekeep topics produce / consume ---------------------------------------------------------------------------


def produce(name: str, messages: list[dict[str, Any]]) -> None:
    """Write message records to the Kafka topic ``name``, all or none (one transaction). Raises as
    :func:`check_sizes` and :meth:`KafkaDelivery.deliver` do."""
    import uuid

    topic = parse(name)
    table = records_table((topic.topic, m) for m in messages)
    check_sizes(table, topic.bootstrap)
    KafkaDelivery(topic.bootstrap, f"statekeep-produce-{uuid.uuid4().hex}").deliver(None, table)


def consume(name: str, limit: int = 0) -> Iterator[dict[str, Any]]:
    """The committed messages of the Kafka topic ``name`` from its beginning to its end when called (``limit`` >
    0: at most that many), partition after partition, each as a message record with ``partition`` and ``offset``
    (a ``read_committed`` reader of its own, in no consumer group). Raises :class:`NotFoundError` for a topic
    the cluster does not have, :class:`StoreUnavailableError` for a cluster that does not answer."""
    kafka = confluent()
    topic = parse(name)
    topic_limit(topic)  # it exists
    consumer = kafka.Consumer(client_config(topic.bootstrap, **{
        "group.id": "statekeep-consume", "enable.auto.commit": False, "isolation.level": "read_committed",
        "enable.partition.eof": True, "allow.auto.create.topics": False}))
    try:
        partitions = sorted(consumer.list_topics(topic.topic, timeout=TIMEOUT).topics[topic.topic].partitions)
        given = 0
        for p in partitions:
            low, high = consumer.get_watermark_offsets(kafka.TopicPartition(topic.topic, p), timeout=TIMEOUT)
            if high <= low:
                continue
            consumer.assign([kafka.TopicPartition(topic.topic, p, low)])
            while True:
                message = consumer.poll(TIMEOUT)
                if message is None:
                    break  # the rest of the partition is an open transaction's, or aborted
                if message.error():
                    if message.error().code() == kafka.KafkaError._PARTITION_EOF:
                        break
                    raise StoreUnavailableError(f"{name}: reading partition {p} failed: {message.error()}")
                stamp = message.timestamp()
                record = message_of(message.key(), message.value(), message.headers(),
                                    stamp[1] if stamp[0] != kafka.TIMESTAMP_NOT_AVAILABLE else None)
                yield {**record, "partition": p, "offset": message.offset()}
                given += 1
                if limit and given >= limit:
                    return
                if message.offset() >= high - 1:
                    break
    except kafka.KafkaException as e:
        raise StoreUnavailableError(f"{name}: the Kafka cluster at {topic.bootstrap} failed: {e}") from e
    finally:
        consumer.close()
