"""The Spark task's side of a function's query: :func:`arrow_partition_runner`, the ``mapInArrow`` function of
its plan (:mod:`statekeep.functions.driver.plan`), which takes a partition's Arrow batches of one micro-batch to
:func:`statekeep.functions.executor.runtime.run_partition` and gives back its stats row (:data:`STATS_SCHEMA`) or the
operator's rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.loader import BATCH
from statekeep.functions.config.spec import ExecutorSpec, Layout
from statekeep.functions.executor.collector import young_generation_only
from statekeep.functions.executor.path import PartitionStats, _cached_process
from statekeep.functions.messaging.columns import MessageColumns
from statekeep.functions.executor.runtime import run_partition
from statekeep.functions.messaging.sink import claim
from statekeep.functions.windowing import timerun
from statekeep.lru import cached

# per (batch, partition): counts, the time spent in the function (s), user metrics and latest
# exceptions as JSON; the driver sums them into the function's stats (statekeep.functions.driver.stats)
STATS_SCHEMA = ("partition long, processed long, skipped long, outputs long, applied boolean, error string, "
                "received long, user_exceptions long, dead_letters long, latency double, metrics string, "
                "exceptions string, watermark long, next_event long, next_processing long")
#: STATS_SCHEMA as (column, type name) pairs: the one parse of it, for the Arrow row and Spark's StructType
STATS_COLUMNS = tuple(tuple(column.split()) for column in STATS_SCHEMA.split(", "))


#: the Spark local properties a streaming query's tasks get: the micro-batch's id, and the query's id (kept in its
#: checkpoint: the same after a restart)
SPARK_BATCH_ID, SPARK_QUERY_ID = "streaming.sql.batchId", "sql.streaming.queryId"


def arrow_partition_runner(spec: ExecutorSpec, report: Callable[[dict[str, Any]], None] | None = None,
                           layout: Layout = Layout()) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function of a function's query (see :mod:`statekeep.functions.driver.plan`): one
    partition's record batches of one micro-batch in; out, the runner's stats row of the run, or the DataFrame
    operator's output rows (``spec.rows_schema``). A task takes its micro-batch's id from Spark (a batch
    DataFrame's: ``spec.run_id``), and a function keeping time its watermark before the batch from the committed
    state. ``report`` (an accumulator's ``add``) takes each run's stats row with its query's id (``query``) and
    batch (``batch``); ``layout``: the query's (:func:`~statekeep.functions.driver.plan.function_plan`'s)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None  # mapInArrow runs this inside a Spark task
        batch_id = task_batch(spec, task)
        batch_layout = layout if spec.time is None else Layout(  # its watermark, as the committed state holds it
            layout.groups, layout.partitions, timerun.stored_watermark(spec.state_store(), batch_id))
        with young_generation_only():  # also while the batch is decoded (see collector)
            stats = _run_arrow(spec, batch_layout, batch_id, task.partitionId(), batches)
        if report is not None:
            report({**_stats_row(stats), "query": task.getLocalProperty(SPARK_QUERY_ID), "batch": batch_id})
        if spec.rows_schema is None:
            yield _stats_batch(stats)
        elif stats.rows is not None:
            yield from stats.rows.to_batches()

    return run


def task_batch(spec: ExecutorSpec, task: Any) -> int:
    """The batch id of a function's task: its batch DataFrame's run (``spec.run_id``) or Spark's micro-batch id.
    An operator's streaming query's first task in a process checks that the function's state belongs to this
    query (:func:`statekeep.functions.messaging.sink.claim`): a query with another checkpoint would number its
    micro-batches from 0 again, and find them applied (the runner keeps a checkpoint per function incarnation)."""
    if spec.run_id is not None:
        return spec.run_id
    batch, query = task.getLocalProperty(SPARK_BATCH_ID), task.getLocalProperty(SPARK_QUERY_ID)
    if batch is None or query is None:
        raise InvalidArgumentError(f"{spec.fqfn}: a streaming function's task has no micro-batch id from Spark")
    if spec.rows_schema is not None:
        assert spec.output is not None  # the operator's kept rows (see statekeep.spark.operator)
        claim(spec.output, query, spec.fqfn)
    return int(batch)


def _run_arrow(spec: ExecutorSpec, layout: Layout, batch_id: int, partition: int, batches: Iterable[Any]
               ) -> PartitionStats:
    """:func:`run_partition` of one partition's record batches (columns ``__record``, ``__key``, and
    ``__topic`` where the spec asks for it)."""
    import pyarrow as pa

    if spec.format.rows:
        return _run_rows(spec, layout, batch_id, partition, list(batches))
    if spec.format.message:
        return _run_messages(spec, layout, batch_id, partition, list(batches))
    if _cached_process(spec)[1] == BATCH:  # the records stay in Arrow
        columns = [batch.column("__record") for batch in batches]
        records = pa.chunked_array(columns, pa.string()) if columns else pa.array([], pa.string())
        return run_partition(spec, batch_id, partition, records, layout=layout)
    values: list[Any] = []
    record_keys: list[Any] = []
    topics: list[Any] | None = [] if spec.topic_column else None
    for batch in batches:
        values.extend(batch.column("__record").to_pylist())
        record_keys.extend(batch.column("__key").to_pylist())
        if topics is not None:
            topics.extend(batch.column("__topic").to_pylist())
    keys = set(record_keys)
    keys.discard(None)
    return run_partition(spec, batch_id, partition, values, keys, record_keys=record_keys, topics=topics,
                         layout=layout)


def _run_messages(spec: ExecutorSpec, layout: Layout, batch_id: int, partition: int, batches: list[Any]
                  ) -> PartitionStats:
    """:func:`run_partition` of one partition's messages: the message columns of
    :func:`~statekeep.functions.driver.inputs.message_columns` as they came from Spark (``__key``, and
    ``__topic`` where the spec asks for it, beside them)."""
    import pyarrow as pa

    if not batches:
        return run_partition(spec, batch_id, partition, MessageColumns([]), layout=layout)
    table = pa.Table.from_batches(batches)
    messages = MessageColumns.from_arrow(table)
    if _cached_process(spec)[1] == BATCH:
        return run_partition(spec, batch_id, partition, messages, layout=layout)
    record_keys = table.column("__key").to_pylist()
    topics = table.column("__topic").to_pylist() if spec.topic_column else None
    return run_partition(spec, batch_id, partition, messages, record_keys=record_keys, topics=topics, layout=layout)


def _run_rows(spec: ExecutorSpec, layout: Layout, batch_id: int, partition: int, batches: list[Any]) -> PartitionStats:
    """:func:`run_partition` of one partition of a ``rows`` input (the DataFrame operator's, a CSV or Parquet file's):
    its record batches' columns but statekeep's own (``__key``, ``__topic``, ``__route``, ...) are the records, a dict
    per record (``process_batch``: the Table of them)."""
    import pyarrow as pa

    if not batches:
        return run_partition(spec, batch_id, partition, [], layout=layout)
    table = pa.Table.from_batches(batches)
    data = table.drop_columns([name for name in table.column_names if name.startswith("__")])
    if _cached_process(spec)[1] == BATCH:
        return run_partition(spec, batch_id, partition, data, layout=layout)
    record_keys = table.column("__key").to_pylist()
    topics = table.column("__topic").to_pylist() if spec.topic_column else None
    keys = set(record_keys)
    keys.discard(None)
    return run_partition(spec, batch_id, partition, data.to_pylist(), keys, record_keys=record_keys, topics=topics,
                         layout=layout)


def _stats_row(stats: PartitionStats) -> dict[str, Any]:
    """The stats row of STATS_SCHEMA as a dict: the PartitionStats field of each column; errors, metrics and
    exceptions as text."""
    row = {name: getattr(stats, name, None) for name, _ in STATS_COLUMNS}
    row.update(error="\n".join(stats.errors) or None, metrics=json.dumps(stats.metrics) if stats.metrics else None,
               exceptions=json.dumps(stats.exceptions) if stats.exceptions else None)
    return row


def _stats_batch(stats: PartitionStats) -> Any:
    """The stats row of STATS_SCHEMA: the PartitionStats field of each column; errors, metrics and
    exceptions as text. Made by Arrow's JSON reader: ``pa.array`` of Python values imports pandas (0.3 s
    on each new Python worker, which a per-record function otherwise never needs)."""
    import pyarrow as pa
    import pyarrow.json as pj

    row = _stats_row(stats)
    options = pj.ParseOptions(explicit_schema=_stats_schema(), unexpected_field_behavior="error")
    table = pj.read_json(pa.BufferReader(json.dumps(row).encode()), parse_options=options,
                         read_options=pj.ReadOptions(use_threads=False))
    return table.to_batches()[0]


@cached(None)
def _stats_schema() -> Any:
    import pyarrow as pa

    types = {"long": pa.int64(), "boolean": pa.bool_(), "string": pa.string(), "double": pa.float64()}
    return pa.schema([(name, types[kind]) for name, kind in STATS_COLUMNS])
