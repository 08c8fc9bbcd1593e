"""``spark.readStream.format("statekeep-pulsar")``: a Pulsar topic on a real broker as a Spark stream (PySpark's
Python data source API, ``DataSourceStreamReader``).

Options: ``serviceUrl`` (``pulsar://HOST:PORT``, the binary protocol the executors read with), ``adminUrl``
(``http://HOST:PORT``, the broker's admin REST API, asked for each partition's last message id, as StreamNative's
connector's ``admin.url`` is), ``topic`` (``persistent://TENANT/NAMESPACE/TOPIC``, partitioned or not: the full
name, never guessed from a short one), ``startingOffsets`` (``earliest`` or ``latest``, as Kafka's source; default
``latest``), ``timeoutSeconds`` (default 30: how long a broker may take to answer before the query fails).

Columns, the Kafka source's and then Pulsar's own: ``key binary`` (the message key's UTF-8 bytes; null without
one), ``value binary``, ``topic string`` (the topic as named, not its partition's name), ``partition int`` (the
partition's index, 0 for a non-partitioned topic), ``offset long`` (null: Pulsar has message ids, not offsets),
``timestamp timestamp`` (publish time), ``headers array<struct<key:string,value:binary>>`` (the message's
properties, values UTF-8, sorted by key), ``messageId binary`` (the client's serialized ``MessageId``:
``pulsar.MessageId.deserialize`` reads it), ``eventTime timestamp`` (null when the producer set none).

Offsets are message ids per partition, kept in the query's checkpoint: ``{"topic": NAME, "partitions": {"INDEX":
"LEDGER:ENTRY:BATCH"}}``, each the last message id a micro-batch includes (``earliest`` before any). A micro-batch
reads, per partition, the messages after its start and up to and including its end (the admin API's last message
id is exact, batch index included), with a ``Reader`` from the start's message id, so a micro-batch replayed from
the checkpoint reads the same messages (as long as the topic's retention keeps them; messages up to the end not
readable within ``timeoutSeconds`` fail the batch, StoreUnavailableError, rather than end it short). A partition added
to a partitioned topic is read from its earliest message. Nothing is acknowledged and no subscription is made: the
topic keeps what the namespace's retention keeps.

Errors are one line: an unknown topic or namespace is a :class:`NotFoundError`, a broker that does not answer
within ``timeoutSeconds`` a :class:`StoreUnavailableError`, a bad option an :class:`InvalidArgumentError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, MissingDependencyError, StoreUnavailableError
from statekeep.functions.messaging.pulsarclient import PulsarOptions as _Options
from statekeep.functions.messaging.pulsarclient import client_module as _client_module
from statekeep.functions.messaging.pulsarclient import last_message_id, partition_names

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

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit | None = None) -> dict[str, Any]:
        """Every partition's last message id now (all that is available: no read limit); with
        ``Trigger.AvailableNow``, when the query started."""
        if self._available is not None:
            return self._available
        return {"topic": self.options.topic, "partitions": self._positions(partition_names(self.options))}

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
        return _record_batches(_read_range(self.options, partition), self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: nothing is acknowledged, the topic's retention decides what it keeps."""


def _within(position: tuple[int, int, int], end: tuple[int, int, int]) -> bool:
    ledger, entry, batch = position
    if (ledger, entry) != end[:2]:
        return (ledger, entry) < end[:2]
    return end[2] < 0 or batch <= end[2]


def _read_range(options: _Options, part: _Range) -> Iterator[tuple[Any, ...]]:
    pulsar = _client_module()
    end = _parse(part.end)
    client = options.client()
    try:
        if part.start == EARLIEST:
            start = pulsar.MessageId.earliest
        else:
            ledger, entry, batch = _parse(part.start)
            start = pulsar.MessageId(part.index if "-partition-" in part.name else -1, ledger, entry, batch)
        # a deep queue: with the default 1,000 a reader read half as fast here
        reader = client.create_reader(part.name, start, start_message_id_inclusive=part.start == EARLIEST,
                                      receiver_queue_size=10_000)
        timeout_ms = int(options.timeout * 1000)
        while True:  # to the end's exact id: a Reader's has_message_available can say no before the end is read
            try:
                message = reader.read_next(timeout_ms)
            except pulsar.Timeout:
                raise StoreUnavailableError(
                    f"Pulsar topic {part.name}: the messages up to {part.end} were not readable within "
                    f"{options.timeout:g} s (deleted by the namespace's retention, or the broker is away)") from None
            ident = message.message_id()
            position = (ident.ledger_id(), ident.entry_id(), ident.batch_index())
            if not _within(position, end):
                break
            yield _row(options.topic, part.index, message, ident)
            if position == end:
                break
    except pulsar.ConnectError as e:
        raise StoreUnavailableError(f"Pulsar at {options.service_url} did not answer within {options.timeout:g} s "
                                    f"reading {part.name} ({type(e).__name__})") from None
    finally:
        client.close()


def _micros(ms: int) -> int | None:
    return ms * 1000 if ms > 0 else None


def _row(topic: str, index: int, message: Any, ident: Any) -> tuple[Any, ...]:
    """A message's columns (timestamps in microseconds since the epoch, UTC)."""
    key = message.partition_key()
    headers = [{"key": k, "value": v.encode("utf-8")} for k, v in sorted(message.properties().items())]
    return (key.encode("utf-8") if key else None, message.data(), topic, index, None,
            _micros(message.publish_timestamp()), headers, ident.serialize(), _micros(message.event_timestamp()))


def _record_batches(rows: Iterator[tuple[Any, ...]], schema: StructType | None) -> Iterator[Any]:
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    if schema is None:
        raise InvalidArgumentError("statekeep-pulsar: a reader reads with the schema Spark gave its data source")
    arrow = to_arrow_schema(schema, timezone="UTC")
    while True:
        chunk = list(itertools.islice(rows, ARROW_ROWS))
        if not chunk:
            return
        columns = list(zip(*chunk))
        yield pa.RecordBatch.from_arrays([pa.array(list(values), type=field.type)
                                          for values, field in zip(columns, arrow)], schema=arrow)


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
