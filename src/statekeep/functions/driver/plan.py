"""A function in a query's plan: the one shape of every statekeep query, the runner's and the DataFrame operator's.

:func:`function_plan` takes a DataFrame of a function's records (the runner's ``__record``, ``__key`` and
``__topic`` columns, or the operator's own columns and ``__key``) and gives the DataFrame that runs the function
on them: records routed to their partitions (by key, or by key group for partition-owned or timed state: a
layout decided once, when the query starts), then one ``mapInArrow`` task per partition and micro-batch
(:func:`statekeep.functions.executor.task.arrow_partition_runner`), which takes its micro-batch's id from
Spark and its function's watermark from the committed state. No ``foreachBatch``: a micro-batch is the query's
own plan, whatever sink the query writes to.

What the driver learns of each micro-batch comes through an accumulator (:class:`StatsParam`), which each task
adds its stats row to, and a ``StreamingQueryListener`` (:class:`StatusListener`), which hands the function's
totals to a callback after each micro-batch of its query and at the query's end.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekeep.errors import MissingDependencyError

try:  # the plan of a function's query: Spark itself
    from pyspark.accumulators import AccumulatorParam
    from pyspark.sql.streaming.listener import StreamingQueryListener
except ImportError as e:
    raise MissingDependencyError(f"running functions needs PySpark: pip install 'statekeep[spark]' ({e})") from e
from statekeep.functions.config.spec import ExecutorSpec, Layout
from statekeep.functions.driver.stats import add_batch
from statekeep.functions.executor.task import arrow_partition_runner
from statekeep.functions.windowing.timerun import routing
from statekeep.state.keygroups import spark_routes

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

log = logging.getLogger(__name__)


def route_column(groups: int, parallelism: int) -> Column:
    """The column ``repartition(parallelism, column)`` sends each record to the partition owning its key's
    group by (see :mod:`statekeep.state.keygroups`; a record without a key goes to 0)."""
    from pyspark.sql import functions as F

    routes = spark_routes(parallelism)
    # keygroups.key_group as a Spark expression (a record's key is a user key, never an internal one)
    group = F.pmod(F.crc32(F.col("__key").cast("binary")), F.lit(groups))
    owner = F.floor(group * parallelism / groups).cast("int")
    route = F.element_at(F.array(*[F.lit(v) for v in routes]), owner + 1)
    return F.coalesce(route, F.lit(routes[0]))


def function_plan(frame: DataFrame, spec: ExecutorSpec, parallelism: int, *, schema: Any,
                  report: Callable[[dict[str, Any]], None] | None = None,
                  keyed: bool = False) -> tuple[DataFrame, Layout]:
    """``frame`` (with a ``__key`` column) through the function of ``spec``, whose parallelism is ``parallelism``:
    ``(the DataFrame of what its tasks give, in ``schema``, the layout they run in)``. Its partitions are
    :func:`~statekeep.functions.windowing.timerun.routing`'s (the one partition rule): with partition-owned state
    (its layout created, or rescaled, here) or time state, records go to the partition owning their key's group;
    else by key, and where ``frame``'s partitions are ``keyed`` already (each key's records in one partition, in
    order: Kafka topics' partitions, whose producers partition by key), they stay where they are, merged into
    ``parallelism`` tasks without a shuffle, as Kafka Streams' tasks follow their topics' partitions.
    ``report`` takes each task's stats row."""
    groups, partitions = routing(spec, spec.state_store(), parallelism)
    by, layout = "__key", Layout()
    if groups is not None:  # each record to the partition owning its key's group
        layout = Layout(groups, partitions)
        frame, by = frame.withColumn("__route", route_column(groups, partitions)), "__route"
    # one key's records to one partition by Spark's hash partitioning: a shuffle of the input read once (a union of
    # filtered copies would make each copy a source of its own in a streaming query)
    if partitions == 1 or (keyed and groups is None):
        frame = frame.coalesce(partitions)
    else:
        frame = frame.repartition(partitions, by)
    return frame.mapInArrow(arrow_partition_runner(spec, report, layout), schema), layout


class StatsParam(AccumulatorParam[dict[str, Any]]):
    """The accumulator of a function query's stats: a task adds its run's stats row (``executor.task.STATS_SCHEMA``
    with ``query`` and ``batch``); the driver sums them in the shape of its status
    (:mod:`statekeep.functions.driver.stats`): ``queries`` seen, ``processed``, ``skipped``, ``outputs``,
    ``instances``, ``batches`` (how many ran), ``last_batch`` and ``last`` (the newest one's rows)."""

    def zero(self, value: Any) -> dict[str, Any]:
        return {"rows": [], "queries": [], "processed": 0, "skipped": 0, "outputs": 0, "instances": {},
                "batches": 0, "last_batch": None, "last": []}

    def addInPlace(self, value: dict[str, Any], term: dict[str, Any]) -> dict[str, Any]:
        if "partition" in term:  # a task's run
            value["rows"].append(term)
            return value
        rows = term["rows"]  # a task's whole value, merged on the driver
        add_batch(value["instances"], rows)
        for name in ("processed", "skipped", "outputs"):
            value[name] += sum(int(row[name] or 0) for row in rows)
        value["queries"] = sorted({*value["queries"], *(row["query"] for row in rows if row.get("query"))})
        for row in rows:  # micro-batches run one after another: a task's batch is the newest, or a new one
            batch, newest = row["batch"], value["last_batch"]
            if newest is None or batch > newest:
                value["batches"] += 1
                value["last_batch"], value["last"] = batch, []
            if batch == value["last_batch"]:
                value["last"].append(row)
        return value


def new_stats(spark: Any) -> Any:
    """A new stats accumulator (:class:`StatsParam`) in ``spark``'s context."""
    return spark.sparkContext.accumulator(StatsParam().zero(None), StatsParam())


class StatusListener(StreamingQueryListener):
    """Follows the streaming query whose tasks add to ``stats`` (their rows name it; :attr:`query` may also be set
    at its start): after each of its micro-batches ``on_progress(batch id)``, at its end ``on_end(error or None)``,
    after which it removes itself from ``streams`` (the session's ``spark.streams``), so that a session running
    query after query does not collect listeners, each called at every event of every query. A callback that
    raises is logged, never raised into Spark's listener bus."""

    def __init__(self, stats: Any, on_progress: Callable[[int], None], on_end: Callable[[str | None], None],
                 streams: Any) -> None:
        self.stats, self.on_progress, self.on_end, self.streams = stats, on_progress, on_end, streams
        self.query: str | None = None

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        try:
            callback(*args)
        except Exception:  # noqa: BLE001 - Spark's listener bus must go on
            log.exception("statekeep: a function query's listener failed")

    def _ours(self, query: str) -> bool:
        if self.query is None and query in self.stats.value["queries"]:
            self.query = query
        return query == self.query

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        if self._ours(str(event.progress.id)):
            self._call(self.on_progress, event.progress.batchId)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        if self._ours(str(event.id)):
            self._call(self.on_end, event.exception)
            # not from the listener bus's own call: Spark removes it once this call returns
            threading.Thread(target=self._call, args=(self.streams.removeListener, self), daemon=True).start()
