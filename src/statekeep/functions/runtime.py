"""Running a function over one partition of one micro-batch, on a Spark executor.

Exactly-once, and why it is cheap:

- Spark replays a failed micro-batch with the same batch id and the same records, and
  ``repartition(n, key)`` sends each record to the same partition again.
- A partition's state changes, their changelog records and the marker "(function, batch,
  partition) applied" are written in ONE atomic write (:meth:`StateStore.apply_batch`). A replayed
  partition whose marker exists is skipped; one whose write never happened is simply redone.
- Output records are written before the state write, to a file a replay of (batch, partition)
  writes again (:mod:`statekeep.functions.sink`), so each record lands once.
- Within the partition, state for all the batch's keys is read in one bulk read, the function
  runs against it in memory, and all changes go back in that one write: no store round trip
  per record.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from statekeep.errors import InvalidArgumentError, StateConflictError, StatekeepError
from statekeep.functions.context import Context, RecordSource, is_valid_key
from statekeep.state.buffer import BufferedState, JournaledState
from statekeep.functions import timerun
from statekeep.functions.spec import ExecutorSpec
from statekeep.functions.jsonscan import loads_at
from statekeep.functions.loader import BATCH, NATIVE, FunctionLoadError, cached_function
from statekeep.functions.messages import (batch_lines, dead_letter_message, function_logger, message_decoder,
                                          output_wrapper)
from statekeep.functions.sink import output_sink, write_published
from statekeep.retry import DEFAULT
from statekeep.state.base import StateStore, TaskState

log = logging.getLogger(__name__)

# per (batch, partition): counts, the time spent in the function (s), user metrics and latest
# exceptions as JSON; the driver sums them into the function's stats (statekeep.functions.stats)
STATS_SCHEMA = ("partition long, processed long, skipped long, outputs long, applied boolean, error string, "
                "received long, user_exceptions long, dead_letters long, latency double, metrics string, "
                "exceptions string, watermark long, next_event long, next_processing long")
MAX_EXCEPTIONS = 10


class FunctionRecordError(StatekeepError):
    """A function raised on a record; the message names the record's position."""


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

    def user_exception(self, message: str) -> None:
        self.user_exceptions += 1
        self.exceptions.append([message, int(time.time() * 1000)])
        del self.exceptions[:-MAX_EXCEPTIONS]


_cache_lock = threading.Lock()
_stores: dict[str, StateStore] = {}


def _cached_process(spec: ExecutorSpec) -> tuple[Callable[..., Any], str]:
    """(entry point, kind) of the spec's code, loaded once per executor process (the loader's cache)."""
    try:
        return cached_function(spec["code"], spec.get("py_name", "<function>"), spec.get("class_name"))
    except FunctionLoadError as e:
        raise FunctionRecordError(str(e)) from e


def make_context(spec: ExecutorSpec, state: BufferedState, partition: int,
                 source: RecordSource | None = None) -> Context:
    """The Context of one (batch, partition) from the executor spec."""
    return Context(spec["tenant"], spec["namespace"], spec["name"], state, spec.get("user_config"),
                   function_logger(spec, partition), function_id=spec.get("function_id", ""),
                   function_version=spec.get("function_version", 0),
                   instance_id=partition, inputs=spec.get("inputs"), output=spec.get("output"),
                   secrets=spec.get("secrets"), source=source, output_serde=spec.get("output_serde"))


class RecordPath:
    """How a partition's records reach its function: the one path of the Spark loops
    (:func:`run_partition`) and of :func:`statekeep.functions.lifecycle.trigger`.

    ``context`` is the partition's Context over ``source``; ``process(value, context)`` the entry point
    (a native ``process(value)`` adapted; ``process_batch(table, context)`` for a batch function);
    ``decode`` turns one record into the value ``process`` receives (a JSON line as ``json.loads``
    reads it, a Pulsar message through its input's serde, text as it is; for ``process_batch``,
    whose records go through :func:`records_table`: the identity). Building it loads the input serdes
    of the ``message`` format (:class:`FunctionLoadError` if one cannot be).
    """

    __slots__ = ("context", "process", "decode")

    def __init__(self, spec: ExecutorSpec, state: BufferedState, partition: int, source: RecordSource | None,
                 process: Callable[..., Any], kind: str) -> None:
        self.context = make_context(spec, state, partition, source)
        if kind == NATIVE:  # Pulsar's native function: process(input)
            native = process

            def process(value: Any, context: Any) -> Any:
                return native(value)
        self.process: Callable[..., Any] = process
        self.decode: Callable[[Any], Any] = (
            _identity if kind == BATCH
            else message_decoder(spec, self.context.get_current_message_topic_name)
            if spec["input_format"] == "message" else record_decoder(spec["input_format"]))

    def at(self, position: int) -> None:
        """Point the context's per-record methods (and the message serde's choice of input) at the
        source's record ``position`` (-1: none). A record's run is then
        ``process(decode(record), context)``, written out in the loops (no call per record), and for
        ``process_batch`` ``batch_output(process(records_table(records, format), context))``."""
        self.context._position = position


def _identity(value: Any) -> Any:
    return value


def _careful(spec: ExecutorSpec) -> bool:
    """Whether records need per-record error handling (rollback of a failed record's state)."""
    return bool(spec.get("skip_errors") or spec.get("max_retries") is not None or spec.get("dead_letter")
                or spec.get("timeout_ms"))


def cached_state_store(spec: ExecutorSpec) -> StateStore:
    """One provider per executor process and configuration (opening a store costs a session)."""
    from statekeep.state import open_provider

    key = json.dumps([spec["state_provider"], spec["state_config"], spec["tenant"], spec["namespace"], spec["name"]],
                     sort_keys=True)
    with _cache_lock:
        if key not in _stores:
            provider = open_provider(spec["state_provider"], spec["state_config"])
            _stores[key] = provider.get_state_store(spec["tenant"], spec["namespace"], spec["name"])
        return _stores[key]


def record_decoder(input_format: str) -> Callable[[Any], Any]:
    """For JSON lines: a function decoding one line exactly as ``json.loads`` does (same values,
    same errors); for other formats the identity."""
    if input_format != "json":
        return lambda value: value
    return loads_at


def run_partition(spec: ExecutorSpec, batch_id: int, partition: int, records: Iterable[Any],
                  keys: Iterable[str] = (), *, record_keys: list[Any] | None = None,
                  topics: list[Any] | None = None) -> PartitionStats:
    """Run the function over one partition of one batch and apply its state changes atomically.

    ``keys``: the partition's distinct key-field values, prefetched in one bulk read;
    ``record_keys`` and ``topics``: each record's key and input file (for the Context's per-record
    methods; ``keys`` defaults to the distinct ``record_keys``).
    Raises :class:`FunctionRecordError` naming the record's position when the function raises,
    unless the spec handles failing records (``skip_errors``, ``max_retries``, ``dead_letter``,
    see :func:`_run_careful`). With partition-owned state, a batch that finds the state changed
    since it read it (a REST write committed first) runs again.
    """
    if not isinstance(records, (list, tuple)) and not hasattr(records, "to_pylist"):
        records = list(records)  # a conflict runs the batch again (below)
    for _ in DEFAULT.bounded(attempts=20).attempts():
        store = cached_state_store(spec).task(batch_id, partition, spec.get("state_parallelism", 1))
        try:
            return _run_partition(spec, store, batch_id, partition, records, keys, record_keys, topics)
        except StateConflictError:
            continue  # a write committed since this task read the state (partition-owned state): again
    raise StateConflictError(f"{spec['tenant']}/{spec['namespace']}/{spec['name']} batch {batch_id}, partition "
                             f"{partition}: the state kept changing under 20 runs of the batch")


def _run_partition(spec: ExecutorSpec, store: TaskState, batch_id: int, partition: int, records: Any,
                   keys: Iterable[str], record_keys: list[Any] | None, topics: list[Any] | None) -> PartitionStats:
    stats = PartitionStats(partition)
    marker = f"{batch_id}-{partition}"
    if store.has_marker(marker):
        stats.applied = False  # a replay of a partition that was already applied
        return stats
    process, kind = _cached_process(spec)
    if kind == BATCH:
        return _run_batch(spec, batch_id, partition, records, store, marker, process, stats)
    if not isinstance(records, list):
        records = list(records)
    careful = _careful(spec)
    state = (JournaledState if careful else BufferedState)(store.fetch_many, store.max_value_size)
    if record_keys is not None and not keys:
        keys = {k for k in record_keys if k is not None}
    # a key the store would refuse is left out: the record using it fails on its own (and may be skipped)
    state.prefetch(k for k in keys if is_valid_key(k))
    source = RecordSource(batch_id, records, record_keys, topics, spec.get("inputs"),
                          spec.get("user_config", {}).get("eventTimeField"), spec.get("source_format", "json"))
    path = RecordPath(spec, state, partition, source, process, kind)
    context, process, decode = path.context, path.process, path.decode
    timed = timerun.start(spec, state, partition, context, process, lambda result: outputs.append(wrap(result)),
                          batch_id)
    if timed is not None:  # windows, timers, TTL: see statekeep.functions.timerun
        process = timed.process
        timed.prefetch(k for k in keys if is_valid_key(k))
    wrap = output_wrapper(spec, context)
    outputs: list[Any] = []
    dead: list[Any] = []
    stats.received = len(records)
    started = time.perf_counter()
    if careful:
        assert isinstance(state, JournaledState)  # careful runs journal, to roll back a failed record
        _run_careful(spec, batch_id, partition, records, process, decode, context, state, stats, outputs, dead, wrap)
    else:
        def one(position: int, record: Any) -> None:  # the loop's body, for add_all's records off its path
            context._position = position
            try:
                result = process(decode(record), context)
            except Exception as e:
                raise _record_error(spec, batch_id, partition, position, e) from None
            if result is not None:
                outputs.append(wrap(result))

        if timed is not None and timed.windows is not None and timed.windows.bulk and record_keys is not None:
            timed.windows.add_all(records, record_keys, decode, one)  # tumbling windows: one loop
        else:
            for position, record in enumerate(records):  # written out: no call per record beyond the function's
                context._position = position
                try:  # a malformed record is a failing record too
                    result = process(decode(record), context)
                except Exception as e:
                    raise _record_error(spec, batch_id, partition, position, e) from None
                if result is not None:
                    outputs.append(wrap(result))
        stats.processed = len(records)
    context._position = -1
    if timed is not None:
        _finish_time(spec, timed, batch_id, stats)
    stats.latency = time.perf_counter() - started
    stats.outputs = len(outputs)
    stats.metrics = context.metrics
    output_sink(spec, spec.get("output")).write(batch_id, partition, outputs)
    write_published(spec, context.published, context.get_logger(), batch_id, partition)
    if dead:
        output_sink(spec, spec["dead_letter"], "dead").write(batch_id, partition, dead)
    stats.applied = store.apply_batch(state.puts, state.counter_deltas, marker=marker)
    if spec.get("output") == "console":
        for record in outputs[:20]:
            print(json.dumps(record, default=str))
    return stats


def _record_error(spec: ExecutorSpec, batch_id: int, partition: int, position: int,
                  error: Exception) -> FunctionRecordError:
    """The error failing a partition on the record at ``position`` (raised inside its ``except``)."""
    return FunctionRecordError(
        f"{spec['tenant']}/{spec['namespace']}/{spec['name']} failed on batch {batch_id}, partition {partition}, "
        f"record {position}: {type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}")


def _run_careful(spec: ExecutorSpec, batch_id: int, partition: int, records: list[Any], process: Callable[..., Any],
                 decode: Callable[[Any], Any], context: Context, state: JournaledState, stats: PartitionStats,
                 outputs: list[Any], dead: list[Any], wrap: Callable[[Any], Any] = lambda result: result) -> None:
    """The per-record loop with error handling. A record whose ``process`` raises (or, with
    ``timeout_ms``, takes longer than that) is a user exception: its state changes and published
    messages are taken back, it is retried up to ``max_retries`` times, then written to the
    ``dead_letter`` output if set, else skipped (when ``max_retries`` is set or ``skip_errors``) or
    the partition fails with :class:`FunctionRecordError` (neither set: only a timeout asked for)."""
    retries = spec.get("max_retries") or 0
    timeout = spec.get("timeout_ms") or 0
    skips = spec.get("skip_errors") or spec.get("max_retries") is not None
    clock = time.perf_counter
    for position, record in enumerate(records):
        context._position = position
        attempt = 0
        while True:
            state.begin()
            mark = len(context.published)
            try:
                start = clock()
                result = process(decode(record), context)
                if timeout and (clock() - start) * 1000 > timeout:
                    raise ProcessingTimeout(f"processing took longer than timeoutMs={timeout}")
            except Exception as e:
                state.rollback()
                del context.published[mark:]
                where = f"batch {batch_id}, partition {partition}, record {position}"
                message = f"{where}: {type(e).__name__}: {e}"
                stats.user_exception(message)
                if attempt < retries:
                    attempt += 1
                    continue
                if spec.get("dead_letter"):
                    stats.dead_letters += 1
                    dead.append(dead_letter_message(record) if spec["input_format"] == "message"
                                else _dead_letter(record, decode))
                elif skips:
                    stats.skipped += 1
                    if len(stats.errors) < MAX_EXCEPTIONS:
                        stats.errors.append(message)
                else:
                    raise _record_error(spec, batch_id, partition, position, e) from None
                break
            stats.processed += 1
            if result is not None:
                outputs.append(wrap(result))
            break


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


def _run_batch(spec: ExecutorSpec, batch_id: int, partition: int, records: Any, store: TaskState, marker: str,
               process_batch: Callable[..., Any], stats: PartitionStats) -> PartitionStats:
    """run_partition for a ``process_batch`` function: one call for the whole partition."""
    where = f"batch {batch_id}, partition {partition}"
    fqfn = f"{spec['tenant']}/{spec['namespace']}/{spec['name']}"
    state = BufferedState(store.fetch_many, store.max_value_size)
    context = make_context(spec, state, partition)
    table = None
    output: Any = None  # a Table, or for a topic its message records
    sink = output_sink(spec, spec.get("output"))
    fired: list[Any] = []  # on_timer's outputs
    timed = timerun.start(spec, state, partition, context, process_batch, fired.append, batch_id)
    if timed is not None and timed.windows is not None:
        raise FunctionRecordError(f"{fqfn}: {timerun.BATCH_WINDOWS}")
    try:
        try:
            table = records_table(records, spec["input_format"])
        except FunctionRecordError as e:
            raise FunctionRecordError(f"{fqfn} process_batch: {where}, {e}") from None
        stats.received = table.num_rows
        started = time.perf_counter()
        try:
            # a partition without records (a tick: its timers' batch) calls on_timer only
            output = batch_output(process_batch(table, context)) if table.num_rows else None
            if timed is not None:
                timed.observe_table(table)
                _finish_time(spec, timed, batch_id, stats)
            if sink.topic:  # a topic holds messages: each row is one, as a per-record function's result
                wrap = output_wrapper(spec, context)
                rows = output.to_pylist() if output is not None else []
                output = [wrap(result) for result in [*rows, *fired]] or None
            elif timed is not None:
                output = with_fired(output, fired)
            stats.latency = time.perf_counter() - started
        except Exception as e:  # noqa: BLE001 - user code: any error is reported with where it happened
            stats.user_exception(f"{where}: {type(e).__name__}: {e}")
            raise FunctionRecordError(
                f"{fqfn} process_batch failed on {where} ({table.num_rows} records): "
                f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}") from None
    except FunctionRecordError as e:
        if not spec.get("skip_errors"):
            raise
        return _skip_batch(store, marker, stats, table.num_rows if table is not None else len(records), e)
    stats.processed = table.num_rows
    stats.outputs = len(output) if output is not None else 0
    stats.metrics = context.metrics
    if output is not None:
        sink.write(batch_id, partition, output)
    write_published(spec, context.published, context.get_logger(), batch_id, partition)
    try:
        stats.applied = store.apply_batch(state.puts, state.counter_deltas, marker=marker)
    except InvalidArgumentError as e:  # incr_counters read nothing: a key holding bytes, an overflow
        error = FunctionRecordError(f"{fqfn} process_batch: the state changes of {where} were refused "
                                    f"(nothing written): {type(e).__name__}: {e}")
        if not spec.get("skip_errors"):
            raise error from None  # a replay fails alike, and rewrites the same output file
        sink.discard(batch_id, partition)  # skipped: its outputs go too
        stats.processed = stats.outputs = 0
        return _skip_batch(store, marker, stats, table.num_rows, error)
    if output is not None and spec.get("output") == "console":
        for record in output.slice(0, 20).to_pylist():
            print(json.dumps(record, default=str))
    return stats


def _finish_time(spec: ExecutorSpec, timed: timerun.TimedRun, batch_id: int, stats: PartitionStats) -> None:
    """Fire the batch's due timers and windows; a failure there fails the partition's batch."""
    partition = stats.partition
    try:
        timed.finish()
        stats.watermark = timed.time.watermark
        stats.next_event, stats.next_processing = timed.time.next_event, timed.time.next_processing
    except Exception as e:  # noqa: BLE001 - user code (on_timer, a window's process): reported with where
        raise FunctionRecordError(
            f"{spec['tenant']}/{spec['namespace']}/{spec['name']} failed firing timers of batch {batch_id}, "
            f"partition {partition}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}") from None


def with_fired(output: Any, fired: list[Any]) -> Any:
    """``process_batch``'s output table with ``on_timer``'s output records appended."""
    if not fired:
        return output
    import pyarrow as pa

    extra = batch_output([r if isinstance(r, dict) else {"value": r} for r in fired])
    return extra if output is None else pa.concat_tables([output, extra], promote_options="default")


def _skip_batch(store: TaskState, marker: str, stats: PartitionStats, records: int, error: Exception) -> PartitionStats:
    """``--skip-errors`` for process_batch: the partition's batch is one unit, skipped whole; only its
    marker is written (a replay skips it again)."""
    stats.skipped = records
    stats.errors.append(str(error).split("\n")[0])
    stats.applied = store.apply_batch({}, {}, marker=marker)
    return stats


def arrow_partition_runner(spec: ExecutorSpec, batch_id: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function for one micro-batch: record batches in, one stats row out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None  # mapInArrow runs this inside a Spark task
        partition = task.partitionId()
        if _cached_process(spec)[1] == BATCH:  # the records stay in Arrow
            columns = [batch.column("__record") for batch in batches]
            records = pa.chunked_array(columns, pa.string()) if columns else pa.array([], pa.string())
            stats = run_partition(spec, batch_id, partition, records)
            yield _stats_batch(stats)
            return
        values: list[Any] = []
        record_keys: list[Any] = []
        topics: list[Any] | None = [] if spec.get("topic_column") else None
        for batch in batches:
            values.extend(batch.column("__record").to_pylist())
            record_keys.extend(batch.column("__key").to_pylist())
            if topics is not None:
                topics.extend(batch.column("__topic").to_pylist())
        if spec.get("time") and None in values:  # a partition's tick (timerun.with_ticks) is no record
            kept = [i for i, value in enumerate(values) if value is not None]
            values, record_keys = [values[i] for i in kept], [record_keys[i] for i in kept]
            topics = None if topics is None else [topics[i] for i in kept]
        keys = set(record_keys)
        keys.discard(None)
        stats = run_partition(spec, batch_id, partition, values, keys, record_keys=record_keys, topics=topics)
        yield _stats_batch(stats)

    return run


def _stats_batch(stats: PartitionStats) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pylist([{
        "partition": stats.partition, "processed": stats.processed, "skipped": stats.skipped,
        "outputs": stats.outputs, "applied": stats.applied, "error": "\n".join(stats.errors) or None,
        "received": stats.received, "user_exceptions": stats.user_exceptions, "dead_letters": stats.dead_letters,
        "latency": stats.latency, "metrics": json.dumps(stats.metrics) if stats.metrics else None,
        "exceptions": json.dumps(stats.exceptions) if stats.exceptions else None, "watermark": stats.watermark,
        "next_event": stats.next_event, "next_processing": stats.next_processing,
    }], schema=_stats_schema())


def _stats_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("partition", pa.int64()), ("processed", pa.int64()), ("skipped", pa.int64()),
                      ("outputs", pa.int64()), ("applied", pa.bool_()), ("error", pa.string()),
                      ("received", pa.int64()), ("user_exceptions", pa.int64()), ("dead_letters", pa.int64()),
                      ("latency", pa.float64()), ("metrics", pa.string()), ("exceptions", pa.string()),
                      ("watermark", pa.int64()), ("next_event", pa.int64()), ("next_processing", pa.int64())])
