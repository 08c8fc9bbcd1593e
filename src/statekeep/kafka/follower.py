"""Followers of a Kafka changelog topic (KIP-813's other direction): a Kafka Streams application's store, or any
compacted topic of keyed records, followed as a read-only statekeep store.

    follower = FollowerStore.open("kafka://127.0.0.1:9092/wordcount-counts-changelog?value=long",
                                  "public", "default", "wordcount")    # the name it is served under
    follower.wait_until_caught_up(10); follower.get_counter("hello"); follower.scan(prefix="h"); follower.lag

One follower mechanism, two log sources: :meth:`FollowerStore.open <statekeep.changelog.FollowerStore.open>` given a
``kafka://`` URL builds a :class:`KafkaFollowerStore`, a :class:`~statekeep.changelog.FollowerStore` whose leader is
the topic (:class:`KafkaChangelog`) instead of a function's state store. Everything else is the follower's: its own
``local_dir`` copy (LMDB, a :class:`~statekeep.changelog.replica.LocalReplica`), reads (``get``, ``get_counter``,
``scan``, the REST routes, ``followers get``), subsets (``key_prefix``, ``key_filter``, ``transform``), ``on_apply``
with each batch of changes as they come, writes refused with :class:`ReadOnlyStoreError`.

The URL: ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC[?key=SERDE&value=SERDE]``, the serdes named as Kafka Streams'
``Serdes``: the key ``string`` (UTF-8, the default; it must be a statekeep state key); the value ``long``
(``Serdes.Long()``: 8 bytes big-endian, a counter), ``integer`` (``Serdes.Integer()``: 4 bytes, a counter),
``string`` (UTF-8 text), ``json`` (UTF-8 JSON text) or ``bytes`` (as they are, the default). A null value (a
tombstone) deletes the key. A record that does not decode with the named serdes stops the follower (as Kafka
Streams' default ``LogAndFailExceptionHandler`` does): reads, ``lag`` and ``wait_until_caught_up`` then raise
:class:`SerdeError` naming the topic, partition and offset. A key's version is its record's offset.

How it follows (a consumer of its own, in no consumer group, ``read_committed``: aborted transactions are never
seen, and an open one holds the follower back at its start as it holds Kafka Streams):

- It keeps, in the same local write as the records they account for, each partition's next offset (and the
  topic's id), so a follower killed at any moment resumes exactly where its last write ended.
- Bootstrap (first start, or a copy that cannot be trusted any more): it reads every partition from its first
  offset to its end as of the bootstrap's start into a NEW generation of the copy, in chunks, then switches to it
  in one write (readers see the previous complete copy until then; an interrupted bootstrap starts over). A
  compacted topic read from its start gives each key's newest value: behind compaction, from scratch, the copy is
  right (a key whose tombstone compaction dropped is simply absent), as Kafka guarantees for a reader that reads
  the topic within its ``delete.retention.ms``.
- A follower that resumes after having been away (last caught up) longer than half the topic's
  ``delete.retention.ms`` may have missed a delete whose tombstone compaction has dropped since: it bootstraps
  again instead of resuming. So does one whose position is below a partition's first offset (records deleted by
  retention: ``cleanup.policy=compact,delete`` or ``delete_records``).
- ``lag``: records not yet applied, summed over the partitions (the end of each partition for a
  ``read_committed`` reader, its last stable offset, minus the follower's position); during a bootstrap, every
  record of the topic. ``lag_ms``: 0 when caught up, else the milliseconds since the follower last was.
  ``wait_until_caught_up(timeout)``: True once every record a ``read_committed`` reader could read at the call
  is applied (a transaction left open holds it back, as it holds every such reader).
- The topic deleted (or deleted and created again: another topic id) after the follower adopted it: reads,
  ``lag`` and ``wait_until_caught_up`` raise :class:`NotFoundError`. An unreachable cluster is retried.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, ClassVar
from urllib.parse import parse_qsl

from statekeep.changelog.follower import FollowerStore
from statekeep.changelog.replica import LocalReplica, Op, write_ops
from statekeep.changelog.view import FollowerView, ViewError
from statekeep.errors import InvalidArgumentError, NotFoundError, StoreUnavailableError, UnsupportedCapabilityError
from statekeep.kafka import check_bootstrap, client_config, confluent, translate
from statekeep.kafka.admin import admin_client, check_topic
from statekeep.metadata.embedded import transaction
from statekeep.state import records
from statekeep.state.base import Capability, ChangelogPosition, ReadableStateStore, StateEntry
from statekeep.state.keys import encode_key

log = logging.getLogger(__name__)

SCHEME = "kafka://"
#: the serdes a key may be read with, and a value (see the module docstring)
KEY_SERDES = ("string",)
VALUE_SERDES = ("bytes", "string", "json", "long", "integer")
#: how long a call to the cluster may take before :class:`StoreUnavailableError` (s)
TIMEOUT = 15.0
#: Kafka's default ``delete.retention.ms`` (a day), where the topic's config cannot be read
DEFAULT_DELETE_RETENTION_MS = 86_400_000
#: how often the topic's id and partitions are checked while following (s)
TOPIC_CHECK_S = 2.0


class SerdeError(ViewError):
    """A record of the followed topic does not decode with the serdes the follower was given (or its key is not a
    statekeep state key): the follower stops there, as Kafka Streams' default deserialization handler does."""


def is_kafka_source(leader: object) -> bool:
    return isinstance(leader, str) and leader.startswith(SCHEME)


class KafkaChangelog(ReadableStateStore):
    """A Kafka topic as a follower's leader: its changelog is the topic's records (one changelog partition per
    topic partition, offsets Kafka's), decoded with the URL's serdes. It has no random access: reading keys
    raises :class:`UnsupportedCapabilityError` (follow it instead). Thread-safe (an admin client; every read of
    records has a consumer of its own). Raises :class:`InvalidArgumentError` for a malformed URL or serde."""

    capabilities = frozenset({Capability.CHANGELOG_READ})
    provider_name = "kafka"

    def __init__(self, url: str, tenant: str, namespace: str, name: str) -> None:
        super().__init__(tenant, namespace, name)
        if not is_kafka_source(url):
            raise InvalidArgumentError(f"a Kafka changelog is kafka://HOST:PORT/TOPIC[?key=SERDE&value=SERDE], "
                                       f"not {url!r}")
        rest, _, query = url[len(SCHEME):].partition("?")
        bootstrap, _, topic = rest.partition("/")
        try:
            self.bootstrap, self.topic = check_bootstrap(bootstrap), check_topic(topic)
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"{url!r} is not a Kafka changelog (kafka://HOST:PORT/TOPIC): {e}") from None
        options = dict(parse_qsl(query, keep_blank_values=True))
        unknown = set(options) - {"key", "value"}
        if unknown:
            raise InvalidArgumentError(f"{url!r}: a Kafka changelog's options are key= and value=, not "
                                       f"{', '.join(sorted(unknown))}")
        self.key_serde, self.value_serde = options.get("key", "string"), options.get("value", "bytes")
        if self.key_serde not in KEY_SERDES:
            raise InvalidArgumentError(f"{url!r}: key={self.key_serde!r}: a key is read as {', '.join(KEY_SERDES)}")
        if self.value_serde not in VALUE_SERDES:
            raise InvalidArgumentError(f"{url!r}: value={self.value_serde!r}: a value is read as one of "
                                       f"{', '.join(VALUE_SERDES)}")
        #: the URL as it identifies the copy (serdes included: another serde is another copy)
        self.url = f"{SCHEME}{self.bootstrap}/{self.topic}?key={self.key_serde}&value={self.value_serde}"
        self._admin = admin_client(self.bootstrap)
        self._kafka = confluent()

    def __repr__(self) -> str:
        return f"KafkaChangelog({self.url!r})"

    # ---- the topic ---------------------------------------------------------------------------

    def describe(self) -> tuple[str, list[int]]:
        """``(topic id, [partitions])`` now. :class:`NotFoundError` if the cluster has no such topic."""
        kafka = self._kafka
        try:
            found = self._admin.describe_topics(kafka.TopicCollection([self.topic]),
                                                request_timeout=TIMEOUT)[self.topic].result(TIMEOUT)
        except kafka.KafkaException as e:
            error = translate(e, f"describing {self.url}")
            if isinstance(error, NotFoundError):
                raise NotFoundError(f"no Kafka topic {self.topic!r} on {self.bootstrap}") from e
            raise error from e
        return str(found.topic_id), sorted(p.id for p in found.partitions)

    def delete_retention_ms(self) -> int:
        """The topic's ``delete.retention.ms``: how long compaction keeps a tombstone."""
        kafka = self._kafka
        try:
            resource = kafka.admin.ConfigResource(kafka.admin.ConfigResource.Type.TOPIC, self.topic)
            entries = self._admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(TIMEOUT)
        except kafka.KafkaException as e:
            raise translate(e, f"reading the config of {self.url}") from e
        entry = entries.get("delete.retention.ms")
        return int(entry.value) if entry is not None and entry.value is not None else DEFAULT_DELETE_RETENTION_MS

    def offsets(self, partitions: Iterable[int], *, earliest: bool = False) -> dict[int, int]:
        """Each partition's end for a ``read_committed`` reader (its last stable offset), or with ``earliest`` its
        first offset."""
        kafka = self._kafka
        spec = kafka.admin.OffsetSpec.earliest() if earliest else kafka.admin.OffsetSpec.latest()
        asked = {kafka.TopicPartition(self.topic, p): spec for p in partitions}
        try:
            found = self._admin.list_offsets(asked, isolation_level=kafka.IsolationLevel.READ_COMMITTED,
                                             request_timeout=TIMEOUT)
            return {tp.partition: int(f.result(TIMEOUT).offset) for tp, f in found.items()}
        except kafka.KafkaException as e:
            error = translate(e, f"reading the offsets of {self.url}")
            if isinstance(error, NotFoundError):
                raise NotFoundError(f"no Kafka topic {self.topic!r} on {self.bootstrap}") from e
            raise error from e

    # ---- records -----------------------------------------------------------------------------

    def reader(self, positions: Mapping[int, int]) -> TopicReader:
        """A reader of the topic's committed records from ``positions`` (partition -> next offset)."""
        return TopicReader(self, positions)

    def record(self, partition: int, offset: int, key: bytes | None, value: bytes | None) -> records.ChangelogRecord:
        """A Kafka record as the changelog record of its change (decoded with the serdes; version and offset: its
        offset); :class:`SerdeError` naming it if it does not decode."""
        where = f"{self.url}: the record at partition {partition}, offset {offset}"
        try:
            name = (key or b"").decode("utf-8")
            encode_key(name)
        except (UnicodeDecodeError, InvalidArgumentError) as e:
            raise SerdeError(f"{where}: its key is not a statekeep state key (non-empty UTF-8, at most 240 "
                             f"characters encoded): {e}") from None
        if value is None:
            return records.ChangelogRecord(name, None, None, offset, offset)
        serde = self.value_serde
        if serde in ("long", "integer"):
            size = 8 if serde == "long" else 4
            if len(value) != size:
                raise SerdeError(f"{where}: its value has {len(value)} bytes, not the {size} of value={serde}")
            number = int.from_bytes(value, "big", signed=True)
            return records.ChangelogRecord(name, "counter", records.counter_bytes(number), offset, offset)
        if serde in ("string", "json"):
            try:
                text = value.decode("utf-8")
                if serde == "json":
                    json.loads(text)
            except ValueError as e:
                raise SerdeError(f"{where}: its value is not {'JSON' if serde == 'json' else 'UTF-8 text'}: "
                                 f"{e}") from None
        return records.ChangelogRecord(name, "bytes", bytes(value), offset, offset)

    def changelog_partitions(self) -> int:
        return len(self.describe()[1])

    def partition_position(self, partition: int) -> ChangelogPosition:
        topic_id, partitions = self.describe()
        if partition not in partitions:
            raise InvalidArgumentError(f"{self.url} has no partition {partition}")
        return ChangelogPosition(topic_id, self.offsets([partition])[partition] - 1)

    def changelog_position(self) -> ChangelogPosition:
        """The topic's id as the epoch, and the newest of its partitions' last offsets."""
        topic_id, partitions = self.describe()
        return ChangelogPosition(topic_id, max(self.offsets(partitions).values(), default=0) - 1)

    def read_partition_changelog(self, partition: int, after: int = -1,
                                 limit: int | None = None) -> list[records.ChangelogRecord]:
        ends = self.offsets([partition])
        if partition not in ends:
            raise InvalidArgumentError(f"{self.url} has no partition {partition}")
        out: list[records.ChangelogRecord] = []
        reader = self.reader({partition: after + 1})
        try:
            while reader.positions[partition] < ends[partition] and (limit is None or len(out) < limit):
                batch = reader.read(1000 if limit is None else min(1000, limit - len(out)), TIMEOUT)
                if not batch and reader.positions[partition] < ends[partition]:
                    raise StoreUnavailableError(f"{self.url}: partition {partition} gave nothing in {TIMEOUT:.0f} s")
                out.extend(r for _, r in batch)
        finally:
            reader.close()
        return out

    def read_changelog(self, after: int = -1, limit: int | None = None) -> list[records.ChangelogRecord]:
        """The records of a one-partition topic (:class:`InvalidArgumentError` for more: read each with
        :meth:`read_partition_changelog`)."""
        if self.changelog_partitions() != 1:
            raise InvalidArgumentError(f"{self.url} has several partitions: read each (read_partition_changelog)")
        return self.read_partition_changelog(0, after, limit)

    def count_changelog(self, after: int = -1) -> int:
        """Records after ``after`` in each partition, summed."""
        _, partitions = self.describe()
        return sum(max(0, end - (after + 1)) for end in self.offsets(partitions).values())

    def get_entry(self, key: str) -> StateEntry | None:
        raise UnsupportedCapabilityError("random reads", "kafka", f"{self.url} is read from its start: follow it "
                                         "(FollowerStore.open) and read the follower")

    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        raise UnsupportedCapabilityError("random reads", "kafka", f"{self.url} is read from its start: follow it "
                                         "(FollowerStore.open) and read the follower")

    def has_marker(self, marker: str) -> bool:
        return False

    def close(self) -> None:
        pass


class TopicReader:
    """One consumer of the topic's committed records, every partition of ``positions`` assigned at its next
    offset (in no consumer group: nothing is committed to Kafka); ``positions`` moves with what it reads. Used by
    one thread at a time."""

    def __init__(self, source: KafkaChangelog, positions: Mapping[int, int]) -> None:
        kafka = self._kafka = source._kafka
        self.source, self.positions = source, dict(positions)
        self._consumer = kafka.Consumer(client_config(source.bootstrap, **{
            "group.id": f"statekeep-follower-{uuid.uuid4().hex}", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "isolation.level": "read_committed", "enable.partition.eof": True,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100, "allow.auto.create.topics": False}))
        self._consumer.assign([kafka.TopicPartition(source.topic, p, o) for p, o in self.positions.items()])

    def read(self, limit: int, timeout: float) -> list[tuple[int, records.ChangelogRecord]]:
        """Up to ``limit`` records ``(partition, record)`` in each partition's offset order: waits up to ``timeout``
        for the first, then takes what has arrived. :class:`NotFoundError` if the topic is gone,
        :class:`StoreUnavailableError` for another failure, :class:`SerdeError` for a record that does not decode
        (``positions`` stays before it)."""
        first = self._consumer.poll(timeout)
        if first is None:
            return []
        messages = [first, *self._consumer.consume(limit - 1, 0)] if limit > 1 else [first]
        out: list[tuple[int, records.ChangelogRecord]] = []
        kafka, positions, source = self._kafka, self.positions, self.source
        for message in messages:
            error = message.error()
            if error is not None:
                if error.code() == kafka.KafkaError._PARTITION_EOF:
                    partition = message.partition()
                    positions[partition] = max(positions.get(partition, 0), message.offset())  # past control records
                    continue
                if error.code() in (kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, kafka.KafkaError._UNKNOWN_TOPIC):
                    raise NotFoundError(f"no Kafka topic {source.topic!r} on {source.bootstrap} (deleted?)")
                raise StoreUnavailableError(f"{source.url}: reading failed: {error}")
            partition, offset = message.partition(), message.offset()
            out.append((partition, source.record(partition, offset, message.key(), message.value())))
            positions[partition] = offset + 1
        return out

    def close(self) -> None:
        self._consumer.close()


class KafkaReplica(LocalReplica):
    """A :class:`LocalReplica` that also keeps where it is in the topic (meta ``P+q``: ``{"gen", "topic",
    "positions": {partition: next offset}, "caughtUp": ms}``) in the same write as the records it accounts for,
    and the source's URL (``P+s``: a copy of another topic or serde is not resumed)."""

    def source(self) -> str | None:
        with transaction(self._env, db=self._meta) as txn:
            raw = txn.get(self._p + b"s")
        return None if raw is None else bytes(raw).decode()

    def place(self) -> dict[str, Any] | None:
        """Where the active copy is in the topic (None: nowhere yet, or unreadable: bootstrap again)."""
        with transaction(self._env, db=self._meta) as txn:
            raw = txn.get(self._p + b"q")
        if raw is None:
            return None
        try:
            place = json.loads(bytes(raw))
            place["positions"] = {int(p): int(o) for p, o in place["positions"].items()}
            return place  # type: ignore[no-any-return]
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            log.warning("%s: not a follower's position (%s): bootstrapping the copy again", self._where("q"), e)
            return None

    def adopt(self, source: str, view: str | None) -> None:
        """Forget the copy (as :meth:`reset_view`) and record ``source`` as what the next bootstrap reads."""
        self.reset_view(view)
        self._submit(lambda txn: (txn.put(self._p + b"s", source.encode(), db=self._meta),
                                  txn.delete(self._p + b"q", db=self._meta)))

    def advance(self, gen: int, ops: list[Op], place: dict[str, Any], applied: int) -> None:
        """Apply ``ops`` to generation ``gen`` and record ``place`` and ``applied``, in one write."""
        raw = json.dumps(place).encode()

        def work(txn: Any) -> None:
            write_ops(txn, self._state, self._p + gen.to_bytes(8, "big"), ops)
            txn.put(self._p + b"q", raw, db=self._meta)
            txn.put(self._p + b"a", applied.to_bytes(8, "big", signed=True), db=self._meta)

        self._submit(work)


def _ops(batch: Iterable[records.ChangelogRecord]) -> list[Op]:
    return [(r.key.encode(), None if r.value is None else records.entry_bytes(r.version, r.kind, r.value))
            for r in batch]


class KafkaFollowerStore(FollowerStore):
    """See the module docstring. Build one with :meth:`FollowerStore.open <statekeep.changelog.FollowerStore.open>`
    (or :meth:`open_topic`) and a ``kafka://`` URL."""

    replica_type: ClassVar[type[LocalReplica]] = KafkaReplica
    replica: KafkaReplica

    def __init__(self, leader: KafkaChangelog, replica: KafkaReplica, *, idle_wait: float = 0.2,
                 **options: Any) -> None:
        options.pop("snapshots", None)
        options.pop("registry", None)
        options.setdefault("poll_interval", 0.001)  # a poll waits for records itself (idle_wait)
        super().__init__(leader, replica, **options)  # type: ignore[arg-type]  # a topic stands for the state store
        #: the followed topic (also :attr:`leader`, typed there as a function's state store)
        self.source = leader
        self.idle_wait = idle_wait
        if replica.source() != leader.url:  # another topic or serde: not this copy
            if self._meta.gen is not None:
                log.info("follower %s: now of %s; rebuilding the copy", self._fqfn, leader.url)
            replica.adopt(leader.url, self.view.fingerprint())
            self._meta = replica.load()
        self._place = replica.place() if self._meta.gen is not None and self._meta.restore is None else None
        if self._place is not None and self._place.get("gen") != self._meta.gen:
            self._place = None
        self._reader: TopicReader | None = None
        self._retention_ms: int | None = None
        self._topic_checked = float("-inf")
        self._partitions: list[int] = []
        self._saved_caught_up = (self._place or {}).get("caughtUp", 0)
        self._lock = threading.Lock()  # self._place, read by lag from other threads

    @classmethod
    def open_topic(cls, url: str, tenant: str, namespace: str, name: str, *, local_dir: str | None = None,
                   key_prefix: str = "", key_filter: Any = None, transform: Any = None, view_id: str | None = None,
                   start: bool = True, **options: Any) -> KafkaFollowerStore:
        """Follow the topic of ``url`` (see the module docstring) as ``tenant/namespace/name``. Raises
        :class:`InvalidArgumentError` for a malformed URL, serde or view, :class:`NotFoundError` for a topic the
        cluster does not have, :class:`StoreUnavailableError` for a cluster that does not answer."""
        import shutil
        import tempfile

        view = FollowerView(key_prefix, key_filter, transform, view_id)
        source = KafkaChangelog(url, tenant, namespace, name)
        source.describe()  # the topic exists and answers: before a directory is made
        temporary = None
        if local_dir is None:
            local_dir = temporary = tempfile.mkdtemp(prefix=f"statekeep-follower-{name}-")
        replica = None
        try:
            replica = KafkaReplica(local_dir, tenant, namespace, name)
            follower = cls(source, replica, owned=[replica], temporary_dir=temporary, view=view, **options)
        except BaseException:
            if replica is not None:
                replica.close()
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
            raise
        try:
            follower._check_topic(force=True)
            if start:
                follower.start()
        except BaseException:
            follower.close()
            raise
        return follower

    def close(self) -> None:
        super().close()  # stops the tailing thread: the reader is free
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    # ---- the topic -----------------------------------------------------------------------------

    def _check_leader(self, position: ChangelogPosition | None) -> None:
        self._check_topic(force=True)

    def _check_topic(self, force: bool = False) -> None:
        """:class:`NotFoundError` if the topic is gone, or is another topic (another id) than the copy's."""
        now = time.monotonic()
        if not force and now - self._topic_checked < TOPIC_CHECK_S:
            return
        try:
            topic_id, partitions = self.source.describe()
        except NotFoundError as e:
            raise self._deleted(f"{e}") from None
        if self._meta.epoch and topic_id != self._meta.epoch:
            raise self._deleted(f"{self.source.url} is another topic now (id {self._meta.epoch} -> {topic_id})")
        self._partitions, self._topic_checked = partitions, now

    def _deleted(self, why: str) -> NotFoundError:
        return NotFoundError(f"the followed topic of {self._fqfn} was deleted: {why}; close this follower")

    def _stale(self, place: dict[str, Any]) -> str | None:
        """Why the copy at ``place`` cannot be resumed (None: it can): away longer than half the topic's
        ``delete.retention.ms``, or before a partition's first offset."""
        if self._retention_ms is None:
            self._retention_ms = self.source.delete_retention_ms()
        away = int(time.time() * 1000) - int(place.get("caughtUp", 0))
        if away > self._retention_ms / 2:
            return (f"last caught up {away} ms ago, longer than half the topic's delete.retention.ms "
                    f"({self._retention_ms}): a tombstone may have been compacted away since")
        positions = place["positions"]
        firsts = self.source.offsets(self._partitions, earliest=True)
        behind = [p for p, first in firsts.items() if positions.get(p, 0) < first]
        if behind:
            return f"partitions {behind} start past the copy's position (records deleted by retention)"
        return None

    # ---- one poll --------------------------------------------------------------------------------

    def step(self) -> int:
        """One poll: bootstrap if needed, else apply the records that came (waiting up to ``idle_wait`` for them
        when caught up). Returns how many records it applied."""
        meta = self._meta
        if meta.restore is not None:  # an interrupted bootstrap starts over
            self.replica.abandon_restore()
            self._meta = meta = self.replica.load()
            self._place = None
        if meta.garbage and self.replica.collect_garbage(meta.garbage):
            meta.garbage = []
        self._check_topic()
        place = self._place
        if place is not None and self._reader is None:  # (re)starting: resume only a copy that can be trusted
            why = self._stale(place)
            if why is not None:
                log.info("follower %s of %s: %s; bootstrapping again", self._fqfn, self.source.url, why)
                place = None
        if place is None:
            return self._bootstrap_topic()
        started, wall = time.monotonic(), int(time.time() * 1000)
        ends = self.source.offsets(self._partitions)
        positions = dict(place["positions"])
        for p in self._partitions:
            positions.setdefault(p, 0)  # a partition added since: from its start
        if self._reader is None or self._reader.positions.keys() != positions.keys():
            self._close_reader()
            self._reader = self.source.reader(positions)
        reader = self._reader
        behind = any(positions[p] < ends.get(p, 0) for p in positions)
        if not behind:
            self._caught_up(started, wall)
        try:
            batch = reader.read(self.batch_size, 0.1 if behind else self.idle_wait)
        except BaseException:
            self._close_reader()  # what it read and did not apply is read again from the copy's positions
            raise
        moved = reader.positions != place["positions"]
        if batch or (moved and wall - self._saved_caught_up >= 1000):
            changed = [r for _, r in batch]
            selected = self.view.records(changed)
            updated = {**place, "positions": dict(reader.positions), "caughtUp": self._saved_caught_up}
            applied = max(updated["positions"].values(), default=0) - 1
            self.replica.advance(place["gen"], _ops(selected), updated, applied)
            with self._lock:
                self._place = updated
            self._meta.applied = applied
            if self.on_apply is not None and selected:
                self.on_apply(changed if selected is changed else [r for r in changed if self.view.matches(r.key)])
        else:
            with self._lock:
                self._place = {**place, "positions": dict(reader.positions)}
        if behind and all(reader.positions[p] >= ends.get(p, 0) for p in reader.positions):
            self._caught_up(started, wall)
        with self._cond:
            self._phase = "tailing"
        return len(batch)

    def _caught_up(self, started: float, wall: int) -> None:
        """Everything committed before ``started`` (monotonic; ``wall``: the same moment in ms since the epoch)
        is applied; the copy's record of when is written at most once a second."""
        with self._cond:
            self._caught_up_at = max(self._caught_up_at, started)
            self._cond.notify_all()
        place = self._place
        if place is not None and wall - self._saved_caught_up >= 1000:
            updated = {**place, "caughtUp": wall}
            self.replica.advance(place["gen"], [], updated, self._meta.applied)
            self._saved_caught_up = wall
            with self._lock:
                self._place = updated

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _bootstrap_topic(self) -> int:
        """Read every partition from its first offset to its end now into a new generation, then switch to it."""
        self._close_reader()
        with self._cond:
            self._phase = "restoring"
            self._restored = 0
        self._check_topic(force=True)
        topic_id = self.source.describe()[0]
        wall = int(time.time() * 1000)
        started = time.monotonic()
        firsts = self.source.offsets(self._partitions, earliest=True)
        ends = self.source.offsets(self._partitions)
        progress = self.replica.begin_restore({"source": "kafka", "topic": topic_id})
        reader = self.source.reader(firsts)
        try:
            written = self._write_generation(progress, self._bootstrap_ops(reader, ends))
            if not written:  # stopping: the next start bootstraps again
                self.replica.abandon_restore()
                self._meta = self.replica.load()
                return 0
        except BaseException:
            reader.close()
            self.replica.abandon_restore()
            self._meta = self.replica.load()
            raise
        place = {"gen": progress["gen"], "topic": topic_id, "positions": dict(reader.positions), "caughtUp": wall}
        self._reader = reader  # it goes on from there
        applied = max(place["positions"].values(), default=0) - 1
        self.replica.finish_restore(progress["gen"], applied, topic_id, {b"q": json.dumps(place).encode()})
        self._meta = self.replica.load()
        with self._lock:
            self._place = place
        self._saved_caught_up = wall
        with self._cond:
            self._phase = "tailing"
            self._caught_up_at = max(self._caught_up_at, started)
            self._cond.notify_all()
        return max(1, int(progress["written"]))

    def _bootstrap_ops(self, reader: TopicReader, ends: Mapping[int, int]) -> Iterator[Op | None]:
        """The records of every partition up to ``ends`` as ops of the copy (None: a record outside the view)."""
        idle_since = time.monotonic()
        while any(reader.positions.get(p, 0) < end for p, end in ends.items()):
            batch = reader.read(self.restore_chunk, 0.5)
            if not batch:
                if time.monotonic() - idle_since > TIMEOUT:
                    raise StoreUnavailableError(f"{self.source.url}: no records within {TIMEOUT:.0f} s while "
                                                f"bootstrapping (at {reader.positions}, the ends are {dict(ends)})")
                if self._tailing.stopping:
                    return
                continue
            idle_since = time.monotonic()
            changed = [r for _, r in batch]
            shown = self.view.records(changed)
            yield from _ops(shown)
            yield from [None] * (len(changed) - len(shown))  # read, and left out of the view

    # ---- status --------------------------------------------------------------------------------

    @property
    def lag(self) -> int:
        """Records of the topic not yet applied (every record while bootstrapping)."""
        self._raise_if_failed()
        with self._lock:
            place = self._place
        partitions = self._partitions or self.source.describe()[1]
        ends = self.source.offsets(partitions)
        if place is None:
            firsts = self.source.offsets(partitions, earliest=True)
            return sum(max(0, end - firsts.get(p, 0)) for p, end in ends.items())
        positions = place["positions"]
        return sum(max(0, end - positions.get(p, 0)) for p, end in ends.items())

    @property
    def lag_ms(self) -> int:
        """0 when caught up, else the milliseconds since this follower last was (since it started, before)."""
        if self.lag == 0:
            return 0
        with self._lock:
            place = self._place
        since = self._saved_caught_up if place is not None else 0
        return max(0, int(time.time() * 1000) - since) if since else -1

    def status(self) -> dict[str, Any]:
        out = super().status()
        with self._lock:
            place = self._place
        out["source"] = self.source.url
        out["positions"] = None if place is None else {str(p): o for p, o in sorted(place["positions"].items())}
        out["caughtUpMs"] = self._saved_caught_up or None
        return out

    def _raise_if_failed(self, since: float | None = None) -> None:
        if isinstance(self._error, SerdeError):
            raise SerdeError(str(self._error))
        super()._raise_if_failed(since)


def open_follower(leader: str, tenant: str, namespace: str, name: str, *, provider: str | None = None,
                  blobs: str | None = None, provider_config: Mapping[str, Any] | None = None,
                  snapshots: Any = True, check_registry: bool | None = None, functions_root: str | None = None,
                  **options: Any) -> KafkaFollowerStore:
    """:meth:`FollowerStore.open` of a ``kafka://`` leader (see the module docstring). A state provider, blob
    storage or provider config are a function's and a topic has none: :class:`InvalidArgumentError`."""
    for what, given in (("provider", provider), ("blobs", blobs), ("provider_config", provider_config)):
        if given:
            raise InvalidArgumentError(f"a follower of a Kafka topic ({leader}) takes no {what}: the topic is all "
                                       "it reads")
    if check_registry:
        raise InvalidArgumentError(f"a follower of a Kafka topic ({leader}) has no function registry to check")
    return KafkaFollowerStore.open_topic(leader, tenant, namespace, name, **options)


__all__ = ["KafkaChangelog", "KafkaFollowerStore", "SerdeError", "open_follower"]
