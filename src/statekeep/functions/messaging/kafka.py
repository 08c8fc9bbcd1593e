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

A replay of a (batch, partition) whose state was committed first fences the id (``init_transactions``: an earlier
producer's open transaction is aborted, and that producer can commit nothing more), then reads the group's
committed offset: delivered, or the kept records are delivered now. So a ``read_committed`` consumer sees each
record once, whichever process died where; a ``read_uncommitted`` one may also see the records of an aborted
attempt (a replayed batch's first try), as Kafka's own transactions allow.

**A function's changelog on Kafka** (KIP-813: ``changelogTopic``): :func:`changelog_records` turns a (batch,
partition)'s state changes into records of a compacted topic in the byte forms Kafka Streams' serdes read; they are
added to the batch's records (:meth:`BatchOutputs.add_records`) and so go out in the same transaction.
"""

from __future__ import annotations

import base64
import struct
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, NotFoundError, StatekeepError, StoreUnavailableError
from statekeep.functions.config.locations import SCHEME, KafkaTopic, is_kafka, parse
from statekeep.retry import OUTAGE

__all__ = ["SCHEME", "KafkaTopic", "is_kafka", "parse"]  # named where a function's names are (config.locations)

if TYPE_CHECKING:
    from statekeep.functions.config.spec import ExecutorSpec

#: how long a client waits for an unreachable cluster before the error (s): bounded, librdkafka's own retries are not
TIMEOUT = 15.0
#: a transaction left open by a killed producer holds ``read_committed`` readers back at most this long (unless the
#: next attempt's ``init_transactions`` aborts it first, which it does at once)
TRANSACTION_TIMEOUT_MS = 60_000
#: the longest a (batch, partition)'s delivery may take before it fails (and its batch is replayed): a bound on
#: librdkafka calls whose own timeouts were seen not to hold after a broker restart
DEADLINE = 90.0
#: a Kafka broker's default ``message.max.bytes`` (1 MiB + 12), the limit where a topic states none
DEFAULT_MAX_MESSAGE = 1_048_588


class KafkaDeliveryError(StatekeepError):
    """A (batch, partition)'s records could not be committed to Kafka (the broker refused or was unreachable);
    the state commit stands and a replay of the batch delivers its kept records. ``fenced``: the producer was
    fenced by a newer one of its transactional id."""

    fenced = False


def one_cluster(names: Iterable[str]) -> str | None:
    """The bootstrap servers every Kafka name in ``names`` shares (None: no Kafka name). A transaction is one
    cluster's: :class:`InvalidArgumentError` if they name two."""
    clusters = {parse(n).bootstrap for n in names if is_kafka(n)}
    if len(clusters) > 1:
        raise InvalidArgumentError(f"a function writes to Kafka in one transaction, so on one cluster: "
                                   f"{sorted(clusters)} are several")
    return next(iter(clusters), None)


def _client() -> Any:
    from statekeep.kafka import confluent

    return confluent()


def _config(bootstrap: str, **settings: Any) -> dict[str, Any]:
    from statekeep.kafka import client_config

    return client_config(bootstrap, **settings)


_configs: dict[tuple[str, str], dict[str, str]] = {}
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
    kafka = _client()
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


# -- records -----------------------------------------------------------------------------------------------------

#: a (batch, partition)'s Kafka records as kept and delivered: one row per record (timestamp 0: the broker's time)
COLUMNS = ("topic", "key", "value", "headers", "timestamp")


def records_table(records: Iterable[tuple[str, Any]]) -> Any:
    """``(Kafka topic, message record)`` pairs as a pyarrow Table of :data:`COLUMNS`. A message record is
    :meth:`~statekeep.functions.messaging.messages.Message.to_json`'s shape; any other value is written as its text
    (a str) or JSON."""
    import json

    import pyarrow as pa

    from statekeep.functions.messaging.messages import payload

    topics: list[str] = []
    keys: list[bytes | None] = []
    values: list[bytes] = []
    headers: list[list[tuple[str, bytes]] | None] = []
    times: list[int] = []
    for topic, message in records:
        if not isinstance(message, Mapping) or not ({"value", "valueBase64"} & message.keys()):
            message = {"value": message if isinstance(message, str) else json.dumps(message, default=str)}
        key = message.get("key")
        properties = message.get("properties")
        event_time = message.get("eventTime")
        topics.append(topic)
        keys.append(None if key is None else str(key).encode("utf-8"))
        values.append(payload(message))
        headers.append([(str(k), str(v).encode("utf-8")) for k, v in properties.items()] if properties else None)
        times.append(event_time if isinstance(event_time, int) and not isinstance(event_time, bool) else 0)
    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.table({"topic": pa.array(topics, pa.string()), "key": pa.array(keys, pa.binary()),
                     "value": pa.array(values, pa.binary()), "headers": pa.array(headers, header),
                     "timestamp": pa.array(times, pa.int64())})


def raw_table(topic: str, keys: list[bytes], values: list[bytes | None]) -> Any:
    """Records of ``topic`` with these key and value bytes (a None value: a tombstone), as a pyarrow Table of
    :data:`COLUMNS` (no headers, timestamp 0: the broker's time)."""
    import pyarrow as pa

    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.table({"topic": pa.array([topic] * len(keys), pa.string()), "key": pa.array(keys, pa.binary()),
                     "value": pa.array(values, pa.binary()), "headers": pa.nulls(len(keys), header),
                     "timestamp": pa.array([0] * len(keys), pa.int64())})


# -- a function's changelog on a Kafka topic (KIP-813) -------------------------------------------------------------

#: how a typed state value is carried on a changelog topic (``changelogFormat``)
CHANGELOG_FORMATS = ("json", "msgpack")


def changelog_records(written: Mapping[str, tuple[bytes | None, int | None]], typed_format: str = "json"
                      ) -> tuple[list[bytes], list[bytes | None]]:
    """The Kafka records (keys, values) of a (batch, partition)'s state changes (``written``:
    :meth:`~statekeep.state.buffer.BufferedState.written`), in the byte forms Kafka Streams' serdes read:

    - key: the state key's UTF-8 bytes (``Serdes.String()``); a typed variable's entry is keyed by its state key
      (:mod:`statekeep.state.typed`: ``"\\0v" + len(key) + ":" + key + variable + "\\0="`` for a value state,
      ``...\\0l<16 hex digits>`` a list element, ``...\\0m<code>`` a map entry);
    - value: a byte value as it is (``Serdes.ByteArray()``, or ``Serdes.String()`` for text); a counter as 8 bytes,
      signed big-endian (``Serdes.Long()``); a typed value as UTF-8 JSON (``typed_format`` ``json``: a class as an
      object of its fields, bytes as base64 text) or as its MessagePack (``msgpack``, without the TTL statekeep
      keeps with it); a delete as a null value (a tombstone).

    Internal entries (statekeep's timers, windows, watermarks, TTL index, a list's bounds) are never records."""
    from statekeep.state import typed

    if typed_format not in CHANGELOG_FORMATS:
        raise InvalidArgumentError(f"a changelog's typed values are {' or '.join(CHANGELOG_FORMATS)}, "
                                   f"not {typed_format!r}")
    pack = _LONG.pack
    if not any(key[:1] == "\x00" or counter is None for key, (_, counter) in written.items()):  # counters only
        return [key.encode("utf-8") for key in written], [pack(counter) for _, counter in written.values()]
    keys: list[bytes] = []
    values: list[bytes | None] = []
    for key, (value, counter) in written.items():
        if key[:1] == "\x00":  # statekeep's own namespace: only user variables' entries are shared
            found = typed.entry_variable(key)
            if found is None or found[2][:1] == "#":
                continue
            if value is not None:
                payload = typed.entry_payload(value, 0)  # the value, without the expiry it may carry
                assert payload is not None  # an expiry at 0 never is past
                value = _json(typed.json_value(payload)) if typed_format == "json" else bytes(payload)
        elif counter is not None:
            value = pack(counter)
        keys.append(key.encode("utf-8"))
        values.append(value if value is None or isinstance(value, bytes) else bytes(value))
    return keys, values


_LONG = struct.Struct(">q")


def _json(data: Any) -> bytes:
    import json

    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def message_of(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None,
               timestamp: int | None) -> dict[str, Any]:
    """A Kafka record as the message record a function's input decodes (key as text, value as text when it is
    UTF-8, else base64; headers as properties; the timestamp as event time)."""
    record: dict[str, Any] = {}
    if key is not None:
        record["key"] = key.decode("utf-8", "replace")
    data = value or b""
    try:
        record["value"] = data.decode("utf-8")
    except UnicodeDecodeError:
        record["valueBase64"] = base64.b64encode(data).decode()
    if headers:
        record["properties"] = {k: (v or b"").decode("utf-8", "replace") for k, v in headers}
    if timestamp is not None and timestamp >= 0:
        record["eventTime"] = timestamp
    return record


def check_sizes(table: Any, bootstrap: str) -> None:
    """:class:`InvalidArgumentError` naming the largest record of ``table`` (:data:`COLUMNS`) over its topic's
    ``max.message.bytes``, and :class:`NotFoundError` for a topic the cluster does not have: checked before anything
    is written."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not len(table):
        return
    # a record as the broker counts it, near enough: key, value, headers and ~70 bytes of framing
    sizes = pc.add(pc.add(pc.fill_null(pc.binary_length(table["key"]), 0),
                          pc.fill_null(pc.binary_length(table["value"]), 0)), 70)  # a tombstone's value is null
    if table["headers"].null_count < len(table):
        extra = [sum(len(h["key"].encode()) + len(h["value"]) for h in hs or ()) for hs in table["headers"].to_pylist()]
        sizes = pc.add(sizes, pa.array(extra, pa.int64()))
    for topic in sorted(set(table["topic"].to_pylist())):
        limit = topic_limit(KafkaTopic(bootstrap, topic))
        biggest = pc.max(pc.filter(sizes, pc.equal(table["topic"], topic))).as_py()
        if biggest > limit:
            raise InvalidArgumentError(f"a message of {biggest} bytes for {SCHEME}{bootstrap}/{topic} is over the "
                                       f"topic's max.message.bytes ({limit}): nothing was written")


# -- transactions -------------------------------------------------------------------------------------------------


@dataclass
class _Kept:
    """A producer this process keeps for a transactional id, and whether it lost a connection since."""

    producer: Any
    troubled: bool = False


_producers: dict[tuple[str, str], _Kept] = {}
_delivered: dict[tuple[str, str], int] = {}  # the last batch this process's producer of an id committed
_groups: dict[tuple[str, str], Any] = {}  # a consumer group's metadata, which a transaction's offsets name
_producers_lock = threading.Lock()


class KafkaDelivery:
    """The transactional delivery of one writer's (batch, partition) records (see the module docstring):
    ``transactional_id`` names the writer, one per (function incarnation, partition), stable across processes."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.bootstrap, self.transactional_id = bootstrap, transactional_id
        self.group = f"statekeep.{transactional_id}"

    def _producer(self, fresh: bool) -> Any:
        """This process's producer of the id; ``fresh``: a new one, whose ``init_transactions`` fences every
        earlier producer of the id and aborts its open transaction. A kept producer that lost a connection since
        its last transaction (a broker restarted) is replaced too: librdkafka's next transaction on it was seen to
        hang in ``send_offsets_to_transaction``."""
        kafka = _client()
        key = (self.bootstrap, self.transactional_id)
        with _producers_lock:
            kept = None if fresh else _producers.get(key)
            if kept is not None:
                kept.producer.poll(0)  # its error callbacks since its last transaction
                if kept.troubled:
                    kept = None
            if kept is None:
                holder = _Kept(None)

                def trouble(error: Any) -> None:
                    holder.troubled = True

                producer = kafka.Producer(_config(self.bootstrap, **{
                    "transactional.id": self.transactional_id, "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                    "linger.ms": 5, "message.max.bytes": 1 << 29,  # each topic's own limit is checked before
                    # a keyed record goes to the partition Java's default partitioner gives its key bytes (murmur2),
                    # as Kafka Streams' key-to-instance metadata expects; librdkafka's default is crc32
                    "partitioner": "murmur2_random", "error_cb": trouble}))
                try:
                    producer.init_transactions(TIMEOUT)
                except kafka.KafkaException as e:
                    raise KafkaDeliveryError(f"{self.transactional_id}: the Kafka cluster at {self.bootstrap} did not "
                                             f"start a transaction within {TIMEOUT:.0f} s: {e}") from e
                producer.poll(0)
                holder.producer, holder.troubled = producer, False
                kept = _producers[key] = holder
            return kept.producer

    def _group_metadata(self) -> Any:
        kafka = _client()
        key = (self.bootstrap, self.group)
        with _producers_lock:
            if key not in _groups:
                consumer = kafka.Consumer(_config(self.bootstrap, **{"group.id": self.group}))
                try:
                    _groups[key] = consumer.consumer_group_metadata()
                finally:
                    consumer.close()
            return _groups[key]

    def _forget(self) -> None:
        with _producers_lock:
            _producers.pop((self.bootstrap, self.transactional_id), None)
            _delivered.pop((self.bootstrap, self.transactional_id), None)

    def continues(self, batch: int) -> bool:
        """Whether this process's producer of the id committed ``batch - 1`` last: then no other process has
        delivered ``batch`` (it would have fenced that producer first, and its commit would fail), and
        :meth:`deliver` needs no ``replay`` look-up."""
        with _producers_lock:
            return _delivered.get((self.bootstrap, self.transactional_id)) == batch - 1

    def delivered(self, batch: int, topics: Iterable[str]) -> bool:
        """Whether this writer's ``batch`` was committed to Kafka: its group's committed offset on partition 0 of
        the first of ``topics`` is past it. Call after fencing, so that no earlier producer still commits."""
        kafka = _client()
        first = sorted(set(topics))[0]
        consumer = kafka.Consumer(_config(self.bootstrap, **{
            "group.id": self.group, "enable.auto.commit": False, "isolation.level": "read_committed"}))
        from statekeep.kafka import translate

        def read() -> Any:
            try:
                return consumer.committed([kafka.TopicPartition(first, 0)], timeout=TIMEOUT)
            except kafka.KafkaException as e:  # a coordinator still loading (a broker just started): unavailable
                raise translate(e, f"{self.transactional_id}: reading what Kafka committed") from e

        try:
            found = OUTAGE.bounded(seconds=TIMEOUT).repeat(read)
        finally:
            consumer.close()
        return bool(found) and found[0].offset > batch

    def deliver(self, batch: int | None, table: Any, *, replay: bool = False) -> bool:
        """Write ``table``'s records (:data:`COLUMNS`) as ``batch``'s one transaction, unless a ``replay`` finds
        ``batch`` delivered already (it fences the id first). ``batch`` None: a one-off transaction that records
        no batch. Returns whether this call wrote them. :class:`KafkaDeliveryError` if Kafka refused or did not
        answer within :data:`DEADLINE` (the transaction is aborted, or left to the next producer of the id to
        abort; a replay delivers again)."""
        if table is None or not len(table):
            return False
        try:
            return self._bounded(batch, table, replay)
        except KafkaDeliveryError as e:
            if replay or not e.fenced:
                raise
            # another process's producer of the id came since this one's (a Python worker that ran the partition's
            # previous batch): a fresh one fences it in turn, and looks up what Kafka has
            return self._bounded(batch, table, True)

    def _bounded(self, batch: int | None, table: Any, replay: bool) -> bool:
        """:meth:`_transaction` within :data:`DEADLINE`."""
        topics = sorted(set(table["topic"].to_pylist()))
        outcome: list[BaseException | bool] = []

        def attempt() -> None:
            try:
                outcome.append(self._transaction(batch, table, topics, replay))
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                outcome.append(e)

        worker = threading.Thread(target=attempt, name=f"statekeep-kafka-{self.transactional_id}", daemon=True)
        worker.start()
        worker.join(DEADLINE)
        if not outcome:  # a librdkafka call that does not return: this producer is given up (the next fences it)
            self._forget()
            raise KafkaDeliveryError(f"{self.transactional_id}: batch {batch}'s {len(table)} records were not "
                                     f"committed to Kafka at {self.bootstrap} within {DEADLINE:.0f} s")
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _transaction(self, batch: int | None, table: Any, topics: list[str], replay: bool) -> bool:
        kafka = _client()
        # a producer of the id that did not commit batch - 1 here may have been fenced by another process's (Spark
        # ran the partition's previous batch in another Python worker), which may have delivered this batch too: as
        # a replay, fenced again and looked up
        if replay or (batch is not None and not self.continues(batch)):
            self._producer(fresh=True)
            if batch is not None and self.delivered(batch, topics):
                return False
        producer = self._producer(fresh=False)
        try:
            producer.begin_transaction()
            _produce(producer, table, topics)
            if batch is not None:
                producer.send_offsets_to_transaction([kafka.TopicPartition(t, 0, batch + 1) for t in topics],
                                                     self._group_metadata(), TIMEOUT)
            producer.commit_transaction(TIMEOUT * 2)
            if batch is not None:
                with _producers_lock:
                    _delivered[(self.bootstrap, self.transactional_id)] = batch
        except kafka.KafkaException as e:
            self._forget()  # fenced, or in a state unknown: the next attempt starts with a fresh producer
            try:
                producer.abort_transaction(TIMEOUT)
            except kafka.KafkaException:
                pass  # the next init_transactions of the id aborts it
            error = KafkaDeliveryError(f"{self.transactional_id}: batch {batch}'s {len(table)} records were not "
                                       f"committed to Kafka at {self.bootstrap}: {e}")
            error.fenced = e.args[0].code() in (kafka.KafkaError._FENCED, kafka.KafkaError.PRODUCER_FENCED,
                                                kafka.KafkaError.INVALID_PRODUCER_EPOCH)
            raise error from e
        return True


#: records handed to librdkafka per ``produce_batch`` call
_BATCH = 10_000


def _produce(producer: Any, table: Any, topics: list[str]) -> None:
    """Queue ``table``'s records (:data:`COLUMNS`) on ``producer``, each topic's in table order. Records without
    headers and timestamps (a changelog's, plain outputs') go through ``produce_batch`` (one call per few thousand:
    half the cost of a call each), others one ``produce`` each; a full local queue is let drain."""
    import pyarrow.compute as pc

    kafka = _client()
    poll = producer.poll
    if table["headers"].null_count == len(table) and pc.max(table["timestamp"]).as_py() == 0:
        for topic in topics:
            rows = table if len(topics) == 1 else table.filter(pc.equal(table["topic"], topic))
            keys, values = rows["key"].to_pylist(), rows["value"].to_pylist()
            for start in range(0, len(keys), _BATCH):
                batch = [{"key": k, "value": v} for k, v in zip(keys[start:start + _BATCH],
                                                                values[start:start + _BATCH])]
                while batch:
                    try:
                        producer.produce_batch(topic, batch)
                    except BufferError:
                        poll(0.05)
                        continue
                    failed = [m for m in batch if "_error" in m]
                    for message in failed:
                        if message["_error"].code() != kafka.KafkaError._QUEUE_FULL:
                            raise kafka.KafkaException(message["_error"])
                        del message["_error"]
                    if failed:
                        poll(0.05)  # the queue is full: let it drain, then the rest again, in order
                    batch = failed
        return
    produce = producer.produce
    for topic, key, value, headers, timestamp in zip(*[table[c].to_pylist() for c in COLUMNS]):
        while True:
            try:
                produce(topic, value, key, headers=[(h["key"], h["value"]) for h in headers]
                        if headers else None, timestamp=timestamp)
                break
            except BufferError:  # the local queue is full: let it drain
                poll(0.05)


def transactional_id(tenant: str, namespace: str, name: str, incarnation: str, partition: int) -> str:
    """The ``transactional.id`` of a function incarnation's partition: one writer, whichever process runs it."""
    return f"statekeep-{tenant}.{namespace}.{name}-{incarnation}-{partition}"


# -- a function's (batch, partition) ----------------------------------------------------------------------------


def kept_directory(spec: ExecutorSpec) -> str:
    """Where a function keeps each (batch, partition)'s Kafka records until Spark no longer replays it: under its
    topics root (``--topics-dir``, which on a cluster is one every worker reaches), per function incarnation."""
    from statekeep.functions.messaging.topics import default_root

    root = (spec.topics_dir or default_root()).rstrip("/")
    return f"{root}/_kafka/{spec.tenant}/{spec.namespace}/{spec.name}/{spec.function_id or 'none'}"


def _kept(spec: ExecutorSpec) -> Any:
    from statekeep.functions.messaging.sink import OutputSink

    return OutputSink(kept_directory(spec), "arrow", f"-kafka-{spec.tenant}.{spec.namespace}.{spec.name}")


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
            _kept(self.spec).write(*self.batch, self.table)

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
    """Deliver what (batch, partition) kept for Kafka (``table``, else read back; nothing kept: nothing to do), then
    forget what batch - 2 kept (Spark replays at most the batch after its last committed one). Not a ``replay``
    (this attempt's own state commit came first), nothing can have delivered the batch yet; a producer of this
    process that another Python worker's fenced since (it ran the partition's previous batch) is found fenced at
    its first call, and the delivery then goes as a replay (see :meth:`KafkaDelivery.deliver`)."""
    kept = _kept(spec)
    if table is None:
        table = kept.read(batch, partition)
        if table is None:
            return
    bootstrap = table.schema.metadata[b"bootstrap"].decode()
    ident = transactional_id(spec.tenant, spec.namespace, spec.name, spec.function_id, partition)
    KafkaDelivery(bootstrap, ident).deliver(batch, table, replay=replay)
    if batch >= 2:
        kept.discard(batch - 2, partition)


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
    kafka = _client()
    topic = parse(name)
    topic_limit(topic)  # it exists
    consumer = kafka.Consumer(_config(topic.bootstrap, **{
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
