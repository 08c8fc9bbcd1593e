"""A function's inputs as one streaming DataFrame (:func:`input_frame`): Spark's own sources per input, each
record with its key (:func:`with_json_key` takes a JSON line's key field without a JSON parser where it can)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING

from statekeep.functions.config.locations import is_kafka, is_pulsar
from statekeep.functions.config.spec import ExecutorSpec, RecordFormat

if TYPE_CHECKING:  # PySpark is optional: imported where used
    from pyspark.sql import Column, DataFrame, SparkSession


def check_brokers(spark: SparkSession, spec: ExecutorSpec, inputs: list[str]) -> None:
    """Before a query with broker topics starts: Spark has the Kafka connector (for a Kafka input), every Kafka
    topic named exists and answers, every Pulsar topic named exists and answers and, as an output, deduplicates.
    :class:`MissingDependencyError`, :class:`NotFoundError`, :class:`StoreUnavailableError` or
    :class:`InvalidArgumentError` naming what is missing."""
    named = [*inputs, spec.output, spec.log_topic, spec.dead_letter, spec.changelog_topic]
    if any(map(is_pulsar, named)):
        from statekeep.functions.messaging.pulsartopics import check_topics as check_pulsar

        check_pulsar(inputs, [spec.output, spec.log_topic, spec.dead_letter])
    if any(map(is_kafka, named)):
        _check_kafka(spark, spec, inputs)


def _check_kafka(spark: SparkSession, spec: ExecutorSpec, inputs: list[str]) -> None:
    from statekeep.errors import MissingDependencyError
    from statekeep.functions.messaging.kafka import check_changelog_topic, check_topics, one_cluster

    named = [*inputs, spec.output, spec.log_topic, spec.dead_letter, spec.changelog_topic]
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


def input_frame(spark: SparkSession, inputs: list[str], fmt: RecordFormat, key_field: str | None,
                options: dict[str, str] | None = None, *, store_url: str | None = None,
                topic_column: bool = False, topics_dir: str | None = None) -> DataFrame:
    """A streaming DataFrame with two columns: ``__record`` (a JSON document, or the raw line for
    text input; a CSV or Parquet input's rows keep their own columns instead) and ``__key`` (the partitioning key,
    or null); with ``topic_column`` a third, ``__topic``, the input each record came from (asked for with several
    inputs, where ``context.get_current_message_topic_name`` needs it). Several file inputs are read as one stream
    each, unioned. A ``statekeep-changelog`` input is
    another function's changelog (``statekeep://T/N/F`` or ``T/N/F``) in the registry at
    ``store_url`` (unless the options name a ``store``)."""
    from pyspark.sql import functions as F

    if fmt.message:
        return _message_frame(spark, inputs, key_field, options, topic_column, topics_dir)
    reader = spark.readStream.format(fmt.reader)
    for k, v in (options or {}).items():
        reader = reader.option(k, v)
    frames: list[tuple[str | None, DataFrame]]
    if fmt.changelog:
        if store_url and "store" not in (options or {}):
            reader = reader.option("store", store_url)
        reader = reader.option("function", inputs[0].removeprefix("statekeep://"))
    if fmt.one_stream:
        frames = [(None, reader.load())]
    else:
        if fmt.source == "csv":
            reader = reader.option("header", "true")
        # a streaming reader loads one path: several inputs are several sources, unioned below
        frames = [(path, reader.load(path)) for path in inputs]
    no_key = F.lit(None).cast("string")
    selected: DataFrame | None = None
    for path, frame in frames:
        if fmt.rows:  # CSV, Parquet: the reader's columns as they are (the task makes each row a dict)
            data = [F.col(f"`{c}`") for c in frame.columns]
            key = F.col(key_field).cast("string") if key_field else no_key
        elif fmt.lines:
            data, key = [F.col("value").alias("__record")], F.col("value") if key_field else no_key
            if key_field and fmt.json:
                frame, key = with_json_key(frame, key_field)
        else:
            data = [F.to_json(F.struct(*[F.col(c) for c in frame.columns])).alias("__record")]
            key = F.col(key_field).cast("string") if key_field else no_key
        columns = [*data, key.alias("__key")]
        if topic_column:
            columns.append(F.lit(path).cast("string").alias("__topic"))
        frame = frame.select(*columns)
        selected = frame if selected is None else selected.unionByName(frame, allowMissingColumns=fmt.rows)
    assert selected is not None  # one frame per input, and a function has at least one (FunctionConfig)
    return selected


def _message_frame(spark: SparkSession, inputs: list[str], key_field: str | None, options: dict[str, str] | None,
                   topic_column: bool, topics_dir: str | None) -> DataFrame:
    """:func:`input_frame` of the ``message`` format: each record a message in the columns of
    :func:`message_columns`, with its ``__key``. A Kafka topic's are its source's own columns; a statekeep topic's
    lines (message records, see :mod:`statekeep.functions.messaging.messages`) are parsed into them in the JVM; a
    file input's line is the payload (a .json/.jsonl file's line flagged ``__json``: decoded as JSON, not by the
    serde). A topic under a URL root is read with the ``statekeep-topic`` source, a local one with Spark's text
    source. The key is the message's key for a topic, the key field of a JSON line, or a text line itself (with a
    key field)."""
    from pyspark.sql import functions as F

    from statekeep.functions.config.locations import parse as parse_kafka
    from statekeep.functions.config.locations import parse_pulsar
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
            columns, key = message_columns(frame), F.col("key").cast("string")
        elif is_pulsar(name):  # statekeep-pulsar: message ids in the query's checkpoint
            pulsar = parse_pulsar(name)
            frame = (reader.format("statekeep-pulsar").option("serviceUrl", pulsar.service_url)
                     .option("adminUrl", pulsar.admin_url).option("topic", pulsar.topic)
                     .option("startingOffsets", "earliest").load())
            columns, key = message_columns(frame), F.col("key").cast("string")
        elif is_topic(name):
            if is_url(root):  # any fsspec URL, e.g. s3:// (no Hadoop connector needed)
                frame = (reader.format("statekeep-topic").option("topic", name).option("raw", "true")
                         .option("topicsDir", root).load())
            else:  # a local topic: Spark's text source, measured faster here than statekeep-topic
                path = directory(root, name)
                os.makedirs(path, exist_ok=True)
                frame = reader.format("text").load(path)
            frame = frame.select(F.from_json(F.col("value"), TOPIC_RECORD).alias("__m"))
            columns, key = topic_columns(F.col("__m")), F.col("__m.key")
        else:  # whether a line is JSON is computed once per record, in a projection of its own, from the file's
            # name (not its path: the shorter string per row took a tenth off this plan's JVM time, 1M lines here)
            is_json = F.col("_metadata.file_name").rlike(r"(?i)\.jsonl?$")
            frame = reader.format("text").load(name).select("value", is_json.alias("__json"))
            columns = [F.col("value").cast("binary").alias("__value"), F.lit(None).cast("string").alias("__mkey"),
                       no_properties().alias("__props"), F.lit(None).cast("long").alias("__time"),
                       F.col("__json"), *_nowhere()]
            key = F.lit(None).cast("string")
            if key_field:
                frame, json_key = with_json_key(frame, key_field, F.col("__json"))
                key = F.when(F.col("__json"), json_key).otherwise(F.col("value"))
        columns.append(key.alias("__key"))
        if topic_column:
            columns.append(F.lit(name).cast("string").alias("__topic"))
        frame = frame.select(*columns)
        selected = frame if selected is None else selected.unionByName(frame)
    assert selected is not None  # a function has at least one input
    return selected


#: a message's properties (Pulsar's) or headers (Kafka's) in Spark: Kafka's source's ``headers`` type
HEADERS = "array<struct<key:string,value:binary>>"
#: a statekeep topic's line, as the JVM parses it (see statekeep.functions.messaging.messages)
TOPIC_RECORD = "key string, value string, valueBase64 string, properties map<string,string>, eventTime long"


def message_columns(frame: DataFrame) -> list[Column]:
    """The message columns of a DataFrame of Kafka's shape (Spark's Kafka source: ``key``, ``value``,
    ``timestamp``, ``headers`` if included; the ``statekeep-pulsar`` source's too, with its ``messageId`` and
    ``eventTime``), as the function's task reads them (:class:`~statekeep.functions.messaging.columns.MessageColumns`),
    computed by no more than Spark's own projections: ``__value`` the value's bytes (for the serde), ``__mkey`` the
    key as text, ``__props`` the headers (empty where there are none: see :func:`no_properties`), ``__time`` the
    event time in ms (Kafka's timestamp; Pulsar's event time, null where the producer set none), ``__json`` false,
    and ``__kpart``, ``__koffset`` and ``__mid``, where the message is in its topic (Kafka's partition and offset;
    Pulsar's partition and serialized message id: an error names them)."""
    from pyspark.sql import functions as F

    headers = F.coalesce(F.col("headers"), no_properties()) if "headers" in frame.columns else no_properties()
    where = ([F.col("partition").cast("int").alias("__kpart"), F.col("offset").cast("long").alias("__koffset"),
              (F.col("messageId") if "messageId" in frame.columns else F.lit(None).cast("binary")).alias("__mid")]
             if {"partition", "offset"} <= set(frame.columns) else _nowhere())
    time = F.col("eventTime") if "eventTime" in frame.columns else F.col("timestamp")
    return [F.col("value").cast("binary").alias("__value"), F.col("key").cast("string").alias("__mkey"),
            headers.alias("__props"), F.unix_millis(time).alias("__time"), F.lit(False).alias("__json"), *where]


def no_properties() -> Column:
    """The ``__props`` of a message without properties: an empty array, never null. Arrow's list vector fills the
    offsets of every null entry since its last set one each time Spark sizes the batch it writes for Python (once
    per row), so a column of nulls costs the square of the batch's rows in the JVM: measured, half a Kafka
    micro-batch's time."""
    from pyspark.sql import functions as F

    return F.array().cast(HEADERS)


def _nowhere() -> list[Column]:
    """The partition, offset and message id columns of a message that has none."""
    from pyspark.sql import functions as F

    return [F.lit(None).cast("int").alias("__kpart"), F.lit(None).cast("long").alias("__koffset"),
            F.lit(None).cast("binary").alias("__mid")]


def topic_columns(record: Column) -> list[Column]:
    """The message columns (as :func:`message_columns`) of a statekeep topic's parsed line (:data:`TOPIC_RECORD`):
    its payload (``valueBase64`` decoded, else ``value``'s UTF-8 bytes), key, properties and event time."""
    from pyspark.sql import functions as F

    properties = F.coalesce(F.transform(F.map_entries(record["properties"]), lambda e: F.struct(
        e["key"].alias("key"), e["value"].cast("binary").alias("value"))), no_properties())
    payload = F.coalesce(F.unbase64(record["valueBase64"]), record["value"].cast("binary"),
                         F.lit("null").cast("binary"))
    return [payload.alias("__value"), record["key"].alias("__mkey"), properties.alias("__props"),
            record["eventTime"].alias("__time"), F.lit(False).alias("__json"), *_nowhere()]


_WS = "[ \\t\\n\\r]*"  # JSON's whitespace (Java's \s has more)
_PLAIN = r'[^"\\\x00-\x1f]*'  # the inside of a JSON string without escapes
_SCALAR = rf'"{_PLAIN}"|-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|true|false|null'


def with_json_key(frame: DataFrame, field: str, where: Column | None = None) -> tuple[DataFrame, Column]:
    """``frame`` (with a ``value`` column of JSON documents) and the key its ``field`` gives each record: what
    ``get_json_object(value, '$.<field>')`` gives, computed without a JSON parser when the document is laid out
    the usual way: ``field`` is a top-level member, its value a string without escapes or an integer, and every
    member before it (at most 16) a plain string, number, true, false or null. Any other document goes to
    ``get_json_object`` (a Jackson parser per record, about 2 us: the costliest step of a micro-batch on the
    JVM). The two agree on every valid JSON document; of an invalid one whose start matches, this takes the key
    from that start where ``get_json_object`` gives null (the function then reports the record's decode error
    with the key). A ``field`` with characters other than letters, digits and ``_`` is a path: always the
    parser. With ``where``, the match is computed only for the records where it holds, and the key is null
    elsewhere (choose another key there).

    The match is a column of its own (``__found``), so it is computed once per record: an expression used in
    several branches of a ``CASE`` is computed in each, and Spark keeps a projection apart from the next
    where merging them would compute a costly expression twice."""
    from pyspark.sql import functions as F

    parsed = F.get_json_object(F.col("value"), f"$.{field}")
    if not re.fullmatch(r"\w+", field, re.ASCII):
        return frame, parsed
    before = rf'{_WS}"(?!{field}"){_PLAIN}"{_WS}:{_WS}(?:{_SCALAR}){_WS},'
    pattern = rf'^{_WS}\{{(?:{before}){{0,16}}?{_WS}"{field}"{_WS}:{_WS}("{_PLAIN}"|0|-?[1-9][0-9]*){_WS}[,}}]'
    match = F.regexp_extract(F.col("value"), pattern, 1)  # "" where the document is not laid out so
    frame = frame.withColumn("__found", match if where is None else F.when(where, match))
    found = F.col("__found")
    unquoted = found.substr(F.lit(2), F.length(found) - 2)
    return frame, F.when(found == "", parsed).when(found.startswith('"'), unquoted).otherwise(found)
