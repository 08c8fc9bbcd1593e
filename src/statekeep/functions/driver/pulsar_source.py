"""``spark.readStream.format("statekeep-pulsar")``: a Pulsar topic on a real broker as a Spark stream (PySpark's
Python data source API, ``DataSourceStreamReader``).

Options: ``serviceUrl`` (``pulsar://HOST:PORT``, the binary protocol the executors read with), ``adminUrl``
(``http://HOST:PORT``, the broker's admin REST API, asked for each partition's last message id, as StreamNative's
connector's ``admin.url`` is), ``topic`` (``persistent://TENANT/NAMESPACE/TOPIC``, partitioned or not: the full
name, never guessed from a short one), ``startingOffsets`` (``earliest`` or ``latest``, as Kafka's source; default
``latest``), ``timeoutSeconds`` (default 30: how long a broker may take to answer before the query fails),
``maxEntriesPerTrigger`` (the read limit of a micro-batch, as Kafka's ``maxOffsetsPerTrigger``: at most this many
broker entries, split evenly over the partitions that have some to read, each at least one; an entry is one
message, or one batch of a batching producer, whose messages a micro-batch reads whole; default: no limit).

Columns, the Kafka source's and then Pulsar's own: ``key binary`` (the message key's UTF-8 bytes; null without
one), ``value binary``, ``topic string`` (the topic as named, not its partition's name), ``partition int`` (the
partition's index, 0 for a non-partitioned topic), ``offset long`` (null: Pulsar has message ids, not offsets),
``timestamp timestamp`` (publish time), ``headers array<struct<key:string,value:binary>>`` (the message's
properties, values UTF-8, sorted by key), ``messageId binary`` (the client's serialized ``MessageId``:
``pulsar.MessageId.deserialize`` reads it), ``eventTime timestamp`` (null when the producer set none).

Offsets are message ids per partition, kept in the query's checkpoint: ``{"topic": NAME, "partitions": {"INDEX":
"LEDGER:ENTRY:BATCH"}}``, each the last message id a micro-batch includes (``earliest`` before any). A micro-batch
reads, per partition, the messages after its start and up to and including its end (the admin API's last message
id is exact, batch index included; a read limit's end is a whole entry, ``LEDGER:ENTRY:-1``, counted on the admin
API's ledger list), with a ``Reader`` from the start's message id, so a micro-batch replayed from
the checkpoint reads the same messages (as long as the topic's retention keeps them; messages up to the end not
readable within ``timeoutSeconds`` fail the batch, StoreUnavailableError, rather than end it short). A partition added
to a partitioned topic is read from its earliest message. Nothing is acknowledged and no subscription is made: the
topic keeps what the namespace's retention keeps.

Errors are one line: an unknown topic or namespace is a :class:`NotFoundError`, a broker that does not answer
within ``timeoutSeconds`` a :class:`StoreUnavailableError`, a bad option an :class:`InvalidArgumentError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, MissingDependencyError, StoreUnavailableError
from statekeep.functions.messaging.pulsarclient import PulsarOptions as _Options
from statekeep.functions.messaging.pulsarclient import client_module as _client_module
from statekeep.functions.messaging.pulsarclient import (forget_client, last_message_id, ledgers, partition_names,
                                                        shared_client)

try:  # a Spark data source: without PySpark it is not importable at all
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError as e:
    raise MissingDependencyError(f"the statekeep-pulsar source needs PySpark: pip install 'statekeep[spark]' ({e})"
                                 ) from e

if TYPE_CHECKING:
    from pyspark.sql.streaming.datasource import ReadLimit
    from pyspark.sql.types import StructType

__all__ = ["SCHEMA", "PulsarStreamReader", "StatekeepPulsarSource", "last_message_id", "partition_names"]

#: the Kafka source's columns, then Pulsar's message id and event time
SCHEMA = ("key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
          "headers array<struct<key:string,value:binary>>, messageId binary, eventTime timestamp")
#: a partition's offset before any message: read from its first
EARLIEST = "earliest"
#: the most rows of one Arrow record batch a read yields
ARROW_ROWS = 8192


def _index(name: str) -> int:
    head, sep, tail = name.rpartition("-partition-")
    return int(tail) if sep and tail.isdigit() else 0


def _parse(position: str) -> tuple[int, int, int]:
    ledger, entry, batch = (int(x) for x in position.split(":"))
    return ledger, entry, batch


class _Range(InputPartition):
    """One partition's messages after ``start`` (exclusive; EARLIEST: from the first) up to ``end`` (inclusive)."""

    def __init__(self, name: str, index: int, start: str, end: str) -> None:
        self.name, self.index, self.start, self.end = name, index, start, end


class PulsarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream reader (see the module docstring for its offsets). With ``Trigger.AvailableNow`` it reads up to
    each partition's last message when the query started, in as many micro-batches as Spark plans."""

    def __init__(self, options: Mapping[str, Any], schema: StructType | None = None) -> None:
        self.options = _Options(options)
        self.schema = schema
        most = options.get("maxEntriesPerTrigger")  # Spark's options: case-insensitive
        if most is not None and (not str(most).isdigit() or int(most) < 1):
            raise InvalidArgumentError(f'option "maxEntriesPerTrigger" must be a positive int, not {most!r}')
        self.max_entries = int(most) if most is not None else None
        self._available: dict[str, Any] | None = None  # Trigger.AvailableNow: the offsets when it started

    def prepareForTriggerAvailableNow(self) -> None:
        self._available = {"topic": self.options.topic,
                           "partitions": self._positions(partition_names(self.options))}

    def _positions(self, names: list[str]) -> dict[str, str]:
        return {str(_index(name)): last_message_id(self.options, name) for name in names}

    def initialOffset(self) -> dict[str, Any]:
        names = partition_names(self.options)
        if self.options.starting == "earliest":
            return {"topic": self.options.topic, "partitions": {str(_index(n)): EARLIEST for n in names}}
        return {"topic": self.options.topic, "partitions": self._positions(names)}

    def getDefaultReadLimit(self) -> ReadLimit:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadMaxRows(self.max_entries) if self.max_entries else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit | None = None) -> dict[str, Any]:
        """Every partition's last message id now (with ``Trigger.AvailableNow``: when the query started), or under a
        read limit (``maxEntriesPerTrigger``), as many whole entries after ``start`` as its share allows."""
        if self._available is not None:
            end = self._available
        else:
            end = {"topic": self.options.topic, "partitions": self._positions(partition_names(self.options))}
        most = getattr(limit, "max_rows", None)
        if not most:
            return end
        starts = start.get("partitions", {})
        behind = [index for index, last in end["partitions"].items()
                  if last != starts.get(index, EARLIEST) and _parse(last)[1] >= 0]
        if not behind:
            return end
        share = max(1, most // len(behind))
        names = {str(_index(n)): n for n in partition_names(self.options)}
        limited = dict(end["partitions"])
        for index in behind:
            if index in names:
                limited[index] = _advance(ledgers(self.options, names[index]), starts.get(index, EARLIEST),
                                          end["partitions"][index], share)
        return {"topic": self.options.topic, "partitions": limited}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        if start.get("topic") != self.options.topic:
            raise InvalidArgumentError(f"this query's checkpoint read Pulsar topic {start.get('topic')!r}, not "
                                       f"{self.options.topic!r}: a checkpoint resumes only with its own topic")
        names = {str(_index(n)): n for n in partition_names(self.options)}
        ranges: list[InputPartition] = []
        for index, last in sorted(end["partitions"].items(), key=lambda kv: int(kv[0])):
            first = start["partitions"].get(index, EARLIEST)
            if first != last and index in names and _parse(last)[1] >= 0:  # entry -1: the partition has none
                ranges.append(_Range(names[index], int(index), first, last))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The range's messages as Arrow record batches of up to :data:`ARROW_ROWS` rows (not one Python tuple
        per row: PySpark would convert each)."""
        assert isinstance(partition, _Range)  # what partitions() makes
        if self.schema is None:
            raise InvalidArgumentError("statekeep-pulsar: a reader reads with the schema Spark gave its data source")
        return _read_range(self.options, partition, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: nothing is acknowledged, the topic's retention decides what it keeps."""


def _advance(found: list[tuple[int, int]], start: str, last: str, most: int) -> str:
    """The end of a read of at most ``most`` entries after ``start`` (a whole entry: ``LEDGER:ENTRY:-1``) on a
    partition of ledgers ``found`` ((id, entries), oldest first), or ``last`` if that comes first. ``start``'s own
    entry was read whole (an end is a partition's last message, or a whole entry)."""
    after = (-1, -1) if start == EARLIEST else _parse(start)[:2]
    left = most
    for ledger, entries in found:
        if ledger < after[0]:
            continue
        first = after[1] + 1 if ledger == after[0] else 0
        if entries - first >= left:
            end = (ledger, first + left - 1)
            return last if end >= _parse(last)[:2] else f"{end[0]}:{end[1]}:-1"
        left -= max(0, entries - first)
    return last


def _after(position: tuple[int, int, int], start: tuple[int, int, int]) -> bool:
    """Whether ``position`` comes after ``start`` (batch index -1: after its whole entry)."""
    if start[2] < 0:
        return position[:2] > start[:2]
    return position > start


def _within(position: tuple[int, int, int], end: tuple[int, int, int]) -> bool:
    ledger, entry, batch = position
    if (ledger, entry) != end[:2]:
        return (ledger, entry) < end[:2]
    return end[2] < 0 or batch <= end[2]


def _read_range(options: _Options, part: _Range, schema: StructType) -> Iterator[Any]:
    """The range's messages as Arrow record batches of ``schema`` (:data:`SCHEMA`), column by column."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    pulsar = _client_module()
    arrow = to_arrow_schema(schema, timezone="UTC")
    end = _parse(part.end)
    # this process's client (a reused Python worker's next read finds it connected): only the reader is per range
    client = shared_client(options)
    reader = None
    try:
        after = None if part.start == EARLIEST else _parse(part.start)
        if after is None:
            start = pulsar.MessageId.earliest
        else:
            start = pulsar.MessageId(part.index if "-partition-" in part.name else -1, *after)
        # a deep queue: with the default 1,000 a reader read half as fast here
        reader = client.create_reader(part.name, start, start_message_id_inclusive=part.start == EARLIEST,
                                      receiver_queue_size=10_000)
        # the client's own reader, whose messages are the C++ client's: pulsar.Reader wraps each message in a
        # Python object whose every method is one more call (a fifth of a read's CPU here); same methods
        read_next = getattr(reader, "_reader", reader).read_next
        timeout_ms = int(options.timeout * 1000)
        done = False
        while not done:  # to the end's exact id: a Reader's has_message_available can say no before the end is read
            keys: list[Any] = []
            values: list[bytes] = []
            stamps: list[Any] = []
            headers: list[Any] = []
            ids: list[bytes] = []
            events: list[Any] = []
            while len(values) < ARROW_ROWS:
                try:
                    message = read_next(timeout_ms)
                except pulsar.Timeout:
                    raise StoreUnavailableError(
                        f"Pulsar topic {part.name}: the messages up to {part.end} were not readable within "
                        f"{options.timeout:g} s (deleted by the namespace's retention, or the broker is away)"
                    ) from None
                ident = message.message_id()
                position = (ident.ledger_id(), ident.entry_id(), ident.batch_index())
                if after is not None and not _after(position, after):
                    continue  # a whole entry's start (a read limit's end): the reader may give that entry again
                if not _within(position, end):
                    done = True
                    break
                key = message.partition_key()
                keys.append(key.encode("utf-8") if key else None)
                values.append(message.data())
                stamps.append(_micros(message.publish_timestamp()))
                properties = message.properties()
                headers.append([{"key": k, "value": v.encode("utf-8")} for k, v in sorted(properties.items())]
                               if properties else [])
                ids.append(ident.serialize())
                events.append(_micros(message.event_timestamp()))
                if position == end:
                    done = True
                    break
            if values:
                rows = len(values)
                columns = [keys, values, [options.topic] * rows, [part.index] * rows, [None] * rows, stamps,
                           headers, ids, events]
                yield pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in zip(columns, arrow)],
                                                 schema=arrow)
    except pulsar.ConnectError as e:
        forget_client(options)
        raise StoreUnavailableError(f"Pulsar at {options.service_url} did not answer within {options.timeout:g} s "
                                    f"reading {part.name} ({type(e).__name__})") from None
    finally:
        if reader is not None:
            reader.close()


def _micros(ms: int) -> int | None:
    return ms * 1000 if ms > 0 else None


class StatekeepPulsarSource(DataSource):
    """``spark.readStream`` / ``writeStream`` ``.format("statekeep-pulsar")``: this module's reader, and the
    effectively-once writer of :mod:`statekeep.functions.driver.pulsar_sink`."""

    @classmethod
    def name(cls) -> str:
        return "statekeep-pulsar"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> PulsarStreamReader:
        return PulsarStreamReader(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        """The effectively-once sink (:mod:`statekeep.functions.driver.pulsar_sink`)."""
        from statekeep.functions.driver.pulsar_sink import PulsarStreamWriter

        return PulsarStreamWriter(self.options, schema)
