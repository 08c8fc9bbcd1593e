"""Functions as Spark Structured Streaming queries: one query per function.

The driver reads the inputs with Spark's own sources (:func:`input_frame`) and runs the function on them in the
query's own plan, as the DataFrame operator does (:mod:`statekeep.functions.driver.plan`): each record to a
partition by its key, :func:`statekeep.functions.executor.runtime.arrow_partition_runner` on every partition
(records travel as Arrow batches, not pickled rows), into Spark's ``noop`` sink. See runtime.py for how state
stays exactly-once.
"""

from __future__ import annotations

import functools
import json
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from statekeep import jsonrecords
from statekeep.errors import InvalidArgumentError, StoreClosedError
from statekeep.functions.messaging.messages import JSON_LINE
from statekeep.functions.executor.runtime import STATS_COLUMNS
from statekeep.functions.config.spec import MESSAGE, ExecutorSpec, executor_spec
from statekeep.functions.driver.sparkpython import spark_python
from statekeep.functions.messaging.kafka import is_kafka
from statekeep.functions.windowing.timerun import (advance_watermark, last_batch_needed, with_clock_source)
from statekeep.retry import OUTAGE

if TYPE_CHECKING:  # PySpark is optional: imported where used
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from statekeep.functions.config.service import FunctionService
    from statekeep.metadata.base import MetadataStore

INPUT_FORMATS = ("json", "csv", "text", "parquet", "rate", "statekeep-changelog")


def latency_conf(pyspark_version: str) -> dict[str, str]:
    """The Spark settings :func:`spark_session` adds to a session it creates to cut a micro-batch's latency
    (measured with benchmarks/latency.py): Python workers reached over a unix domain socket (PySpark 4.1 and
    later, where the platform has them: about 40 ms less per task than a TCP connection), and a micro-batch's
    new files listed on the driver instead of by a Spark job of their own, up to 1024 files (Spark's default
    threshold is 32, which a batch at 100 messages/s passes). An idle query looks for new input every 50 ms,
    not Spark's 10 ms: with the default trigger (as soon as possible) 10 ms cost a core's half per idle function."""
    conf = {"spark.sql.sources.parallelPartitionDiscovery.threshold": "1024",
            "spark.sql.streaming.pollingDelay": "50ms"}
    major, minor = (int(p) for p in re.findall(r"\d+", pyspark_version)[:2])
    if hasattr(socket, "AF_UNIX") and (major, minor) >= (4, 1):
        conf["spark.python.unix.domain.socket.enabled"] = "true"
    return conf


#: Spark's checkpoint manager on Hadoop's FileSystem API: it writes a query's logs (offsets, commits, a file
#: source's) without the ``chmod`` and ``readlink`` processes the default FileContext one forks for each log file
#: where Hadoop has no native library, as in PySpark's package (about 25 ms a log file, 3 a micro-batch, here).
#: Its rename checks before it renames: two drivers writing one checkpoint could race, which the function's
#: run lock already excludes.
CHECKPOINT_MANAGER = ("spark.sql.streaming.checkpointFileManagerClass",
                      "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")


def spark_session(master: str = "local[*,4]", app_name: str = "statekeep", shuffle_partitions: int = 2,
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession set up for statekeep (shared: Spark allows one per driver process).
    The default master retries a failed task up to 4 times (``local[*,4]``), so a killed Python
    worker costs a retry, not the query. A session this call creates also gets :func:`latency_conf`,
    :data:`CHECKPOINT_MANAGER` (where its Spark has that class), and writes local files (its checkpoints) without
    Hadoop's ``.crc`` side files, which Spark does not need (a file with one is still verified when read).
    ``conf``: more Spark settings (e.g. ``spark.cores.max`` when several drivers share a cluster),
    applied last, so they win over statekeep's own (``spark.python.unix.domain.socket.enabled=false``
    turns the socket off); they take effect only if this call creates the session."""
    os.environ.setdefault("PYSPARK_PYTHON", spark_python())  # see statekeep.functions.driver.sparkpython
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        from statekeep.errors import MissingDependencyError

        raise MissingDependencyError("running functions needs PySpark: pip install 'statekeep[spark]'") from e
    from pyspark import SparkContext, __version__

    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": str(shuffle_partitions), "spark.sql.streaming.schemaInference": "true",
                "spark.sql.execution.arrow.maxRecordsPerBatch": "20000"}
    creating = SparkContext._active_spark_context is None
    if creating:  # the latency settings, unless in conf
        settings.update(latency_conf(__version__))
        connector = kafka_connector_jars()
        if connector:  # Spark's Kafka source and sink, where `statekeep jars install` resolved them
            given = (conf or {}).get("spark.jars")
            settings["spark.jars"] = ",".join([*connector, *([given] if given else [])])
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    key, manager = CHECKPOINT_MANAGER
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session's gateway
    if creating and key not in (conf or {}) and jvm.org.apache.spark.util.Utils.classIsLoadable(manager):
        spark.conf.set(key, manager)
    if creating:  # no .crc side file per local file written (each checkpoint log file's: about 5 ms a micro-batch)
        jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration()).setWriteChecksum(False)
    spark.sparkContext.setLogLevel("ERROR")
    from statekeep.functions.driver.sources import register_sources

    register_sources(spark)
    return spark


def kafka_connector_jars() -> list[str]:
    """The jars of Spark's Kafka connector as ``statekeep jars install`` resolved them (``[]`` if it did not)."""
    from statekeep import jars
    from statekeep.errors import MissingDependencyError

    try:
        return jars.spark_jars()
    except MissingDependencyError:
        return []


def check_kafka(spark: SparkSession, spec: ExecutorSpec, inputs: list[str]) -> None:
    """Before a query with Kafka topics starts: Spark has the Kafka connector (for an input), and every Kafka
    topic named exists and answers. :class:`MissingDependencyError`, :class:`NotFoundError` or
    :class:`StoreUnavailableError` naming what is missing."""
    from statekeep.errors import MissingDependencyError
    from statekeep.functions.messaging.kafka import check_changelog_topic, check_topics, one_cluster

    named = [*inputs, spec.output, spec.log_topic, spec.dead_letter, spec.changelog_topic]
    if not any(map(is_kafka, named)):
        return
    # what a (batch, partition) writes to Kafka is one transaction, so on one cluster
    one_cluster(n for n in (spec.output, spec.log_topic, spec.dead_letter, spec.changelog_topic) if n)
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session's gateway
    if any(map(is_kafka, inputs)) and not jvm.org.apache.spark.util.Utils.classIsLoadable(
            "org.apache.spark.sql.kafka010.KafkaSourceProvider"):
        raise MissingDependencyError("a Kafka input needs Spark's Kafka connector: run `statekeep jars install "
                                     "spark-kafka` before the Spark session starts (or give Spark the "
                                     "spark-sql-kafka-0-10 package yourself)")
    check_topics(named)
    if spec.changelog_topic:
        check_changelog_topic(spec.changelog_topic)


def input_frame(spark: SparkSession, inputs: list[str], input_format: str, key_field: str | None,
                options: dict[str, str] | None = None, *, store_url: str | None = None,
                topic_column: bool = False, topics_dir: str | None = None) -> DataFrame:
    """A streaming DataFrame with two columns: ``__record`` (a JSON document, or the raw line for
    text input) and ``__key`` (the partitioning key, or null); with ``topic_column`` a third,
    ``__topic``, the input each record came from (asked for with several inputs, where
    ``context.get_current_message_topic_name`` needs it). Several file inputs are read as one
    stream each, unioned. A ``statekeep-changelog`` input is
    another function's changelog (``statekeep://T/N/F`` or ``T/N/F``) in the registry at
    ``store_url`` (unless the options name a ``store``)."""
    from pyspark.sql import functions as F

    if input_format == MESSAGE:
        return _message_frame(spark, inputs, key_field, options, topic_column, topics_dir)
    if input_format not in INPUT_FORMATS:
        raise InvalidArgumentError(f"input format must be one of {', '.join(INPUT_FORMATS)}, not {input_format!r}")
    reader = spark.readStream
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    frames: list[tuple[str | None, DataFrame]]
    if input_format == "rate":
        frames = [(None, reader.format("rate").load())]
    elif input_format == "statekeep-changelog":
        if store_url and "store" not in (options or {}):
            reader = reader.option("store", store_url)
        frames = [(None, reader.format("statekeep-changelog")
                   .option("function", inputs[0].removeprefix("statekeep://")).load())]
    else:
        if input_format == "csv":
            reader = reader.option("header", "true")
        reader = reader.format("text" if input_format in ("json", "text") else input_format)
        # a streaming reader loads one path: several inputs are several sources, unioned below
        frames = [(path, reader.load(path)) for path in inputs]
    selected: DataFrame | None = None
    for path, frame in frames:
        if input_format in ("json", "text"):
            record = F.col("value")
            key = json_key("value", key_field) if key_field and input_format == "json" else (
                F.col("value") if key_field and input_format == "text" else F.lit(None).cast("string"))
        else:
            record = F.to_json(F.struct(*[F.col(c) for c in frame.columns]))
            key = F.col(key_field).cast("string") if key_field else F.lit(None).cast("string")
        columns = [record.alias("__record"), key.alias("__key")]
        if topic_column:
            columns.append(F.lit(path).cast("string").alias("__topic"))
        frame = frame.select(*columns)
        selected = frame if selected is None else selected.unionByName(frame)
    assert selected is not None  # one frame per input, and a function has at least one (FunctionConfig)
    return selected


def _message_frame(spark: SparkSession, inputs: list[str], key_field: str | None, options: dict[str, str] | None,
                   topic_column: bool, topics_dir: str | None) -> DataFrame:
    """:func:`input_frame` of the ``message`` format: each record a message record (JSON, see
    statekeep.functions.messaging.messages). A topic's files hold them; a file input's line becomes one (its
    value the line; a .json/.jsonl file's line as ``messages.JSON_LINE`` + the line). A topic under a URL root
    is read with the ``statekeep-topic`` source, a local one with Spark's text source. The key is the message's
    key for a topic, the key field of a JSON line, or a text line itself (with a key field)."""
    from pyspark.sql import functions as F

    from statekeep.functions.messaging.kafka import is_kafka
    from statekeep.functions.messaging.kafka import parse as parse_kafka
    from statekeep.functions.messaging.sink import is_url
    from statekeep.functions.messaging.topics import default_root, directory, is_topic

    reader = spark.readStream
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    selected: DataFrame | None = None
    root = topics_dir or default_root()
    for name in inputs:
        if is_kafka(name):  # Spark's Kafka source: offsets in the query's checkpoint, committed records only
            topic = parse_kafka(name)
            frame = (reader.format("kafka").option("kafka.bootstrap.servers", topic.bootstrap)
                     .option("subscribe", topic.topic).option("startingOffsets", "earliest")
                     .option("includeHeaders", "true").option("kafka.isolation.level", "read_committed").load())
            record, key = kafka_message(frame), F.col("key").cast("string")
        elif is_topic(name) and is_url(root):  # any fsspec URL, e.g. s3:// (no Hadoop connector needed)
            frame = (reader.format("statekeep-topic").option("topic", name).option("raw", "true")
                     .option("topicsDir", root).load())
            record, key = F.col("value"), json_key("value", "key")
        elif is_topic(name):  # a local topic: Spark's text source, measured faster here than statekeep-topic
            path = directory(root, name)
            os.makedirs(path, exist_ok=True)
            frame = reader.format("text").load(path)
            record, key = F.col("value"), json_key("value", "key")
        else:
            frame = reader.format("text").load(name)
            is_json = F.col("_metadata.file_path").rlike(r"(?i)\.jsonl?$")
            record = F.when(is_json, F.concat(F.lit(JSON_LINE), F.col("value"))).otherwise(
                F.to_json(F.struct(F.col("value").alias("value"))))
            key = (F.when(is_json, json_key("value", key_field)).otherwise(F.col("value"))
                   if key_field else F.lit(None).cast("string"))
        columns = [record.alias("__record"), key.alias("__key")]
        if topic_column:
            columns.append(F.lit(name).cast("string").alias("__topic"))
        frame = frame.select(*columns)
        selected = frame if selected is None else selected.unionByName(frame)
    assert selected is not None  # a function has at least one input
    return selected


def kafka_message(frame: DataFrame) -> Column:
    """A row of Spark's Kafka source (``key``, ``value``, ``timestamp``, ``headers`` if included) as the message
    record the runtime decodes (see :mod:`statekeep.functions.messaging.messages`): the key, the value as text
    where it is UTF-8 (else base64), the headers as properties, the timestamp as the event time (ms)."""
    from pyspark.sql import functions as F

    value = F.col("value")
    text = F.is_valid_utf8(value)
    fields = [F.col("key").cast("string").alias("key"), F.when(text, value.cast("string")).alias("value"),
              F.when(~text, F.base64(value)).alias("valueBase64"), F.unix_millis(F.col("timestamp")).alias("eventTime")]
    if "headers" in frame.columns:
        fields.append(F.when(F.size(F.col("headers")) > 0, F.map_from_entries(F.transform(
            F.col("headers"), lambda h: F.struct(h["key"], h["value"].cast("string"))))).alias("properties"))
    return F.to_json(F.struct(*fields))


_WS = "[ \\t\\n\\r]*"  # JSON's whitespace (Java's \s has more)
_PLAIN = r'[^"\\\x00-\x1f]*'  # the inside of a JSON string without escapes
_SCALAR = rf'"{_PLAIN}"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null'


def json_key(value: str, field: str) -> Column:
    """``get_json_object(value, '$.<field>')`` (the key a JSON document's ``field`` gives a record), computed
    without a JSON parser when the document is laid out the usual way: ``field`` is a top-level member, its value
    a string without escapes or an integer, and every member before it (at most 16) a plain string, number, true,
    false or null. Any other document goes to ``get_json_object`` (a Jackson parser per record, about 2 us: the
    costliest step of a micro-batch on the JVM, which computes it once to route a record and once to keep it).
    The two agree on every valid JSON document; of an invalid one whose start matches, this takes the key from
    that start where ``get_json_object`` gives null (the function then reports the record's decode error with
    the key). A ``field`` with characters other than letters, digits and ``_`` is a path: always the parser."""
    from pyspark.sql import functions as F

    parsed = F.get_json_object(value, f"$.{field}")
    if not re.fullmatch(r"\w+", field, re.ASCII):
        return parsed
    before = rf'{_WS}"(?!{field}"){_PLAIN}"{_WS}:{_WS}(?:{_SCALAR}){_WS},'
    pattern = rf'^{_WS}\{{(?:{before}){{0,16}}?{_WS}"{field}"{_WS}:{_WS}("{_PLAIN}"|0|-?[1-9][0-9]*){_WS}[,}}]'
    found = F.regexp_extract(value, pattern, 1)  # "" where the document is not laid out so
    unquoted = found.substr(F.lit(2), F.length(found) - 2)
    return F.when(found == "", parsed).when(found.startswith('"'), unquoted).otherwise(found)


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


@functools.cache
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
        self._stats: Any = None  # the accumulator of the tasks' stats rows (plan.StatsParam)
        self._partitions = 1  # the partitions of a function keeping time (set by start)
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
        check_kafka(self.spark, spec, self.inputs)
        frame = input_frame(self.spark, self.inputs, spec.source_format, spec.key_field, dict(spec.input_options),
                            store_url=spec.store_url, topic_column=spec.topic_column, topics_dir=spec.topics_dir)
        self._clock = spec.time is not None and self._clocked(len(self.inputs))
        if self._clock:
            frame = with_clock_source(frame, tick=tick)
        if self._stats is None:
            self._stats = new_stats(self.spark)
        listener = StatusListener(self._stats, self._progress, lambda error: None, self.spark.streams)
        self.spark.streams.addListener(listener)
        plan, running = OUTAGE.repeat(lambda: function_plan(frame, spec, self.parallelism, schema=_stats_type(),
                                                            report=self._stats.add))
        self._partitions = running.state_parallelism  # a function keeping time is laid out by key group
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

    def _clocked(self, inputs: int) -> bool:
        """Whether the query of a function keeping time gets the clock source (see
        :func:`~statekeep.functions.windowing.timerun.with_clock_source`; with ``--once`` too, so that one checkpoint
        serves both kinds of run): yes, unless its checkpoint holds a query without it (a function that
        kept no time when it started), which Spark would refuse to resume with one source more. Its
        processing-time timers then fire with the next input."""
        found = _checkpoint_sources(self.spark, self.checkpoint)
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
                self.save_status()

    def stop(self) -> None:
        if self.query is not None and self.query.isActive:
            self.query.stop()
        self.save_status()

    def save_status(self) -> None:
        """Record :meth:`status` with ``status_saver`` (set by :func:`run_registered`); by default nowhere.
        Every status write of the driver (at start, after each micro-batch, at the end) goes through here. It
        is a plain overwrite, so it is repeated while the store is unavailable (:data:`statekeep.retry.OUTAGE`):
        a leader change of the store does not fail the query; a store down for longer still does."""
        if self.status_saver is not None:
            OUTAGE.repeat(self.status_saver)

    def status(self) -> dict[str, Any]:
        self._take_stats()
        active = self.query is not None and self.query.isActive
        exception = self.query.exception() if self.query is not None and not active else None
        return {"running": active, "error": str(exception) if exception else None, **self.totals,
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
