"""Spark data sources on PySpark's Python data source API.

- ``spark.read.format("statekeep").option("function", "T/N/F").load()``: a function's state as a
  DataFrame (key, kind, value, number, version); with option ``variable``, one typed state variable
  (:mod:`statekeep.state.typed`) as (key, value as JSON text) per key holding it.
- ``spark.readStream.format("statekeep-changelog").option("function", "T/N/F").load()``: its
  changelog as a stream (offset, key, kind, value, number, version, tombstone); the stream's offset
  is the changelog offset, so a query restarted from its checkpoint resumes exactly where it was.
  Compaction may remove records inside a range before it is read: the stream skips those gaps (each
  removed record was superseded by a later one the stream still delivers). A stream that falls
  further behind than the tombstone retention (``purged_offset``) may miss deletes, as a Kafka
  consumer of a compacted topic does. A function takes another's changelog as its input with
  ``inputs: ["statekeep://T/N/F"]``. Partition-owned state (``--state-dir``) has a changelog per
  partition: the stream's offset is then ``{"epoch", "partitions": [offset per partition]}`` and each
  micro-batch reads every partition on from its own offset (a partition's records in its order); a
  rescale starts a new epoch, read from its partitions' beginning (what the old partitions committed
  after the stream's last batch before the rescale is not delivered, as with ``purged_offset``).

- ``spark.readStream.format("statekeep-clock").load()``: a stream that never has a row but has new
  data every second (its offset is the time in seconds), so a query reading it runs a micro-batch each
  second even while its other inputs are idle (see :func:`statekeep.functions.windowing.timerun.with_clock_source`);
  with ``Trigger.AvailableNow`` it has nothing to read, so the query's batches are its other sources',
  unless option ``tick`` is ``true``: then it has one second more, so the query runs one micro-batch
  even with nothing else to read.

- ``spark.read.format("statekeep-topic").option("topic", "persistent://T/N/X").load()``: a statekeep
  topic's messages (value or valueBase64, key, properties, eventTime, publishTime) in publish order; option
  ``topicsDir`` names the topics root, a path or an fsspec URL (see :mod:`statekeep.functions.messaging.topics`).
  ``spark.readStream`` reads it as a stream: its offset is the set of the topic's files taken, in publish
  order (see :mod:`statekeep.functions.messaging.sink`), so a restarted query resumes where it was and a file a
  replay rewrites in place is not taken twice; each micro-batch lists the topic's directory once (one
  prefix-free listing, through fsspec). A file committed more than ``LATENESS_MS`` before the newest file
  the stream took when it appears is not taken. Option ``maxFilesPerTrigger`` bounds a micro-batch; option
  ``raw`` ``true`` gives one column, ``value``, each message record's JSON line as written (what a
  function's topic input reads).

Option ``prefix`` (both sources): only the keys starting with it. It is applied in the reader,
on the executor, before rows are produced, so records of other keys are never shipped to Spark
(the changelog stream's offsets stay the changelog's, so checkpoints are unaffected).

Option ``store``: the metadata store URL holding the function registry (default
``$STATEKEEP_STORE``, else ``local://./.statekeep-data``). The state is reached through the
function's own state provider, as the REST API and CLI reach it. An unknown function fails the
read with :class:`NotFoundError`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, MissingDependencyError
from statekeep.state.base import Capability
from statekeep.state import typed
from statekeep.state.timestate import visible_entries, visible_records

try:  # this module is the Spark integration itself: without PySpark it is not importable at all
    from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
except ImportError as e:
    raise MissingDependencyError(f"the statekeep Spark data sources need PySpark: pip install 'statekeep[spark]' "
                                 f"({e})") from e

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.datasource import ReadLimit
    from pyspark.sql.types import StructType

    from statekeep.functions.config.service import FunctionService
    from statekeep.state.base import StateStore

STATE_SCHEMA = "key string, kind string, value binary, number long, version long"
VARIABLE_SCHEMA = "key string, value string"  # option "variable": a typed state variable, its value as JSON text
CHANGELOG_SCHEMA = "offset long, key string, kind string, value binary, number long, version long, tombstone boolean"
MAX_RECORDS_PER_BATCH = 100_000


def _function(options: Mapping[str, Any]) -> tuple[str, str, str]:
    parts = str(options.get("function", "")).removeprefix("statekeep://").split("/")
    if len(parts) != 3 or not all(parts):
        raise InvalidArgumentError('option "function" must be "tenant/namespace/name"')
    return parts[0], parts[1], parts[2]


def _prefix(options: Mapping[str, Any]) -> str:
    prefix = options.get("prefix", "")
    if not isinstance(prefix, str):
        raise InvalidArgumentError(f'option "prefix" must be a str, not {type(prefix).__name__}')
    return prefix


def _open_state(options: Mapping[str, Any]) -> tuple[FunctionService, StateStore]:
    """(service, state store) of the function the options name; close the service when done."""
    from statekeep.functions.config.service import FunctionService
    from statekeep.metadata.registry import default_store_url

    service = FunctionService.open(options.get("store") or default_store_url())
    try:
        return service, service.registry.state_store(*_function(options))
    except BaseException:
        service.close()
        raise


class _StateReader(DataSourceReader):
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        _function(self.options)
        _prefix(self.options)

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        service, state = _open_state(self.options)
        with service:
            variable = self.options.get("variable")
            if variable is not None:  # one typed variable: (key, its value as JSON text) per key holding it
                for key, name, value in typed.read_variables(state, prefix=_prefix(self.options)):
                    if name == variable:
                        yield key, json.dumps(value, separators=(",", ":"))
                return
            for entry in visible_entries(state, prefix=_prefix(self.options)):
                yield entry.key, entry.kind, entry.value, entry.counter, entry.version


class StatekeepStateSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "statekeep"

    def schema(self) -> str:
        return VARIABLE_SCHEMA if "variable" in self.options else STATE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _StateReader(self.options)


class _Range(InputPartition):
    def __init__(self, after: int, last: int, partition: int = 0) -> None:
        self.after, self.last, self.partition = after, last, partition


def _split(offset: Mapping[str, Any]) -> tuple[str | None, list[int]]:
    """``(epoch, offset per changelog partition)`` of a stream offset: ``{"offset": N}`` (one partition,
    the form checkpoints of per-key state hold) or ``{"epoch": E, "partitions": [N, ...]}``."""
    if "partitions" in offset:
        return offset.get("epoch"), [int(o) for o in offset["partitions"]]
    return None, [int(offset.get("offset", -1))]


class _ChangelogStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.options = dict(options)
        _function(self.options)
        _prefix(self.options)
        self._opened: tuple[FunctionService, StateStore] | None = None  # on the driver, opened on first use

    def __getstate__(self) -> dict[str, Any]:  # the reader travels to executors; open stores do not
        return {"options": self.options, "_opened": None}

    def initialOffset(self) -> dict[str, int]:
        return {"offset": -1}

    def latestOffset(self, start: dict[str, int] | None = None, limit: ReadLimit | None = None) -> dict[str, int]:
        if self._opened is None:
            self._opened = _open_state(self.options)
        state = self._opened[1]
        state.require(Capability.CHANGELOG_READ)
        epoch, starts = _split(start or self.initialOffset())
        most = getattr(limit, "max_rows", None) or MAX_RECORDS_PER_BATCH
        if Capability.PARTITIONED not in state.capabilities:
            records = state.read_changelog(after=starts[0], limit=most)
            return {"offset": records[-1].offset if records else starts[0]}
        now, count = state.changelog_position().epoch, state.changelog_partitions()
        if epoch != now or len(starts) != count:  # another layout (a rescale): its partitions from the start
            starts = [-1] * count
        ends = []
        for p, after in enumerate(starts):
            records = state.read_partition_changelog(p, after, most)
            ends.append(records[-1].offset if records else after)
        return {"epoch": now, "partitions": ends}  # type: ignore[dict-item]  # Spark takes any JSON

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        (first, starts), (epoch, ends) = _split(start), _split(end)
        if first != epoch or len(starts) != len(ends):
            starts = [-1] * len(ends)
        return [_Range(a, b, p) for p, (a, b) in enumerate(zip(starts, ends)) if b > a]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, _Range)  # what partitions() makes
        service, state = _open_state(self.options)
        prefix = _prefix(self.options)
        with service:  # filtered here (prefix, statekeep's internal keys), so Spark never receives them
            for r in visible_records(state, partition.after, partition.last, prefix, partition=partition.partition):
                # a tombstone has neither kind nor value, so a counter record has a value
                number = (int.from_bytes(r.value, "big", signed=True)
                          if r.kind == "counter" and r.value is not None else None)
                yield r.offset, r.key, r.kind, r.value, number, r.version, r.tombstone

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the changelog is kept by its owner (compaction decides)."""

    def stop(self) -> None:
        if self._opened is not None:
            self._opened[0].close()
            self._opened = None


class StatekeepChangelogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "statekeep-changelog"

    def schema(self) -> str:
        return CHANGELOG_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _ChangelogStreamReader(self.options)


class _ClockStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, tick: bool, still: bool = False) -> None:
        self._tick, self._still = tick, still
        self._frozen = False
        self._target: dict[str, int] | None = None  # AvailableNow: where it ends

    def initialOffset(self) -> dict[str, int]:
        return {"second": int(time.time())}

    def latestOffset(self, start: dict[str, int] | None = None, limit: ReadLimit | None = None) -> dict[str, int]:
        if self._still and start is not None:  # a query's place kept for a function that keeps no time now
            return start
        if self._frozen and start is not None:  # Trigger.AvailableNow: no data of its own, or one tick
            if self._target is None:
                self._target = {"second": start["second"] + 1} if self._tick else start
            return self._target
        return {"second": max(int(time.time()), (start or {}).get("second", 0))}

    def prepareForTriggerAvailableNow(self) -> None:
        self._frozen = True

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return []  # no rows, so no task: a batch of the clock alone costs Spark no Python worker for it

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        return iter(())

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release."""


class StatekeepClockSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "statekeep-clock"

    def schema(self) -> str:
        return "second long"

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = {k: str(v).lower() for k, v in self.options.items()}
        return _ClockStreamReader(options.get("tick") == "true", options.get("still") == "true")


TOPIC_SCHEMA = ("value string, valueBase64 string, key string, properties map<string,string>, eventTime long, "
                "publishTime long")
#: see the module docstring: how far back (ms) a topic stream still takes a file it had not seen
LATENESS_MS = 60_000
TOPIC_PARTITIONS = 16  # a micro-batch's files are read by at most this many tasks, each a run of them in order


def _topic_directory(options: Mapping[str, Any]) -> str:
    from statekeep.functions.config.locations import absolute, default_root
    from statekeep.functions.messaging.topics import complete, directory

    if not options.get("topic"):
        raise InvalidArgumentError('option "topic" must name a topic (persistent://T/N/X, T/N/X or X)')
    root = absolute(str(options["topicsDir"])) if options.get("topicsDir") else default_root()
    return directory(root, complete(str(options["topic"])))


def _raw(options: Mapping[str, Any]) -> bool:
    return str(options.get("raw", "false")).lower() == "true"


class _TopicFiles(InputPartition):
    def __init__(self, names: list[str]) -> None:
        self.names = names


def _topic_rows(directory: str, names: list[str], raw: bool) -> Iterator[Any]:
    """The messages of a topic's files ``names``, in that order: as Arrow batches of their JSON lines (``raw``),
    or as rows of TOPIC_SCHEMA."""
    from statekeep.functions.messaging import sink

    if raw:  # split and filtered in Arrow: no Python object per line
        import pyarrow as pa
        import pyarrow.compute as pc

        for name in names:
            lines = pc.list_flatten(pc.split_pattern(pa.array([sink.read_text(directory, name)]), "\n"))
            lines = lines.filter(pc.not_equal(pc.utf8_trim_whitespace(lines), ""))  # blank lines are no messages
            if len(lines):
                yield pa.RecordBatch.from_arrays([lines], names=["value"])
        return
    for m in (record for name in names for record in sink.file_records(directory, name)):
        yield (m.get("value"), m.get("valueBase64"), m.get("key"), m.get("properties"), m.get("eventTime"),
               m.get("publishTime"))


class _TopicReader(DataSourceReader):
    def __init__(self, options: Mapping[str, Any]) -> None:
        self.directory, self.raw = _topic_directory(options), _raw(options)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from statekeep.functions.messaging import sink

        return _topic_rows(self.directory, sink.data_files(self.directory), self.raw)


class _TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"after": MS, "seen": [NAME, ...]}``: every file whose time is below ``after`` or whose name is
    in ``seen`` was taken (``seen`` keeps only the names at or after ``after``, and those taken last)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.directory, self.raw = _topic_directory(options), _raw(options)
        most = options.get("maxFilesPerTrigger")
        if most is not None and (not str(most).isdigit() or int(most) < 1):
            raise InvalidArgumentError(f'option "maxFilesPerTrigger" must be a positive int, not {most!r}')
        self.max_files = int(most) if most is not None else None
        self._available: set[str] | None = None  # Trigger.AvailableNow: the files there when it started

    def initialOffset(self) -> dict[str, Any]:
        return {"after": 0, "seen": []}

    def getDefaultReadLimit(self) -> ReadLimit:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

        return ReadMaxFiles(self.max_files) if self.max_files else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        from statekeep.functions.messaging import sink

        self._available = set(sink.data_files(self.directory))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit | None = None) -> dict[str, Any]:
        from statekeep.functions.messaging import sink

        after, seen = int(start["after"]), set(start["seen"])
        keys = (sink.file_key(name) for name in sink.file_names(self.directory) if name not in seen)
        fresh = sorted(k for k in keys if k is not None and k[0] >= after
                       and (self._available is None or k[1] in self._available))
        most = getattr(limit, "max_files", None)
        fresh = fresh[:most] if most else fresh
        if not fresh:
            return start
        times = {name: (sink.file_key(name) or (0, name))[0] for name in seen}
        newest = max([k[0] for k in fresh] + list(times.values()))
        horizon = max(after, newest - LATENESS_MS)
        kept = {n for n, ms in times.items() if ms >= horizon} | {name for _, name in fresh}
        return {"after": horizon, "seen": sorted(kept)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        from statekeep.functions.messaging import sink

        names = [n for _, n in sorted(k for k in map(sink.file_key, set(end["seen"]) - set(start["seen"]))
                                      if k is not None)]
        size = -(-len(names) // TOPIC_PARTITIONS)
        return [_TopicFiles(names[i:i + size]) for i in range(0, len(names), size)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _TopicFiles)  # what partitions() makes
        return _topic_rows(self.directory, partition.names, self.raw)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: a topic keeps its files."""


class StatekeepTopicSource(DataSource):
    """``spark.read`` / ``spark.readStream`` ``.format("statekeep-topic").option("topic", NAME)``: a statekeep
    topic's messages (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "statekeep-topic"

    def schema(self) -> str:
        return "value string" if _raw(self.options) else TOPIC_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _TopicReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _TopicStreamReader(self.options)


def register_sources(spark: SparkSession) -> None:
    from statekeep.functions.driver.kafka_sink import StatekeepKafkaSink
    from statekeep.functions.driver.pulsar_source import StatekeepPulsarSource

    spark.dataSource.register(StatekeepKafkaSink)
    spark.dataSource.register(StatekeepPulsarSource)
    spark.dataSource.register(StatekeepStateSource)
    spark.dataSource.register(StatekeepChangelogSource)
    spark.dataSource.register(StatekeepTopicSource)
    spark.dataSource.register(StatekeepClockSource)
