"""``df.writeStream.format("statekeep-kafka")``: exactly-once into Kafka from any streaming query whose replayed
micro-batch gives each partition the rows it gave the first time, as :func:`statekeep.spark.apply_function`'s
output does (its rows are kept with its state commit). Spark's own Kafka sink is at-least-once: a replayed
micro-batch writes its rows again. ::

    out = apply_function(events, count, name="public/default/counts", key="key")
    (out.writeStream.format("statekeep-kafka").option("kafka.bootstrap.servers", "host:9092")
        .option("topic", "counts").option("checkpointLocation", ...).start())

Each task writes its partition's rows of a micro-batch as one Kafka transaction with the record "this partition of
this batch was delivered" (:class:`statekeep.functions.messaging.kafka.KafkaDelivery`). Its ``transactional.id`` is
the query's id (kept in its checkpoint: the same after a restart) and the partition, unless option
``transactionalIdPrefix`` names another prefix. A replayed (batch, partition) fences the earlier writer of the id and
writes only if Kafka does not have that batch yet. So a ``read_committed`` consumer sees each row once.

Rows: ``value`` (string or binary, required), ``key`` (string or binary, optional), ``topic`` (string; else option
``topic``), ``headers`` (``array<struct<key string, value binary>>``, optional), ``timestamp`` (timestamp or long
ms, optional). A batch DataFrame (``df.write``) is written one transaction per task, without the replay check (a
job Spark runs again writes again).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, MissingDependencyError

try:
    from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                        WriterCommitMessage)
except ImportError as e:
    raise MissingDependencyError(f"the statekeep-kafka sink needs PySpark: pip install 'statekeep[spark]' ({e})") from e

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

SINK = "statekeep-kafka"


def _options(options: Mapping[str, Any], schema: StructType) -> tuple[str, str | None]:
    """(bootstrap servers, the default topic) of the sink's options, checked against the rows' ``schema``."""
    bootstrap = options.get("kafka.bootstrap.servers")
    if not bootstrap:
        raise InvalidArgumentError(f'{SINK}: option "kafka.bootstrap.servers" must name the Kafka cluster')
    names = {f.name: f.dataType.typeName() for f in schema.fields}
    if names.get("value") not in ("string", "binary"):
        raise InvalidArgumentError(f"{SINK}: the rows need a value column of string or binary, not {names}")
    topic = options.get("topic")
    if not topic and "topic" not in names:
        raise InvalidArgumentError(f'{SINK}: option "topic", or a topic column, must name the topic')
    return str(bootstrap), topic


def _table(batches: Iterator[Any], topic: str | None) -> Any:
    """The rows' record batches as the table :class:`~statekeep.functions.messaging.kafka.KafkaDelivery` writes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from statekeep.functions.messaging.kafka import COLUMNS
    from statekeep.functions.messaging.kafkarecords import binary_column, longs

    given = list(batches)
    if not given:
        return None
    rows = pa.Table.from_batches(given)
    n = len(rows)

    def binary(name: str) -> Any:
        if name not in rows.column_names:
            return pa.nulls(n, pa.binary())
        return rows[name].cast(pa.binary())

    # no Python value converted into Arrow (kafkarecords.binary_column: that imports pandas in each new worker)
    default = binary_column([topic.encode("utf-8")] * n, pa.string()) if topic else None
    topics = rows["topic"].cast(pa.string()) if "topic" in rows.column_names else default
    assert topics is not None  # _options: a topic column or option
    if default is not None and topics is not default:
        topics = pc.coalesce(topics, default)
    if topics.null_count:
        raise InvalidArgumentError(f"{SINK}: a row has no topic (null topic column, no topic option)")
    stamp = longs([0] * n)
    if "timestamp" in rows.column_names:
        column = rows["timestamp"]
        ms = column.cast(pa.timestamp("ms")).cast(pa.int64()) if pa.types.is_timestamp(column.type) else column
        stamp = pc.coalesce(ms.cast(pa.int64()), stamp)
    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    headers = rows["headers"].cast(header) if "headers" in rows.column_names else pa.nulls(n, header)
    return pa.table(dict(zip(COLUMNS, (topics, binary("key"), binary("value"), headers, stamp))))


def _identity(options: Mapping[str, Any], query: str | None, partition: int) -> str:
    prefix = options.get("transactionalIdPrefix") or f"statekeep-query-{query}"
    return f"{prefix}-{partition}"


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.options = dict(options)
        self.bootstrap, self.topic = _options(self.options, schema)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from pyspark import TaskContext

        from statekeep.functions.executor.task import SPARK_BATCH_ID, SPARK_QUERY_ID
        from statekeep.functions.messaging.kafka import KafkaDelivery

        task = TaskContext.get()
        assert task is not None  # Spark calls write inside a task
        batch_property = task.getLocalProperty(SPARK_BATCH_ID)
        if batch_property is None:
            raise InvalidArgumentError(f"{SINK}: a streaming write's task has no micro-batch id from Spark")
        batch = int(batch_property)
        delivery = KafkaDelivery(self.bootstrap, _identity(self.options, task.getLocalProperty(SPARK_QUERY_ID),
                                                          task.partitionId()))
        table = _table(iterator, self.topic)
        delivery.deliver(batch, table, replay=not delivery.continues(batch))
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing more: each task committed its own transaction."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a task's transaction either committed, or was aborted (a replay writes it)."""


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.options = dict(options)
        self.bootstrap, self.topic = _options(self.options, schema)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        import uuid

        from statekeep.functions.messaging.kafka import KafkaDelivery

        KafkaDelivery(self.bootstrap, f"statekeep-write-{uuid.uuid4().hex}").deliver(None, _table(iterator, self.topic))
        return WriterCommitMessage()


class StatekeepKafkaSink(DataSource):
    """``format("statekeep-kafka")``: see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return SINK

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        return _StreamWriter(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        return _BatchWriter(self.options, schema)
