"""``df.writeStream.format("statekeep-pulsar")``: effectively-once into a Pulsar topic, the way Pulsar users get it
(broker deduplication), from any streaming query whose replayed micro-batch gives each Spark partition the rows it
gave the first time (as :func:`statekeep.spark.apply_function`'s output, or a replayable source such as
``statekeep-pulsar`` read without a shuffle). ::

    (df.writeStream.format("statekeep-pulsar").option("serviceUrl", "pulsar://HOST:6650")
        .option("adminUrl", "http://HOST:8080").option("topic", "persistent://public/default/out")
        .option("checkpointLocation", ...).start())

Each task writes its partition's rows of a micro-batch with a producer of a stable name, the query's id (kept in
its checkpoint: the same after a restart) and the Spark partition, ``statekeep-QUERY-PARTITION`` unless option
``producerNamePrefix`` names another prefix, and gives the row at ``position`` of micro-batch ``batch`` the sequence
id ``batch * 2**24 + position + 1``. The broker drops a message whose sequence id is not above the last one it
stored from that producer name, so a replayed micro-batch's rows, or a task's retry, are not delivered twice; the
task sends them batched in chunks fixed by the rows alone and skips on its side the chunks whose first sequence id
the broker already has (``last_sequence_id``): see :func:`statekeep.functions.messaging.pulsarclient.send`. On a
partitioned topic, Spark partition P writes to Pulsar partition P mod N (as Flink's fixed partitioner does): a
sequence id is then checked by the one partition that has every earlier one of its producer, where a key-hashing
router would spread a producer's sequence over partitions whose own last ids differ. A second writer of the same
name while the first is connected is refused by the broker (the task fails and Spark retries it). One task may
write at most 2**24 - 1 rows of a micro-batch (InvalidArgumentError beyond).

It refuses to start on a topic without deduplication (topic, namespace or broker setting), with a one-line
InvalidArgumentError saying how to enable it, rather than deliver twice; an unknown topic is a NotFoundError.

Rows: ``value`` (binary or string, required), ``key`` (string or binary: the message key, as UTF-8),
``headers`` (``array<struct<key string, value binary>>``: the message's properties, values UTF-8), ``eventTime``
(timestamp: the message's event time), the columns the ``statekeep-pulsar`` source gives; others are ignored.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, MissingDependencyError
from statekeep.functions.messaging.pulsarclient import PulsarOptions as _Options
from statekeep.functions.messaging.pulsarclient import check_deduplication, send

try:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
except ImportError as e:
    raise MissingDependencyError(f"the statekeep-pulsar sink needs PySpark: pip install 'statekeep[spark]' ({e})"
                                 ) from e

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)


def _message(row: Any) -> dict[str, Any]:
    fields = row if isinstance(row, dict) else row.asDict()
    value = fields.get("value")
    if value is None:
        raise InvalidArgumentError("statekeep-pulsar: a row has no value (null)")
    message: dict[str, Any] = {"content": value.encode("utf-8") if isinstance(value, str) else bytes(value)}
    if fields.get("key") is not None:
        message["partition_key"] = _text(fields["key"])
    if fields.get("headers"):
        message["properties"] = {str(h["key"]): _text(h["value"]) for h in fields["headers"]}
    event = fields.get("eventTime")
    if isinstance(event, datetime):
        stamp = event if event.tzinfo is not None else event.astimezone()  # a Row's: naive, local time
        message["event_timestamp"] = int(stamp.astimezone(timezone.utc).timestamp() * 1000)
    return message


class PulsarStreamWriter(DataSourceStreamArrowWriter):
    """The stream writer (see the module docstring); it takes the rows as Arrow record batches."""

    def __init__(self, options: Mapping[str, Any], schema: StructType) -> None:
        self.producer_prefix = options.get("producerNamePrefix")  # Spark's options: case-insensitive
        self.options = _Options(options)
        names = {f.name: f.dataType.typeName() for f in schema.fields}
        if names.get("value") not in ("string", "binary"):
            raise InvalidArgumentError(f"statekeep-pulsar: the rows need a value column of string or binary, not "
                                       f"{names}")
        check_deduplication(self.options)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        from pyspark import TaskContext

        from statekeep.functions.executor.task import SPARK_BATCH_ID, SPARK_QUERY_ID

        task = TaskContext.get()
        assert task is not None  # Spark calls write inside a task
        batch = task.getLocalProperty(SPARK_BATCH_ID)
        if batch is None:
            raise InvalidArgumentError("statekeep-pulsar: a streaming write's task has no micro-batch id from Spark")
        prefix = self.producer_prefix or f"statekeep-{task.getLocalProperty(SPARK_QUERY_ID)}"
        rows = (_message(row) for record_batch in iterator for row in record_batch.to_pylist())
        send(self.options, f"{prefix}-{task.partitionId()}", int(batch), rows, task.partitionId())
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing more: each task's messages are stored (or were already)."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: what was stored stays, and a replay's resends are dropped by the broker."""
