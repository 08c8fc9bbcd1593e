"""Running a function over one partition of one micro-batch, on a Spark executor.

Exactly-once, and why it is cheap:

- Spark replays a failed micro-batch with the same batch id and the same records, and
  ``repartition(n, key)`` sends each record to the same partition again.
- A partition's state changes, their changelog records and the marker "(function, batch,
  partition) applied" are written in ONE atomic write (:meth:`StateStore.apply_batch`). A replayed
  partition whose marker exists is skipped; one whose write never happened is simply redone.
- Output records are written before the state write, to a file a replay of (batch, partition)
  writes again (:mod:`statekeep.functions.messaging.sink`), so each record lands once.
- Within the partition, state for all the batch's keys is read in one bulk read, the function
  runs against it in memory, and all changes go back in that one write: no store round trip
  per record.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from statekeep.errors import InvalidArgumentError, StateConflictError, StatekeepError
from statekeep.functions.windowing import timerun
from statekeep.functions.executor.context import Context, RecordSource, is_valid_key
from statekeep.functions.messaging.jsonscan import loads_at
from statekeep.functions.config.loader import BATCH, NATIVE, FunctionLoadError, cached_function, entry_point
from statekeep.lru import BoundedLRU
from statekeep.functions.messaging.messages import (batch_lines, dead_letter_message, function_logger, message_decoder,
                                          output_sink, output_wrapper, published_targets,
                                                    write_targets)
from statekeep.functions.config.spec import ExecutorSpec
from statekeep.functions.messaging.kafka import BatchOutputs, changelog_records, deliver_kept, is_kafka
from statekeep.functions.messaging.sink import claim
from statekeep.state.buffer import BufferedState, JournaledState
from statekeep.state.schemas import read_schemas, record_schemas, registry_store
from statekeep.metadata import MetadataStore
from statekeep.retry import DEFAULT
from statekeep.state.base import StateStore, TaskState

log = logging.getLogger(__name__)

# per (batch, partition): counts, the time spent in the function (s), user metrics and latest
# exceptions as JSON; the driver sums them into the function's stats (statekeep.functions.driver.stats)
STATS_SCHEMA = ("partition long, processed long, skipped long, outputs long, applied boolean, error string, "
                "received long, user_exceptions long, dead_letters long, latency double, metrics string, "
                "exceptions string, watermark long, next_event long, next_processing long")
#: STATS_SCHEMA as (column, type name) pairs: the one parse of it, for the Arrow row and Spark's StructType
STATS_COLUMNS = tuple(tuple(column.split()) for column in STATS_SCHEMA.split(", "))
MAX_EXCEPTIONS = 10


class FunctionRecordError(StatekeepError):
    """A function raised on a record; the message names the record's position, ``error`` is what the
    function raised (None: the record itself was refused)."""

    def __init__(self, message: str, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.error = error


class ProcessingTimeout(StatekeepError):
    """A record's processing took longer than the function's ``timeoutMs`` (a user exception)."""


@dataclass
class PartitionStats:
    partition: int
    processed: int = 0
    skipped: int = 0
    outputs: int = 0
    applied: bool = True
    errors: list[str] = field(default_factory=list)
    received: int = 0
    user_exceptions: int = 0  # every failed attempt (a record retried twice then skipped counts 3)
    dead_letters: int = 0
    latency: float = 0.0  # seconds spent in the function for this partition's records
    metrics: dict[str, list[float]] = field(default_factory=dict)  # record_metric: name -> [sum, count, last]
    exceptions: list[list[Any]] = field(default_factory=list)  # latest [message, time ms]
    watermark: int | None = None  # the partition's event-time watermark after the batch (timekeeping)
    next_event: int | None = None  # its earliest timer left in event time, and in processing time
    next_processing: int | None = None
    rows: Any = None  # the DataFrame operator's output rows of the run (a pyarrow Table), or None

    def user_exception(self, message: str) -> None:
        self.user_exceptions += 1
        self.exceptions.append([message, int(time.time() * 1000)])
        del self.exceptions[:-MAX_EXCEPTIONS]


#: id of an operator's function object -> (the object, its entry point and kind): the function as it arrived with the
#: task (a class is instantiated once per object, as the loader's cache does for a file's class)
_objects: BoundedLRU[int, tuple[Any, tuple[Callable[..., Any], str]]] = BoundedLRU(64)
_objects_lock = threading.Lock()


def _cached_process(spec: ExecutorSpec) -> tuple[Callable[..., Any], str]:
    """(entry point, kind) of the spec's code, loaded once per executor process (the loader's cache), or of its
    ``entry`` object (the DataFrame operator's)."""
    try:
        if spec.entry is None:
            return cached_function(spec.code, spec.py_name, spec.class_name)
        with _objects_lock:
            found = _objects.get(id(spec.entry))
            if found is None or found[0] is not spec.entry:
                found = _objects.put(id(spec.entry), (spec.entry, entry_point(spec.entry, spec.entry_kind == BATCH)))
            return found[1]
    except FunctionLoadError as e:
        raise FunctionRecordError(str(e)) from None


class RecordPath:
    """One (batch, partition) run of a function, the one path from Spark's iterator to the commit of every
    entry point (per record, native, class, ``process_batch``, windowed, timers, retries and dead letters)
    and of :func:`statekeep.functions.admin.lifecycle.trigger` (a one-record run). Its steps, each here once:
    decode (:attr:`decode`: JSON as ``json.loads``, a message through its input's serde, text as it is;
    :func:`records_table` for ``process_batch``), state (``state``, the batch's buffer, which the caller
    prefetches and commits), time (:meth:`keep_time`), the function (:meth:`run_records` through the one
    per-record :meth:`loop`, :meth:`run_table`, then :meth:`finish`), outputs (:attr:`outputs` as the output
    holds them, :attr:`fired` by timers and windows, :attr:`dead` letters; :meth:`output`) and errors
    (:class:`FunctionRecordError` naming the record, or the spec's retries, skips and dead letters).
    ``wrap=False`` keeps results as returned (the trigger's answer). :class:`FunctionLoadError` if a
    ``message`` input's serde cannot be loaded.
    """

    __slots__ = ("spec", "batch_id", "partition", "state", "context", "kind", "user_process", "process",
                 "decode", "wrap", "timed", "outputs", "fired", "dead", "stats", "registry")

    def __init__(self, spec: ExecutorSpec, batch_id: int | str, partition: int, state: BufferedState,
                 source: RecordSource | None, process: Callable[..., Any], kind: str, *, wrap: bool = True) -> None:
        self.spec, self.batch_id, self.partition, self.state, self.kind = spec, batch_id, partition, state, kind
        self.context = context = Context(
            spec.tenant, spec.namespace, spec.name, state, spec.user_config, function_logger(spec, partition),
            function_id=spec.function_id, function_version=spec.function_version, instance_id=partition,
            inputs=list(spec.inputs), output=spec.output, secrets=spec.secrets, source=source,
            output_serde=spec.output_serde)
        #: the function registry's store, where typed variables' schemas are recorded (None: none to check)
        self.registry: Callable[[], MetadataStore] | None = (
            functools.partial(registry_store, spec.store_url) if spec.store_url else None)
        context.load_schemas = self._recorded_schemas
        if kind == NATIVE:  # Pulsar's native function: process(input)
            process = functools.partial(_native, process)
        self.user_process = self.process = process
        self.decode: Callable[[Any], Any] = (
            _identity if kind == BATCH
            else message_decoder(spec, context.get_current_message_topic_name)
            if spec.input_format == "message" else loads_at if spec.input_format == "json" else _identity)
        self.wrap: Callable[[Any], Any] = output_wrapper(spec, context) if wrap else _identity
        self.timed: timerun.TimedRun | None = None
        self.outputs: list[Any] = []
        self.fired: list[Any] = []
        self.dead: list[Any] = []
        self.stats = PartitionStats(partition)

    def _recorded_schemas(self) -> dict[str, dict[str, Any]]:
        spec = self.spec
        return {} if self.registry is None else read_schemas(self.registry(), spec.tenant, spec.namespace, spec.name)

    def keep_time(self, spec: ExecutorSpec, partition: int, keys: Iterable[Any] = ()) -> None:
        """Wire the function's time in, if it keeps any (``spec.time``): ``spec`` carries the batch's time
        fields (``time_groups``, ``state_parallelism``, ``watermark_previous``) and ``partition`` is the
        one whose key groups this run owns; ``keys``' time entries are read in the batch's bulk read.
        :class:`FunctionRecordError` for a windowed ``process_batch``."""
        if spec.time is None:
            return
        timed = timerun.TimedRun(spec, self.state, partition, self.context, self.user_process, self.fired.append,
                                 self.batch_id if isinstance(self.batch_id, int) else None)
        if self.kind == BATCH and timed.windows is not None:
            raise FunctionRecordError(f"{spec.fqfn}: {timerun.BATCH_WINDOWS}")
        timed.prefetch(k for k in keys if is_valid_key(k))
        self.timed = timed
        if self.kind != BATCH:
            self.process = timed.process

    def run_records(self, records: list[Any], record_keys: list[Any] | None = None, *, careful: bool = False) -> None:
        """Run the function on each record, in order, through :meth:`loop`. Not ``careful``: the first failing
        record (its decode too) raises :class:`FunctionRecordError`. ``careful`` (the spec's ``skip_errors``,
        ``max_retries``, ``dead_letter`` or ``timeout_ms``; ``state`` a :class:`JournaledState`): a record that
        raises, or takes longer than ``timeout_ms``, is a user exception whose state changes and published
        messages are taken back; it is retried up to ``max_retries`` times, then written to ``dead`` if the spec
        has a dead letter, else skipped (``max_retries`` set or ``skip_errors``), else it raises. A
        :attr:`~statekeep.functions.windowing.windows.Windows.bulk` windowed function (``record_keys`` given)
        adds each record to its window in the loop itself (:meth:`Windows.bulk_process`)."""
        stats, timed = self.stats, self.timed
        stats.received += len(records)
        given_up = stats.skipped + stats.dead_letters
        if careful:
            self.loop(records, self._careful(), _identity)  # the careful call decodes: a malformed record fails in it
        elif timed is not None and timed.windows is not None and timed.windows.bulk and record_keys is not None:
            process, observe = timed.windows.bulk_process(record_keys, self.process)
            self.loop(records, process, self.decode)
            observe()
        else:
            self.loop(records, self.process, self.decode)
        stats.processed += len(records) - (stats.skipped + stats.dead_letters - given_up)
        self.context.position = -1

    def loop(self, records: list[Any], process: Callable[[Any, Any], Any], decode: Callable[[Any], Any]) -> None:
        """THE per-record loop: ``process(decode(record), context)`` for each record, in order, with
        ``context.position`` its position; a result that is not None is an output record. The first record
        whose decode or call raises fails the run: :class:`FunctionRecordError` naming it."""
        context, append, wrap = self.context, self.outputs.append, self.wrap
        for position, record in enumerate(records):  # written out: no call per record beyond the function's
            context.position = position
            try:  # a malformed record is a failing record too
                result = process(decode(record), context)
            except Exception as e:
                raise self._record_error(position, e) from None
            if result is not None:
                append(wrap(result))

    def _careful(self) -> Callable[[Any, Any], Any]:
        """The per-record call of a careful run (see :meth:`run_records`), given the record undecoded: a user
        exception is rolled back and retried, then dead-lettered or skipped (None: no output), or raised."""
        spec, stats, state, process, decode = self.spec, self.stats, self.state, self.process, self.decode
        assert isinstance(state, JournaledState)  # careful runs journal, to roll back a failed record
        retries, timeout = spec.max_retries or 0, spec.timeout_ms or 0
        skips = spec.skip_errors or spec.max_retries is not None
        clock = time.perf_counter

        def careful(record: Any, context: Any) -> Any:
            attempt = 0
            while True:
                state.begin()
                mark = len(context.published)
                try:
                    start = clock()
                    result = process(decode(record), context)
                    if timeout and (clock() - start) * 1000 > timeout:
                        raise ProcessingTimeout(f"processing took longer than timeoutMs={timeout}")
                    return result
                except Exception as e:
                    state.rollback()
                    del context.published[mark:]
                    message = f"batch {self.batch_id}, partition {self.partition}, record {context.position}: " \
                              f"{type(e).__name__}: {e}"
                    stats.user_exception(message)
                    if attempt < retries:
                        attempt += 1
                        continue
                    if spec.dead_letter:
                        stats.dead_letters += 1
                        self.dead.append(dead_letter_message(record) if spec.input_format == "message"
                                         else _dead_letter(record, decode))
                    elif skips:
                        stats.skipped += 1
                        if len(stats.errors) < MAX_EXCEPTIONS:
                            stats.errors.append(message)
                    else:
                        raise  # the loop fails the run on it
                    return None

        return careful

    def _record_error(self, position: int, error: Exception) -> FunctionRecordError:
        """The error failing the run on the record at ``position`` (made inside its ``except``)."""
        return FunctionRecordError(
            f"{self.spec.fqfn} failed on batch {self.batch_id}, partition {self.partition}, record {position}: "
            f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}", error)

    def run_table(self, records: Any) -> Any:
        """Run ``process_batch`` once on the records (see :func:`records_table`), a partition without
        records (a tick: its timers' batch) not at all; returns its result as a Table (None: no output).
        Raises :class:`FunctionRecordError` for a malformed record or a failing call."""
        where = f"batch {self.batch_id}, partition {self.partition}"
        try:
            table = records_table(records, self.spec.input_format)
        except FunctionRecordError as e:
            raise FunctionRecordError(f"{self.spec.fqfn} process_batch: {where}, {e}") from None
        self.stats.received = table.num_rows
        if self.timed is not None:  # before the call, as a record's time before process: timers check against it
            self.timed.observe_table(table)
        try:
            output = batch_output(self.process(table, self.context)) if table.num_rows else None
        except Exception as e:  # noqa: BLE001 - user code: any error is reported with where it happened
            self.stats.user_exception(f"{where}: {type(e).__name__}: {e}")
            raise FunctionRecordError(
                f"{self.spec.fqfn} process_batch failed on {where} ({table.num_rows} records): "
                f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}", e) from None
        self.stats.processed = table.num_rows
        return output

    def finish(self) -> None:
        """After the records: fire the due timers and windows, delete expired keys, and write the time
        state into the buffer. A failure there (``on_timer``, a window's call) is a
        :class:`FunctionRecordError`."""
        timed, stats = self.timed, self.stats
        if timed is None:
            return
        self.context.position = -1  # windows and on_timer see no current record
        try:
            timed.finish()
        except Exception as e:  # noqa: BLE001 - user code (on_timer, a window's process): reported with where
            raise FunctionRecordError(
                f"{self.spec.fqfn} failed firing timers of batch {self.batch_id}, partition {self.partition}: "
                f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}", e) from None
        stats.watermark = timed.time.watermark
        stats.next_event, stats.next_processing = timed.time.next_event, timed.time.next_processing

    def output(self, table: Any = None, *, topic: bool = False) -> Any:
        """The run's output records: the records' (``table``: ``process_batch``'s) then what fired, as the
        output holds them (``topic``: message records), a list, or a Table for ``process_batch`` to a
        path (None: none)."""
        wrap = self.wrap
        if self.kind != BATCH:
            return self.outputs + [wrap(r) for r in self.fired]
        if topic:  # a topic holds messages: each row is one, as a per-record function's result
            return [wrap(r) for r in [*(table.to_pylist() if table is not None else []), *self.fired]] or None
        if not self.fired:
            return table
        import pyarrow as pa

        extra = batch_output([r if isinstance(r, dict) else {"value": r} for r in self.fired])
        return extra if table is None else pa.concat_tables([table, extra], promote_options="default")


def _identity(value: Any) -> Any:
    return value


def _native(native: Callable[[Any], Any], value: Any, context: Any) -> Any:
    return native(value)


def run_partition(spec: ExecutorSpec, batch_id: int, partition: int, records: Iterable[Any],
                  keys: Iterable[str] = (), *, record_keys: list[Any] | None = None,
                  topics: list[Any] | None = None) -> PartitionStats:
    """Run the function over one partition of one batch (on a :class:`RecordPath`) and apply its state
    changes, their changelog and the (batch, partition) marker in one atomic write.

    ``keys``: the partition's distinct key-field values, prefetched in one bulk read;
    ``record_keys`` and ``topics``: each record's key and input file (for the Context's per-record
    methods; ``keys`` defaults to the distinct ``record_keys``).
    Raises :class:`FunctionRecordError` naming the record's position when the function raises,
    unless the spec handles failing records (``skip_errors``, ``max_retries``, ``dead_letter``,
    see :meth:`RecordPath.run_records`; a ``process_batch`` partition is skipped whole). With
    partition-owned state, a batch that finds the state changed since it read it (a REST write
    committed first) runs again.
    """
    if not isinstance(records, list) and not hasattr(records, "to_pylist"):
        records = list(records)  # a conflict runs the batch again (below); the record loop takes a list
    for _ in DEFAULT.bounded(attempts=20).attempts():
        store = spec.state_store().task(batch_id, partition, spec.state_parallelism)
        try:
            return _run_partition(spec, store, batch_id, partition, records, keys, record_keys, topics)
        except StateConflictError:
            continue  # a write committed since this task read the state (partition-owned state): again
    raise StateConflictError(f"{spec.fqfn} batch {batch_id}, partition {partition}: the state kept changing "
                             "under 20 runs of the batch")


def _run_partition(spec: ExecutorSpec, store: TaskState, batch_id: int, partition: int, records: Any,
                   keys: Iterable[str], record_keys: list[Any] | None, topics: list[Any] | None) -> PartitionStats:
    marker = f"{batch_id}-{partition}"
    sink = output_sink(spec, spec.output)
    if store.has_marker(marker):
        stats = PartitionStats(partition)
        stats.applied = False  # a replay of a partition that was already applied
        if spec.rows_schema is not None:  # the operator's replay gives the rows the first run kept
            stats.rows = sink.read(batch_id, partition)
        deliver_kept(spec, batch_id, partition)  # its Kafka records, unless Kafka has them already
        return stats
    process, kind = _cached_process(spec)
    careful = spec.careful and kind != BATCH
    state = (JournaledState if careful else BufferedState)(store.fetch_many, store.max_value_size, store.scan)
    if kind != BATCH:
        if record_keys is not None and not keys:
            keys = {k for k in record_keys if k is not None}
        keys = list(keys)  # read again by the time's prefetch
        try:  # the store checks the keys: once
            state.prefetch(keys)
        except InvalidArgumentError:  # a key the store refuses fails its own record (may be skipped): read the others
            state.prefetch([k for k in keys if is_valid_key(k)])
    source = RecordSource(batch_id, records, record_keys, topics, list(spec.inputs),
                          spec.user_config.get("eventTimeField"), spec.source_format)
    path = RecordPath(spec, batch_id, partition, state, source, process, kind)
    stats = path.stats
    table = None
    path.keep_time(spec, partition, keys)
    try:
        started = time.perf_counter()
        if kind == BATCH:
            table = path.run_table(records)
        else:
            path.run_records(records, record_keys, careful=careful)
        path.finish()
        stats.latency = time.perf_counter() - started
        output = path.output(table, topic=sink.topic)
        if spec.rows_schema is not None:
            output = stats.rows = _rows(path, output)
    except FunctionRecordError as e:
        if kind != BATCH or not spec.skip_errors:
            raise
        return _skip_batch(store, marker, stats, stats.received or len(records), e)  # process_batch: one unit
    stats.outputs = len(output) if output is not None else 0
    stats.metrics = path.context.metrics
    try:
        stats.applied = commit_run(path, store, output, published_targets(spec, path.context.published,
                                                                          path.context.get_logger()))
    except InvalidArgumentError as e:  # process_batch's incr_counters read nothing: a key holding bytes, an overflow
        if kind != BATCH:
            raise
        error = FunctionRecordError(f"{spec.fqfn} process_batch: the state changes of batch {batch_id}, partition "
                                    f"{partition} were refused (nothing written): {type(e).__name__}: {e}")
        if not spec.skip_errors:
            raise error from None  # a replay fails alike, and rewrites the same output file
        sink.discard(batch_id, partition)  # skipped: its outputs go too
        stats.processed = stats.outputs = 0
        return _skip_batch(store, marker, stats, len(records), error)
    if spec.rows_schema is not None and spec.run_id is None and batch_id >= 2:
        sink.discard(batch_id - 2, partition)  # Spark replays at most the batch after the last committed one
    if output is not None and spec.output == "console":
        rows = output if isinstance(output, list) else output.slice(0, 20).to_pylist()
        for record in rows[:20]:
            print(json.dumps(record, default=str))
    return stats


def commit_run(path: RecordPath, store: StateStore | TaskState, output: Any,
               targets: dict[tuple[str, str], list[Any]]) -> bool:
    """End a run of ``path`` (a micro-batch's partition, or a trigger's one record when its batch id is not an
    int): its ``output`` (records or a pyarrow Table; None for none), published and log ``targets`` and dead
    letters are written, then its state changes are applied in one atomic write with the marker
    ``"{batch}-{partition}"``. The files go first and a replay of a partition rewrites the same files, so a crash
    between the two leaves nothing twice; a trigger's files are new, and it has no marker. Returns False, having
    applied nothing, when the marker was already applied; raises as
    :meth:`~statekeep.state.base.StateStore.apply_batch` does (the files then stay, to be rewritten by a replay)."""
    spec = path.spec
    batch = (path.batch_id, path.partition) if isinstance(path.batch_id, int) else None
    context = path.context
    recorded = context.recorded_schemas or {}
    if path.registry is not None and any(recorded.get(k) != v for k, v in context.state_schemas.items()):
        # before the values: none is stored under a schema not recorded
        record_schemas(path.registry(), spec.tenant, spec.namespace, spec.name, context.state_schemas)

    def write(sink: Any, records: Any) -> None:
        if batch is None:
            sink.write_new(records, str(path.batch_id))
        else:
            sink.write(*batch, records)

    kafka = BatchOutputs(spec, batch)  # Kafka's records: kept now, delivered after the state commit
    if output is not None:
        if is_kafka(spec.output):
            kafka.add(str(spec.output), output)
        else:
            write(output_sink(spec, spec.output), output)
    files = {}
    for (name, kind), records in targets.items():
        if is_kafka(name):
            kafka.add(name, records)
        else:
            files[(name, kind)] = records
    if batch is None:
        write_targets(spec, files, origin=str(path.batch_id))
    else:
        write_targets(spec, files, *batch)
    if path.dead:
        if is_kafka(spec.dead_letter):
            kafka.add(str(spec.dead_letter), path.dead)
        else:
            write(output_sink(spec, spec.dead_letter, "dead"), path.dead)
    if spec.changelog_topic:  # KIP-813: the state changes, in the same Kafka transaction as the outputs
        kafka.add_records(spec.changelog_topic, *changelog_records(path.state.written(), spec.changelog_format))
    kafka.keep()
    applied = store.apply_batch(path.state.puts, path.state.counter_deltas,
                                marker=None if batch is None else f"{batch[0]}-{batch[1]}")
    kafka.deliver(applied)
    return applied


def _rows(path: RecordPath, output: Any) -> Any:
    """The operator's output rows (a pyarrow Table of its schema, None for none); a result that does not fit is
    the run's :class:`FunctionRecordError`."""
    from statekeep.functions.messaging.rows import rows_table

    try:
        return rows_table(output, path.spec.rows_schema)
    except InvalidArgumentError as e:
        raise FunctionRecordError(f"{path.spec.fqfn} batch {path.batch_id}, partition {path.partition}: {e}",
                                  e) from None


def _dead_letter(record: Any, decode: Callable[[Any], Any]) -> Any:
    """A failed record as the dead-letter output keeps it: its input value (the raw line if it
    does not decode)."""
    try:
        return decode(record)
    except Exception:  # noqa: BLE001 - a malformed record goes as it came
        return record


def records_table(values: Any, input_format: str) -> Any:
    """A partition's records (a pyarrow string array, or a list of str) as the ``pyarrow.Table``
    ``process_batch`` receives: JSON lines as one column per field (objects only; a line holding
    another JSON value becomes a row with that value in a ``value`` column), text as one ``value``
    column. Raises :class:`FunctionRecordError` naming the first malformed record's position."""
    import pyarrow as pa

    if input_format == "rows":  # the operator's: its DataFrame's columns, already a Table
        return values if isinstance(values, pa.Table) else pa.table({})
    if input_format == "message":  # Pulsar messages: a JSON file's line as JSON, other payloads as a str
        values = batch_lines([v for v in (values.to_pylist() if hasattr(values, "to_pylist") else values)
                              if v is not None])
        input_format = "json"
    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = pa.array(values, pa.large_string())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.large_string())
    values = values.drop_null()
    if input_format != "json":
        return pa.table({"value": values.cast(pa.string())})
    if len(values) == 0:
        return pa.table({})
    import pyarrow.compute as pc
    import pyarrow.json as pj

    # all lines joined into one buffer in C++ and parsed by Arrow's JSON reader: no Python per record
    lines = values.cast(pa.large_string())
    joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array([0, len(lines)], pa.int64()), lines),
                            pa.scalar("\n", pa.large_string()))
    # Arrow's reader takes a bare scalar line as an empty row: only lines that open an object go to it
    if pc.all(pc.starts_with(lines, "{")).as_py():
        try:
            table = pj.read_json(pa.BufferReader(joined[0].as_buffer()))
            if table.num_rows == len(lines):
                return table
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # malformed, or types that do not unify: line by line, for the exact error or table
    rows = []
    for position, line in enumerate(lines.to_pylist()):
        try:
            record = json.loads(line)
        except ValueError as e:
            raise FunctionRecordError(f"record {position}: {type(e).__name__}: {e}") from None
        rows.append(record if isinstance(record, dict) else {"value": record})
    columns = dict.fromkeys(name for row in rows for name in row)  # every field seen, not only the first row's
    try:
        return pa.table({name: [row.get(name) for row in rows] for name in columns})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise FunctionRecordError(f"the records do not form one table (a field with values of different "
                                  f"types?): {e}") from None


def batch_output(result: Any) -> Any:
    """``process_batch``'s result as a pyarrow Table (None: no output); TypeError if it is none of
    Table, RecordBatch, list of dicts or None."""
    import pyarrow as pa

    if result is None:
        return None
    if isinstance(result, pa.Table):
        return result
    if isinstance(result, pa.RecordBatch):
        return pa.Table.from_batches([result])
    if isinstance(result, list) and all(isinstance(row, dict) for row in result):
        columns = dict.fromkeys(name for row in result for name in row)
        return pa.table({name: [row.get(name) for row in result] for name in columns}) if result else None
    raise TypeError(f"process_batch returned {type(result).__name__}; it must return a pyarrow.Table, a "
                    "pyarrow.RecordBatch, a list of dicts, or None")


def _skip_batch(store: TaskState, marker: str, stats: PartitionStats, records: int, error: Exception) -> PartitionStats:
    """``--skip-errors`` for process_batch: the partition's batch is one unit, skipped whole; only its
    marker is written (a replay skips it again)."""
    stats.skipped = records
    stats.errors.append(str(error).split("\n")[0])
    stats.applied = store.apply_batch({}, {}, marker=marker)
    return stats


#: the Spark local properties a streaming query's tasks get: the micro-batch's id, and the query's id (kept in its
#: checkpoint: the same after a restart)
SPARK_BATCH_ID, SPARK_QUERY_ID = "streaming.sql.batchId", "sql.streaming.queryId"


def arrow_partition_runner(spec: ExecutorSpec, report: Callable[[dict[str, Any]], None] | None = None
                           ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function of a function's query (see :mod:`statekeep.functions.driver.plan`): one
    partition's record batches of one micro-batch in; out, the runner's stats row of the run, or the DataFrame
    operator's output rows (``spec.rows_schema``). A task takes its micro-batch's id from Spark (a batch
    DataFrame's: ``spec.run_id``), and a function keeping time its watermark before the batch from the committed
    state. ``report`` (an accumulator's ``add``) takes each run's stats row with its query's id (``query``) and
    batch (``batch``)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None  # mapInArrow runs this inside a Spark task
        batch_id = task_batch(spec, task)
        batch_spec = spec if spec.time is None else replace(  # its watermark, as the committed state holds it
            spec, watermark_previous=timerun.stored_watermark(spec.state_store(), batch_id))
        stats = _run_arrow(batch_spec, batch_id, task.partitionId(), batches)
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


def _run_arrow(spec: ExecutorSpec, batch_id: int, partition: int, batches: Iterable[Any]) -> PartitionStats:
    """:func:`run_partition` of one partition's record batches (columns ``__record``, ``__key``, and
    ``__topic`` where the spec asks for it)."""
    import pyarrow as pa

    if spec.input_format == "rows":
        return _run_rows(spec, batch_id, partition, list(batches))
    if _cached_process(spec)[1] == BATCH:  # the records stay in Arrow
        columns = [batch.column("__record") for batch in batches]
        records = pa.chunked_array(columns, pa.string()) if columns else pa.array([], pa.string())
        return run_partition(spec, batch_id, partition, records)
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
    return run_partition(spec, batch_id, partition, values, keys, record_keys=record_keys, topics=topics)


def _run_rows(spec: ExecutorSpec, batch_id: int, partition: int, batches: list[Any]) -> PartitionStats:
    """:func:`run_partition` of one partition of the DataFrame operator's ``rows`` input: its record batches'
    columns but statekeep's own (``__key``, ``__route``, ...) are the records, a dict per record (``process_batch``:
    the Table of them)."""
    import pyarrow as pa

    if not batches:
        return run_partition(spec, batch_id, partition, [])
    table = pa.Table.from_batches(batches)
    data = table.drop_columns([name for name in table.column_names if name.startswith("__")])
    if _cached_process(spec)[1] == BATCH:
        return run_partition(spec, batch_id, partition, data)
    record_keys = table.column("__key").to_pylist()
    keys = set(record_keys)
    keys.discard(None)
    return run_partition(spec, batch_id, partition, data.to_pylist(), keys, record_keys=record_keys)


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


@functools.cache
def _stats_schema() -> Any:
    import pyarrow as pa

    types = {"long": pa.int64(), "boolean": pa.bool_(), "string": pa.string(), "double": pa.float64()}
    return pa.schema([(name, types[kind]) for name, kind in STATS_COLUMNS])
