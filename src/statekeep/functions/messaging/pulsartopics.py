"""Pulsar topics on a real broker as statekeep topics: ``pulsar://HOST:PORT/persistent://TENANT/NAMESPACE/TOPIC``
(optionally ``?admin=http://HOST:PORT``, the broker's admin REST API, else port 8080 of the same host: see
:func:`statekeep.functions.config.locations.parse_pulsar`).

A function's input, output, log topic, dead-letter topic or ``publish`` target may be a Pulsar topic. An input is
read by the ``statekeep-pulsar`` Spark source (offsets are message ids in the query's checkpoint) into the message
columns every message input has (:func:`statekeep.functions.driver.inputs.message_columns`): the payload for the
serde, the key, the properties, the event time, the partition and the message id (``context.get_message_id()`` is
a ``pulsar.MessageId``, as Pulsar's own runtime gives). What a function writes to a Pulsar topic goes back the same
way: the serde's bytes as the payload, the key as the partition key, properties, the event time.

**Effectively-once into Pulsar** (:class:`PulsarOutputs`), Pulsar's own guarantee (broker deduplication, see
:mod:`statekeep.functions.messaging.pulsarclient`), tied to the (batch, partition) state commit of
:mod:`statekeep.functions.executor.runtime` in the order Kafka's delivery keeps
(:mod:`statekeep.functions.messaging.kafka`):

1. Before the state commit, a (batch, partition)'s Pulsar messages are checked (topics exist and deduplicate, sizes
   within the broker's ``maxMessageSize``: else the error, nothing written) and kept in a file of their own, which
   a replay reads again.
2. The state commit (state, changelog and the (batch, partition) marker, one atomic write).
3. Delivery: per topic, the messages in their kept order by a producer whose name is the function's (tenant,
   namespace, name, incarnation) and partition, with the sequence id ``batch * 2**24 + position + 1``, to topic
   partition ``partition mod N``, batched in chunks that depend on the messages alone
   (:func:`~statekeep.functions.messaging.pulsarclient.send`).

A replay of a (batch, partition) whose state was committed sends the kept messages again with the same producer
name and sequence ids, in the same chunks: the broker drops those it stored (and the sender skips the chunks up to
the producer's last sequence id). So a consumer sees each message once, whichever process died where, as long as
the namespace deduplicates (checked before the query starts and before each batch's messages are kept).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, StoreUnavailableError
from statekeep.functions.config.locations import PulsarTopic, is_pulsar, parse_pulsar
from statekeep.functions.messaging.sink import kept_sink
from statekeep.functions.messaging.kafkarecords import records_table
from statekeep.functions.messaging.pulsarclient import (PulsarOptions, check_deduplication, client_module,
                                                        max_message_size, partition_names, send, shared_client)

if TYPE_CHECKING:
    from statekeep.functions.config.spec import ExecutorSpec

#: how long a broker may take to answer before the error (s)
TIMEOUT = 15.0


def options(topic: PulsarTopic) -> PulsarOptions:
    return PulsarOptions.of(topic.service_url, topic.admin_url, topic.topic, TIMEOUT)


_checked: set[tuple[str, bool]] = set()
_checked_lock = threading.Lock()


def check_topic(name: str, *, output: bool) -> None:
    """Check that the Pulsar topic ``name`` exists and answers (and, for an ``output``, that the broker
    deduplicates it), once per process: NotFoundError, StoreUnavailableError or InvalidArgumentError naming it."""
    topic = parse_pulsar(name)
    key = (topic.name, output)
    with _checked_lock:
        if key in _checked:
            return
    partition_names(options(topic))
    if output:
        check_deduplication(options(topic))
    with _checked_lock:
        _checked.add(key)


def check_topics(inputs: Iterable[str], outputs: Iterable[str | None]) -> None:
    """Before a query starts: every Pulsar input exists and answers, every Pulsar output also deduplicates."""
    for name in inputs:
        if is_pulsar(name):
            check_topic(name, output=False)
    for out in outputs:
        if is_pulsar(out):
            assert out is not None
            check_topic(out, output=True)


def check_sizes(table: Any) -> None:
    """InvalidArgumentError naming the largest message of ``table`` over its broker's ``maxMessageSize``."""
    import pyarrow.compute as pc

    if not len(table):
        return
    # a message as the broker counts it, near enough: payload, key, properties and ~100 bytes of metadata
    sizes = pc.add(pc.add(pc.fill_null(pc.binary_length(table["key"]), 0), pc.binary_length(table["value"])), 100)
    for name in sorted(set(table["topic"].to_pylist())):
        limit = max_message_size(options(parse_pulsar(name)))
        biggest = pc.max(pc.filter(sizes, pc.equal(table["topic"], name))).as_py()
        if biggest > limit:
            raise InvalidArgumentError(f"a message of {biggest} bytes for {name} is over the broker's "
                                       f"maxMessageSize ({limit}): nothing was written")


def messages_of(rows: Any) -> Iterator[dict[str, Any]]:
    """A table's records (:data:`~statekeep.functions.messaging.kafkarecords.COLUMNS`) as ``Producer.send``'s
    keyword arguments."""
    for key, value, headers, timestamp in zip(*[rows[c].to_pylist() for c in ("key", "value", "headers",
                                                                              "timestamp")]):
        message: dict[str, Any] = {"content": value}
        if key is not None:
            message["partition_key"] = key.decode("utf-8", "replace")
        if headers:
            message["properties"] = {h["key"]: (h["value"] or b"").decode("utf-8", "replace") for h in headers}
        if timestamp:
            message["event_timestamp"] = timestamp
        yield message


def producer_name(spec: ExecutorSpec, partition: int) -> str:
    """The producer name of a function incarnation's partition: one writer, whichever process runs it."""
    return f"statekeep-{spec.tenant}.{spec.namespace}.{spec.name}-{spec.function_id or 'none'}-{partition}"


def deliver_table(table: Any, producer: str, batch: int, partition: int) -> int:
    """Send ``table``'s messages, each topic's in table order, as ``batch`` of ``producer`` (see the module
    docstring); the number the broker did not have."""
    import pyarrow.compute as pc

    sent = 0
    for name in sorted(set(table["topic"].to_pylist())):
        rows = table.filter(pc.equal(table["topic"], name))
        sent += send(options(parse_pulsar(name)), producer, batch, messages_of(rows), partition)
    return sent


class PulsarOutputs:
    """A function's messages for Pulsar of one (batch, partition) (``batch`` None: a trigger's one record), from its
    output, ``publish`` targets, log topic and dead letters: :meth:`add` them, :meth:`keep` them before the state
    commit, :meth:`deliver` them after it (the interface of Kafka's
    :class:`~statekeep.functions.messaging.kafka.BatchOutputs`)."""

    def __init__(self, spec: ExecutorSpec, batch: tuple[int, int] | None) -> None:
        self.spec, self.batch = spec, batch
        self.pairs: list[tuple[str, Any]] = []
        self.table: Any = None

    def add(self, name: str, records: Any) -> None:
        """Records (message records, a list or a pyarrow Table of rows) for the Pulsar topic ``name``."""
        topic = parse_pulsar(name).name
        rows = records if isinstance(records, list) else records.to_pylist()
        self.pairs.extend((topic, r) for r in rows)

    def add_records(self, name: str, keys: list[bytes], values: list[bytes | None]) -> None:
        raise InvalidArgumentError(f"{name}: a function's changelog topic is a Kafka topic")

    def keep(self) -> None:
        """Check the messages (topics that exist and deduplicate, sizes within the broker's limit: else the error,
        nothing written) and keep them for a replay."""
        if not self.pairs:
            return
        table = records_table(self.pairs)
        for name in sorted(set(table["topic"].to_pylist())):
            check_topic(name, output=True)
        check_sizes(table)
        self.table = table
        if self.batch is not None:
            kept_sink(self.spec, "pulsar").write(*self.batch, table)

    def deliver(self, applied: bool) -> None:
        """After the state commit: the messages, effectively once (``applied`` False, a replay, changes nothing:
        the broker drops what it has)."""
        if self.table is None:
            return
        if self.batch is None:  # a trigger's: a producer of its own, no batch to record
            import uuid

            deliver_table(self.table, f"statekeep-trigger-{uuid.uuid4().hex}", 0, 0)
            return
        deliver_kept(self.spec, *self.batch, self.table)


def deliver_kept(spec: ExecutorSpec, batch: int, partition: int, table: Any = None) -> None:
    """Send what (batch, partition) kept for Pulsar (``table``, else read back; nothing kept: nothing to do), then
    forget what batch - 2 kept (Spark replays at most the batch after its last committed one)."""
    kept = kept_sink(spec, "pulsar")
    if table is None:
        table = kept.read(batch, partition)
        if table is None:
            return
    deliver_table(table, producer_name(spec, partition), batch, partition)
    if batch >= 2:
        kept.discard(batch - 2, partition)


# -- statekeep topics produce / consume ---------------------------------------------------------------------------


def produce(name: str, messages: list[dict[str, Any]]) -> None:
    """Write message records to the Pulsar topic ``name`` (checked first: the topic exists, sizes within the broker's
    limit), routed as Pulsar's clients route them (a keyed message by its key's hash), all sent before this returns.
    Not effectively-once: a one-off write."""
    topic = parse_pulsar(name)
    check_topic(name, output=False)
    table = records_table((topic.name, m) for m in messages)
    check_sizes(table)
    pulsar = client_module()
    opts = options(topic)
    failures: list[str] = []
    try:
        producer = shared_client(opts).create_producer(topic.topic, batching_enabled=True,
                                                       block_if_queue_full=True)
        def done(result: Any, ident: Any) -> None:
            if result != pulsar.Result.Ok:
                failures.append(str(result))

        for message in messages_of(table):
            producer.send_async(callback=done, **message)
        producer.flush()
        producer.close()
    except pulsar.PulsarException as e:
        raise StoreUnavailableError(f"sending to {name} failed: {type(e).__name__}: {e}") from None
    if failures:
        raise StoreUnavailableError(f"{len(failures)} messages to {name} failed ({failures[0]})")


def consume(name: str, limit: int = 0) -> Iterator[dict[str, Any]]:
    """The messages of the Pulsar topic ``name`` from its beginning to its last message when called (``limit`` > 0:
    at most that many), partition after partition, each as a message record with ``partition`` and
    ``messageId`` (``LEDGER:ENTRY:BATCH``), read with Readers (no subscription)."""
    from statekeep.functions.messaging.kafkarecords import message_of
    from statekeep.functions.messaging.pulsarclient import last_message_id

    topic = parse_pulsar(name)
    opts = options(topic)
    pulsar = client_module()
    client = opts.client()
    given = 0
    try:
        for index, partition in enumerate(partition_names(opts)):
            end = tuple(int(x) for x in last_message_id(opts, partition).split(":"))
            if end[1] < 0:
                continue
            reader = client.create_reader(partition, pulsar.MessageId.earliest, receiver_queue_size=10_000)
            try:
                while True:
                    message = reader.read_next(int(TIMEOUT * 1000))
                    ident = message.message_id()
                    position = (ident.ledger_id(), ident.entry_id(), ident.batch_index())
                    key = message.partition_key()
                    headers = [(k, v.encode()) for k, v in sorted(message.properties().items())]
                    record = message_of(key.encode() if key else None, message.data(), headers or None,
                                        message.event_timestamp() or None)
                    yield {**record, "partition": index, "messageId": ":".join(map(str, position))}
                    given += 1
                    if (limit and given >= limit) or position >= end:
                        break
            finally:
                reader.close()
            if limit and given >= limit:
                return
    finally:
        client.close()
