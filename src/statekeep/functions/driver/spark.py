"""Functions as Spark Structured Streaming queries: one query per function.

The driver reads the inputs with Spark's own sources (:func:`~statekeep.functions.driver.inputs.input_frame`) and
runs the function on them in the query's own plan, as the DataFrame operator does
(:mod:`statekeep.functions.driver.plan`): each record to a partition by its key,
:func:`statekeep.functions.executor.task.arrow_partition_runner` on every partition (records travel as Arrow
batches, not pickled rows), into Spark's ``noop`` sink. See runtime.py for how state stays exactly-once.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from statekeep import jsonrecords
from statekeep.errors import StatekeepError, StoreClosedError
from statekeep.functions.executor.task import STATS_COLUMNS
from statekeep.functions.config.spec import ExecutorSpec, executor_spec
from statekeep.functions.config.locations import is_broker
from statekeep.functions.driver.inputs import check_brokers, input_frame
from statekeep.functions.driver.session import spark_session
from statekeep.functions.windowing.timerun import (advance_watermark, last_batch_needed, with_clock_source)
from statekeep.retry import OUTAGE
from statekeep.lru import cached

if TYPE_CHECKING:  # PySpark is optional: imported where used
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from statekeep.functions.config.service import FunctionService
    from statekeep.metadata.base import MetadataStore

def _checkpoint_sources(spark: SparkSession, checkpoint: str) -> int | None:
    """How many sources the query whose checkpoint is at ``checkpoint`` had: the lines after the
    version and metadata lines of its latest offsets file (one offset per source), or None if it has
    none yet."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session's gateway
    offsets = jvm.org.apache.hadoop.fs.Path(checkpoint.rstrip("/") + "/offsets")
    fs = offsets.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(offsets):
        return None
    batches = [int(f.getPath().getName()) for f in fs.listStatus(offsets) if f.getPath().getName().isdigit()]
    if not batches:
        return None
    stream = fs.open(jvm.org.apache.hadoop.fs.Path(offsets, str(max(batches))))
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    return len(text.splitlines()) - 2


@cached(None)
def _stats_type() -> Any:
    """``STATS_SCHEMA`` as a StructType, made without Spark: given as a string, ``mapInArrow`` has the JVM
    parse it again every micro-batch (a py4j round trip, about a third of its time in the driver)."""
    from pyspark.sql import types as T

    kinds = {"long": T.LongType(), "boolean": T.BooleanType(), "string": T.StringType(), "double": T.DoubleType()}
    return T.StructType([T.StructField(name, kinds[kind]) for name, kind in STATS_COLUMNS])


class QueryTotals(TypedDict):
    """A query's running totals since it started (``instances``: see statekeep.functions.driver.stats)."""

    processed: int
    skipped: int
    outputs: int
    batches: int
    last_batch: int | None
    instances: dict[str, dict[str, Any]]


class FunctionQuery:
    """One function running as a streaming query, the DataFrame operator's way (:mod:`statekeep.functions.driver.plan`):
    its inputs' DataFrame (:func:`input_frame`) through the function, each task writing the function's outputs with
    the one writer before it commits, into Spark's ``noop`` sink. ``spec`` is the executor-side description (see
    :func:`statekeep.functions.executor.runtime.run_partition`); its ``trigger_interval_ms`` is the query's
    trigger (0: each micro-batch starts as soon as the previous one ends and there is input). Its totals come
    from its tasks' stats rows (an accumulator); after each micro-batch ``on_batch(batch id, its stats rows)``."""

    def __init__(self, spark: SparkSession, spec: ExecutorSpec, inputs: list[str], checkpoint: str, *,
                 parallelism: int = 2, once: bool = False,
                 on_batch: Callable[[int, list[dict[str, Any]]], None] | None = None) -> None:
        self.spark = spark
        self.spec = spec
        self.inputs = inputs
        self.checkpoint = checkpoint
        self.parallelism = parallelism
        self.once = once
        self.on_batch = on_batch
        self.query: StreamingQuery | None = None
        self._time: dict[str, Any] = {}  # the last batch's time, for a --once run's end (windowing.timerun)
        self._clock = False  # whether the query reads the clock source (a function keeping time)
        self._ticked = False  # a --once run's last batch started (await_termination)
        # where save_status() keeps status(): a plain overwrite, safe to repeat (see save_status)
        self.status_saver: Callable[[], None] | None = None
        self._saving = threading.Lock()  # one status write at a time (see save_status)
        self._stats: Any = None  # the accumulator of the tasks' stats rows (plan.StatsParam)
        self._partitions = 1  # the partitions of a function keeping time (set by start)
        self._settle_error: str | None = None  # the Kafka delivery at the query's end failed (_settle)
        self.worker_id: str | None = None  # who runs it (a standalone worker's id, or a localrun's)
        self.totals: QueryTotals = {"processed": 0, "skipped": 0, "outputs": 0, "batches": 0, "last_batch": None,
                       "instances": {}}  # per partition, see statekeep.functions.driver.stats

    def _take_stats(self) -> dict[str, Any] | None:
        """Copy the accumulated stats into :attr:`totals`; the accumulator's value (None before the start)."""
        if self._stats is None:
            return None
        value: dict[str, Any] = self._stats.value
        self.totals.update({"processed": value["processed"], "skipped": value["skipped"], "outputs": value["outputs"],
                            "batches": value["batches"], "last_batch": value["last_batch"],
                            "instances": value["instances"]})
        return value

    def _progress(self, batch_id: int) -> None:
        value = self._take_stats()
        if self.on_batch is not None and value is not None:
            try:
                self.on_batch(batch_id, [row for row in value["last"] if row["batch"] == batch_id])
            except StoreClosedError:
                pass  # a batch's report after the runner stopped and closed its store: nothing to keep

    def start(self, *, tick: bool = False) -> FunctionQuery:
        """Start the query. ``tick``: a ``--once`` run's last micro-batch, with no input (see
        :meth:`await_termination`)."""
        from statekeep.functions.driver.plan import StatusListener, function_plan, new_stats

        spec = self.spec
        check_brokers(self.spark, spec, self.inputs)
        frame = input_frame(self.spark, self.inputs, spec.format, spec.key_field, dict(spec.input_options),
                            store_url=spec.store_url, topic_column=spec.topic_column, topics_dir=spec.topics_dir)
        found = _checkpoint_sources(self.spark, self.checkpoint)
        self._clock = spec.time is not None and self._clocked(found, len(self.inputs))
        if self._clock:
            frame = with_clock_source(frame, tick=tick)
        elif found is not None and found > len(self.inputs):  # it kept time once: the clock's place, still
            frame = with_clock_source(frame, still=True)
        if self._stats is None:
            self._stats = new_stats(self.spark)
        listener = StatusListener(self._stats, self._progress, lambda error: None, self.spark.streams)
        self.spark.streams.addListener(listener)
        keyed = all(map(is_broker, self.inputs))  # a broker topic's partitions keep each key's messages together
        plan, running = OUTAGE.repeat(lambda: function_plan(frame, spec, self.parallelism, schema=_stats_type(),
                                                            report=self._stats.add, keyed=keyed))
        self._partitions = running.partitions  # a function keeping time is laid out by key group
        writer = (plan.writeStream.format("noop").option("checkpointLocation", self.checkpoint)
                  .queryName(f"statekeep_{spec.tenant}_{spec.namespace}_{spec.name}"))
        writer = (writer.trigger(availableNow=True) if self.once
                  else writer.trigger(processingTime=f"{spec.trigger_interval_ms} milliseconds"))
        try:
            self.query = writer.start()
        except BaseException:
            self.spark.streams.removeListener(listener)
            raise
        listener.query = str(self.query.id)
        return self

    def _clocked(self, found: int | None, inputs: int) -> bool:
        """Whether the query of a function keeping time gets the clock source (see
        :func:`~statekeep.functions.windowing.timerun.with_clock_source`; with ``--once`` too, so that one checkpoint
        serves both kinds of run): yes, unless its checkpoint (``found`` sources, None: none yet) holds a query
        without it (a function that kept no time when it started), which Spark would refuse to resume with one
        source more. Its processing-time timers then fire with the next input. (A function that kept time and
        keeps none now keeps the clock's place with a still clock: :meth:`start`.)"""
        if found is None or found > inputs:
            return True
        print(f"statekeep: {self.spec.name}: processing-time timers and state TTL act when input arrives "
              "(its checkpoint predates its timers; delete and create the function to have them act when idle)",
              file=sys.stderr)
        return False

    def await_termination(self, timeout: float | None = None) -> bool | None:
        """Wait for the query (Spark's ``awaitTermination``). A ``--once`` run of a function keeping
        time whose partitions left timers (or windows) that the function's final watermark or the clock
        has passed ends with one more micro-batch, without input, that fires them (its last batch fired
        only what each partition's own records had passed; a running query does this in its clock's
        next batch)."""
        assert self.query is not None, "start() first"
        try:
            # PySpark annotates int seconds but takes float ones (it converts to milliseconds)
            ended = self.query.awaitTermination(timeout)  # type: ignore[arg-type]
            value = self._take_stats()
            if self.once and self._clock and value is not None and not self.query.isActive:
                advance_watermark(self._time, value["last"], self._partitions)
            if (self.once and self._clock and not self._ticked and not self.query.isActive
                    and last_batch_needed(self._time)):
                self._ticked = True
                self.start(tick=True)
                return self.await_termination(timeout)
            return ended
        finally:
            if not self.query.isActive:
                self._settle()
                self.save_status()

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
        self._settle()
        self.save_status()

    def _settle(self) -> None:
        """The query has ended: what its tasks handed their executors' Kafka delivery agents is delivered
        (:func:`~statekeep.functions.messaging.kafka.settle`); a failure is the run's error (:meth:`status`), and
        the batches stay kept for the next run."""
        from statekeep.functions.messaging.kafka import settle

        def committed(batch: int, partition: int) -> bool:
            return self.spec.state_store().task(batch, partition, self._partitions).has_marker(f"{batch}-{partition}")

        try:
            settle(self.spec, committed)
        except StatekeepError as e:
            self._settle_error = f"{type(e).__name__}: {e}"

    def save_status(self) -> None:
        """Record :meth:`status` with ``status_saver`` (set by :func:`run_registered`); by default nowhere.
        Every status write of the driver (at start, after each micro-batch, at the end) goes through here. It
        is a plain overwrite, so it is repeated while the store is unavailable (:data:`statekeep.retry.OUTAGE`):
        a leader change of the store does not fail the query; a store down for longer still does. Writes are made
        one at a time, each computed when its turn comes: Spark's listener thread saves after a micro-batch while
        the query's own thread saves at its end, and a status computed first but written last (a slow write) would
        otherwise overwrite the final one with counts from before the last tasks ended."""
        if self.status_saver is not None:
            with self._saving:
                OUTAGE.repeat(self.status_saver)

    def status(self) -> dict[str, Any]:
        self._take_stats()
        active = self.query is not None and self.query.isActive
        exception = self.query.exception() if self.query is not None and not active else None
        error = str(exception) if exception else self._settle_error
        return {"running": active, "error": error, **self.totals,
                "workerId": self.worker_id, "updated_ms": int(time.time() * 1000)}


def status_json(status: Mapping[str, Any]) -> bytes:
    return json.dumps(status, sort_keys=True).encode()


STATUS_ROOT = "/statekeep/status"


def status_saver(store: MetadataStore, query: FunctionQuery, tenant: str, namespace: str,
                 name: str) -> Callable[[], None]:
    """What records ``query``'s :meth:`~FunctionQuery.status` at ``STATUS_ROOT/T/N/F`` in ``store``: a plain
    overwrite of the whole value (no expected version), so repeating it is safe."""
    path = f"{STATUS_ROOT}/{tenant}/{namespace}/{name}"

    def save() -> None:
        store.put(path, status_json(query.status()))

    return save


def run_registered(service: FunctionService, metadata_url: str, tenant: str, namespace: str, name: str, *,
                   checkpoint_root: str, once: bool = False, master: str = "local[*,4]",
                   skip_errors: bool | None = None, spark: SparkSession | None = None, worker_id: str | None = None,
                   spark_conf: Mapping[str, str] | None = None) -> FunctionQuery:
    """Start a registered function as a streaming query and keep its status in the metadata store
    at ``STATUS_ROOT/T/N/F`` (``workerId``: ``worker_id``). The checkpoint is per function incarnation,
    so a function deleted and created again starts over instead of resuming the old one's offsets.
    ``checkpoint_root`` is a local directory or any Hadoop-compatible URL (``hdfs://``, ``s3a://``,
    ...); a function that may move between machines needs one every machine reaches. Without
    ``spark``, a session on ``master`` with ``spark_conf`` is created (or the process's one reused). Once a
    micro-batch ran, the registry records the inputs it read (:meth:`FunctionRegistry.record_sources`): an update
    to others is refused from then on, as the checkpoint could not resume with them."""
    registry = service.registry
    spec, cfg = executor_spec(registry, metadata_url, tenant, namespace, name, skip_errors=skip_errors)
    incarnation = registry.incarnation(tenant, namespace, name)
    checkpoint = os.path.join(checkpoint_root, tenant, namespace, name, incarnation)
    spark = spark or spark_session(master, conf=spark_conf)
    query = FunctionQuery(spark, spec, cfg.inputs, checkpoint, parallelism=cfg.parallelism, once=once)
    query.worker_id = worker_id
    save = status_saver(registry.store, query, tenant, namespace, name)
    recorded: list[bool] = []

    def save_and_record() -> None:
        save()
        if not recorded and query.totals["batches"]:  # the checkpoint holds these inputs' offsets now
            registry.record_sources(cfg)
            recorded.append(True)

    query.status_saver = save_and_record
    query.on_batch = lambda batch_id, rows: query.save_status()
    query.start()
    query.save_status()  # says at once who runs it now (status readers compare it with the lock)
    return query


def read_status(store: MetadataStore, tenant: str, namespace: str, name: str) -> dict[str, Any] | None:
    result_path = f"{STATUS_ROOT}/{tenant}/{namespace}/{name}"
    result = store.get(result_path)
    if result is None:
        return None
    status: dict[str, Any] = jsonrecords.decode(result.value, result_path, "function status")  # by status_json
    return status
