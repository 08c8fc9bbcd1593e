"""Exactly once into Kafka: the transactional delivery of one writer's (batch, partition) records
(:class:`KafkaDelivery`), one ``transactional.id`` per (function incarnation, partition), fenced, with the batch
recorded as a consumer-group offset in the same transaction (the protocol: :mod:`statekeep.functions.messaging.kafka`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from statekeep.errors import StatekeepError
from statekeep.kafka import client_config, confluent
from statekeep.retry import OUTAGE

#: how long a client waits for an unreachable cluster before the error (s): bounded, librdkafka's own retries are not
TIMEOUT = 15.0
#: a transaction left open by a killed producer holds ``read_committed`` readers back at most this long (unless the
#: next attempt's ``init_transactions`` aborts it first, which it does at once)
TRANSACTION_TIMEOUT_MS = 60_000
#: the longest a (batch, partition)'s delivery may take before it fails (and its batch is replayed): a bound on
#: librdkafka calls whose own timeouts were seen not to hold after a broker restart
DEADLINE = 90.0


class KafkaDeliveryError(StatekeepError):
    """A (batch, partition)'s records could not be committed to Kafka (the broker refused or was unreachable);
    the state commit stands and a replay of the batch delivers its kept records. ``fenced``: the producer was
    fenced by a newer one of its transactional id."""

    fenced = False


# -- transactions -------------------------------------------------------------------------------------------------


@dataclass
class _Kept:
    """A producer this process keeps for a transactional id, and whether it lost a connection since."""

    producer: Any
    troubled: bool = False
    unused: bool = True  # no transaction begun since its init_transactions: it is as fresh as a new one


_producers: dict[tuple[str, str], _Kept] = {}
_delivered: dict[tuple[str, str], int] = {}  # the last batch this process's producer of an id committed
_groups: dict[tuple[str, str], Any] = {}  # a consumer group's metadata, which a transaction's offsets name
_lookups: dict[tuple[str, str], Any] = {}  # a writer's group's consumer, for delivered()'s look-ups
_producers_lock = threading.Lock()


class KafkaDelivery:
    """The transactional delivery of one writer's (batch, partition) records (see the module docstring):
    ``transactional_id`` names the writer, one per (function incarnation, partition), stable across processes."""

    def __init__(self, bootstrap: str, transactional_id: str) -> None:
        self.bootstrap, self.transactional_id = bootstrap, transactional_id
        self.group = f"statekeep.{transactional_id}"

    def _producer(self, fresh: bool) -> Any:
        """This process's producer of the id; ``fresh``: a new one, whose ``init_transactions`` fences every
        earlier producer of the id and aborts its open transaction (or the kept one, if it has begun no
        transaction since its own: one made by :meth:`warm`). A kept producer that lost a connection since its last
        transaction (a broker restarted) is replaced too: librdkafka's next transaction on it was seen to hang in
        ``send_offsets_to_transaction``."""
        kafka = confluent()
        key = (self.bootstrap, self.transactional_id)
        with _producers_lock:
            kept = _producers.get(key)
        if kept is not None and (kept.unused or not fresh):
            kept.producer.poll(0)  # its error callbacks since its last transaction
            if not kept.troubled:
                kept.unused = kept.unused and fresh  # asked for not fresh: for a transaction
                return kept.producer
        # a new producer, made and initialised outside the process's lock: another id's delivery goes on meanwhile
        # (one id's deliveries are one at a time: a task's, or the delivery agent's per id)
        holder = _Kept(None)

        def trouble(error: Any) -> None:
            holder.troubled = True

        producer = kafka.Producer(client_config(self.bootstrap, **{
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
        with _producers_lock:
            _producers[key] = holder
        return producer

    def warm(self) -> None:
        """Ahead of the id's first delivery in this process: its producer made and initialised (fencing every
        earlier one, as that delivery's own fresh producer would: it takes this one instead), and its group's
        look-up consumer and metadata made, so that the first batch waits for none of them. Nothing if this process
        has a producer of the id. Raises as :meth:`_producer` (the delivery that follows tries again)."""
        with _producers_lock:
            if (self.bootstrap, self.transactional_id) in _producers:
                return
        self._producer(fresh=True)
        self._lookup_consumer()
        self._group_metadata()

    def _group_metadata(self) -> Any:
        kafka = confluent()
        key = (self.bootstrap, self.group)
        with _producers_lock:
            if key not in _groups:
                consumer = kafka.Consumer(client_config(self.bootstrap, **{"group.id": self.group}))
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
        the first of ``topics`` is past it (read stable: a pending transaction's offsets are waited for). Call
        after fencing, so that no earlier producer still commits. The process keeps one consumer of the group
        for these look-ups, from one to the next."""
        kafka = confluent()
        from statekeep.kafka import translate

        first = sorted(set(topics))[0]
        consumer = self._lookup_consumer()

        def read() -> Any:
            try:
                return consumer.committed([kafka.TopicPartition(first, 0)], timeout=TIMEOUT)
            except kafka.KafkaException as e:  # a coordinator still loading (a broker just started): unavailable
                raise translate(e, f"{self.transactional_id}: reading what Kafka committed") from e

        try:
            found = OUTAGE.bounded(seconds=TIMEOUT).repeat(read)
        except BaseException:
            with _producers_lock:  # in a state unknown: the next look-up starts with a new one
                _lookups.pop((self.bootstrap, self.group), None)
            consumer.close()
            raise
        return bool(found) and found[0].offset > batch

    def _lookup_consumer(self) -> Any:
        """This process's consumer of the writer's group, for :meth:`delivered` (made once, kept)."""
        key = (self.bootstrap, self.group)
        with _producers_lock:
            if key not in _lookups:
                _lookups[key] = confluent().Consumer(client_config(self.bootstrap, **{
                    "group.id": self.group, "enable.auto.commit": False, "isolation.level": "read_committed"}))
            return _lookups[key]

    def behind(self, batch: int, table: Any, earlier: list[int]) -> int | None:
        """In a Spark task, hand ``batch``'s records to the executor's delivery agent to commit behind the task
        (:func:`~statekeep.functions.messaging.kafkaagent.behind`: ``earlier``, the partition's batches kept and
        not known delivered, must all have been handed to it). Returns the id's last batch the agent delivered,
        or None: refused, or not in a task (then :meth:`catch_up`)."""
        from statekeep.functions.messaging import kafkaagent

        if table is None or not len(table) or not kafkaagent.wanted():
            return None
        try:
            return kafkaagent.behind(self.bootstrap, self.transactional_id, batch, table, earlier)
        except kafkaagent.AgentError as e:
            raise KafkaDeliveryError(str(e)) from e

    def catch_up(self, kept: list[tuple[int, Any]]) -> None:
        """Deliver those of ``kept`` (a partition's kept (batch, table) pairs, in batch order: every batch of the
        id not known delivered) that Kafka has not got, in order, each in its own transaction. The id's batches
        reach Kafka in batch order (each delivery is the next batch of the id, or a catch-up), so those Kafka has
        are a prefix: this process's producer of the id continues after the last it committed; any other fences
        the id first and looks up the first batch Kafka lacks. In a Spark task the executor's agent runs it.
        Raises as :meth:`deliver`."""
        from statekeep.functions.messaging import kafkaagent

        kept = [(batch, table) for batch, table in kept if table is not None and len(table)]
        if not kept:
            return
        if kafkaagent.wanted():
            try:
                kafkaagent.catch_up(self.bootstrap, self.transactional_id, kept, DEADLINE * (len(kept) + 1) + 30)
            except kafkaagent.AgentError as e:
                raise KafkaDeliveryError(str(e)) from e
            return
        with _producers_lock:
            last = _delivered.get((self.bootstrap, self.transactional_id))
        todo = [(batch, table) for batch, table in kept if last is None or batch > last]
        if todo and (last is None or todo[0][0] != last + 1 or (self.bootstrap, self.transactional_id)
                     not in _producers):
            self._producer(fresh=True)  # fences every other producer of the id: what Kafka has is settled
            while todo and self.delivered(todo[0][0], todo[0][1]["topic"].to_pylist()):
                todo.pop(0)
        for batch, table in todo:
            self._bounded(batch, table, False, check=False)

    def deliver(self, batch: int | None, table: Any, *, replay: bool = False) -> bool:
        """Write ``table``'s records (kafkarecords.COLUMNS) as ``batch``'s one transaction, unless a ``replay`` finds
        ``batch`` delivered already (it fences the id first). ``batch`` None: a one-off transaction that records
        no batch. Returns whether this call wrote them. :class:`KafkaDeliveryError` if Kafka refused or did not
        answer within :data:`DEADLINE` (the transaction is aborted, or left to the next producer of the id to
        abort; a replay delivers again)."""
        if table is None or not len(table):
            return False
        from statekeep.functions.messaging import kafkaagent

        if kafkaagent.wanted():  # in a Spark task: the executor's agent delivers, with the producer it keeps
            try:
                return kafkaagent.deliver(self.bootstrap, self.transactional_id, batch, table, replay=replay,
                                          timeout=DEADLINE * 2 + 30)
            except kafkaagent.AgentError as e:
                raise KafkaDeliveryError(str(e)) from e
        try:
            return self._bounded(batch, table, replay)
        except KafkaDeliveryError as e:
            if replay or not e.fenced:
                raise
            # another process's producer of the id came since this one's (a Python worker that ran the partition's
            # previous batch): a fresh one fences it in turn, and looks up what Kafka has
            return self._bounded(batch, table, True)

    def _bounded(self, batch: int | None, table: Any, replay: bool, *, check: bool = True) -> bool:
        """:meth:`_transaction` within :data:`DEADLINE`."""
        topics = sorted(set(table["topic"].to_pylist()))
        outcome: list[BaseException | bool] = []

        def attempt() -> None:
            try:
                outcome.append(self._transaction(batch, table, topics, replay, check))
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

    def _transaction(self, batch: int | None, table: Any, topics: list[str], replay: bool, check: bool = True
                     ) -> bool:
        kafka = confluent()
        # a producer of the id that did not commit batch - 1 here may have been fenced by another process's (Spark
        # ran the partition's previous batch in another Python worker), which may have delivered this batch too: as
        # a replay, fenced again and looked up (``check`` False: the caller has just done so, see catch_up)
        if replay or (check and batch is not None and not self.continues(batch)):
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
    """Queue ``table``'s records (kafkarecords.COLUMNS) on ``producer``, each topic's in table order. Records without
    headers and timestamps (a changelog's, plain outputs') go through ``produce_batch`` (one call per few thousand:
    half the cost of a call each; it refuses timestamps, whatever its docstring says), others one ``produce``
    each; a full local queue is let drain."""
    import pyarrow.compute as pc

    kafka = confluent()
    poll = producer.poll
    if table["headers"].null_count == len(table) and pc.max(table["timestamp"]).as_py() == 0:
        for topic in topics:
            rows = table if len(topics) == 1 else table.filter(pc.equal(table["topic"], topic))
            keys, values = rows["key"].to_pylist(), rows["value"].to_pylist()
            for start in range(0, len(keys), _BATCH):
                end = start + _BATCH
                batch = [{"key": k, "value": v} for k, v in zip(keys[start:end], values[start:end])]
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
    names, keys, values, stamps = (table[c].to_pylist() for c in ("topic", "key", "value", "timestamp"))
    headers = table["headers"]
    if headers.null_count == len(table):  # no header list to make per record
        for topic, key, value, timestamp in zip(names, keys, values, stamps):
            try:
                produce(topic, value, key, timestamp=timestamp)
            except BufferError:  # the local queue is full: let it drain
                _full(producer, topic, value, key, timestamp=timestamp)
        return
    for topic, key, value, found, timestamp in zip(names, keys, values, headers.to_pylist(), stamps):
        pairs = [(h["key"], h["value"]) for h in found] if found else None
        try:
            produce(topic, value, key, headers=pairs, timestamp=timestamp)
        except BufferError:
            _full(producer, topic, value, key, headers=pairs, timestamp=timestamp)


def _full(producer: Any, *args: Any, **kwargs: Any) -> None:
    """Produce one record on a producer whose local queue was full: let it drain until the record is taken."""
    while True:
        producer.poll(0.05)
        try:
            producer.produce(*args, **kwargs)
            return
        except BufferError:
            continue


def transactional_id(tenant: str, namespace: str, name: str, incarnation: str, partition: int) -> str:
    """The ``transactional.id`` of a function incarnation's partition: one writer, whichever process runs it."""
    return f"statekeep-{tenant}.{namespace}.{name}-{incarnation}-{partition}"


def _agent_delivery(op: str, bootstrap: str, ident: str, batch: int | None, payload: Any, replay: bool) -> Any:
    """The executor's delivery agent's run of one request (:mod:`statekeep.functions.messaging.kafkaagent`): a
    "warm" as :meth:`KafkaDelivery.warm`, a "deliver" as :meth:`KafkaDelivery.deliver`, a "catch_up" as
    :meth:`KafkaDelivery.catch_up`, and a batch handed
    "behind" its task as the id's next (no fenced retry: a failure leaves it kept, for the next catch-up)."""
    delivery = KafkaDelivery(bootstrap, ident)
    if op == "warm":
        return delivery.warm()
    if op == "deliver":
        return delivery.deliver(batch, payload, replay=replay)
    if op == "catch_up":
        return delivery.catch_up(payload)
    return delivery._bounded(batch, payload, False)


if __name__ == "__main__":  # the executor's delivery agent: its classes by their module's name, not __main__'s
    import sys

    from statekeep.functions.messaging import kafkaagent, kafkatxn

    kafkaagent.Agent(sys.argv[1], int(sys.argv[2]), kafkatxn._agent_delivery).serve()
