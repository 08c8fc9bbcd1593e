"""Running a function over one partition of one micro-batch, on a Spark executor.

Exactly-once, and why it is cheap:

- Spark replays a failed micro-batch with the same batch id and the same records, and
  ``repartition(n, key)`` sends each record to the same partition again.
- A partition's state changes, their changelog records and the marker "(function, batch,
  partition) applied" are written in ONE atomic write (:meth:`StateStore.apply_batch`). A replayed
  partition whose marker exists is skipped; one whose write never happened is simply redone.
- Output records are written to a file named after (batch, partition), by write-to-temp then
  rename, before the state write. A replay writes the same name again, so each record lands once.
- Within the partition, state for all the batch's keys is read in one bulk read, the function
  runs against it in memory, and all changes go back in that one write: no store round trip
  per record.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import traceback
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from statekeep.errors import InvalidArgumentError, StatekeepError
from statekeep.functions.context import BufferedState, Context, is_valid_key

log = logging.getLogger(__name__)

STATS_SCHEMA = "partition long, processed long, skipped long, outputs long, applied boolean, error string"


class FunctionRecordError(StatekeepError):
    """A function raised on a record; the message names the record's position."""


@dataclass
class PartitionStats:
    partition: int
    processed: int = 0
    skipped: int = 0
    outputs: int = 0
    applied: bool = True
    errors: list[str] = field(default_factory=list)


def load_process(source: str, filename: str = "<function>") -> Callable[[Any, Context], Any]:
    """Compile a function file and return its ``process_batch`` if it defines one (see
    :func:`is_batch_function`), else its ``process``; raises :class:`FunctionRecordError` (a clear
    message, not a stack trace) when the file has a syntax error or defines neither."""
    namespace: dict[str, Any] = {"__name__": "statekeep_function", "__file__": filename}
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - running user code is the point
    except SyntaxError as e:
        raise FunctionRecordError(f"{filename}:{e.lineno}: syntax error: {e.msg}") from e
    process_batch = namespace.get("process_batch")
    if callable(process_batch):
        _batch_functions.add(process_batch)
        return process_batch
    process = namespace.get("process")
    if not callable(process):
        raise FunctionRecordError(f"{filename} defines no function 'process(input, context)' "
                                  "nor 'process_batch(records, context)'")
    return process


_batch_functions: weakref.WeakSet = weakref.WeakSet()


def is_batch_function(function: Callable) -> bool:
    """Whether ``function`` (from :func:`load_process`) is a ``process_batch(records, context)``."""
    return function in _batch_functions


_cache_lock = threading.Lock()
_loaded: dict[str, Callable] = {}
_stores: dict[str, Any] = {}


def _cached_process(spec: dict) -> Callable:
    key = spec["code"]
    with _cache_lock:
        if key not in _loaded:
            _loaded[key] = load_process(spec["code"], spec.get("py_name", "<function>"))
        return _loaded[key]


def _cached_state_store(spec: dict):
    """One provider per executor process and configuration (opening a store costs a session)."""
    from statekeep.state import open_provider

    key = json.dumps([spec["state_provider"], spec["state_config"], spec["tenant"], spec["namespace"], spec["name"]],
                     sort_keys=True)
    with _cache_lock:
        if key not in _stores:
            provider = open_provider(spec["state_provider"], spec["state_config"])
            _stores[key] = provider.get_state_store(spec["tenant"], spec["namespace"], spec["name"])
        return _stores[key]


_scan_json = json.scanner.make_scanner(json.JSONDecoder())  # what json.loads runs, minus its per-call checks


def record_decoder(input_format: str) -> Callable[[Any], Any]:
    """For JSON lines: a function decoding one line exactly as ``json.loads`` does (same values,
    same errors); for other formats the identity."""
    if input_format != "json":
        return lambda value: value
    scan, loads = _scan_json, json.loads

    def decode(line: Any) -> Any:
        # fast path: a str holding exactly one JSON value, no surrounding whitespace; anything else
        # (whitespace, bytes, malformed input) goes through json.loads for its exact value or error
        try:
            record, end = scan(line, 0)
        except Exception:
            return loads(line)
        return record if end == len(line) else loads(line)

    return decode


def write_outputs(directory: str, batch_id: int, partition: int, outputs: Any, fmt: str) -> None:
    """Write a partition's outputs (a list of records, or a pyarrow Table) under a name fixed by
    (batch, partition): a replay replaces the same file, so each output record exists once."""
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, f"batch-{batch_id:012d}-part-{partition:05d}.{fmt}")
    temp = os.path.join(directory, f".{os.path.basename(final)}.{os.getpid()}.tmp")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not isinstance(outputs, pa.Table):
            outputs = pa.Table.from_pylist([o if isinstance(o, dict) else {"value": o} for o in outputs])
        pq.write_table(outputs, temp)
    else:
        if not isinstance(outputs, list):
            outputs = outputs.to_pylist()
        with open(temp, "w", encoding="utf-8") as out:
            for record in outputs:
                out.write(json.dumps(record, separators=(",", ":"), default=str))
                out.write("\n")
            out.flush()
            os.fsync(out.fileno())
    os.replace(temp, final)


def run_partition(spec: dict, batch_id: int, partition: int, records: Iterable[Any],
                  keys: Iterable[str] = ()) -> PartitionStats:
    """Run the function over one partition of one batch and apply its state changes atomically.

    ``keys``: the partition's distinct key-field values, prefetched in one bulk read.
    Raises :class:`FunctionRecordError` naming the record's position when the function raises
    (unless ``spec["skip_errors"]``: then the record is skipped and counted).
    """
    stats = PartitionStats(partition)
    store = _cached_state_store(spec)
    marker = f"{batch_id}-{partition}"
    if store.has_marker(marker):
        stats.applied = False  # a replay of a partition that was already applied
        return stats
    process = _cached_process(spec)
    if is_batch_function(process):
        return _run_batch(spec, batch_id, partition, records, store, marker, process, stats)
    state = BufferedState(store.fetch_many, store.max_value_size)
    # a key the store would refuse is left out: the record using it fails on its own (and may be skipped)
    state.prefetch(k for k in keys if is_valid_key(k))
    context = Context(spec["tenant"], spec["namespace"], spec["name"], state, spec.get("user_config"))
    decode = record_decoder(spec["input_format"])
    outputs: list[Any] = []
    for position, record in enumerate(records):
        try:  # a malformed record is a failing record too
            result = process(decode(record), context)
        except Exception as e:
            where = f"batch {batch_id}, partition {partition}, record {position}"
            if spec.get("skip_errors"):
                stats.skipped += 1
                if len(stats.errors) < 10:
                    stats.errors.append(f"{where}: {type(e).__name__}: {e}")
                continue
            raise FunctionRecordError(
                f"{spec['tenant']}/{spec['namespace']}/{spec['name']} failed on {where}: "
                f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}") from None
        stats.processed += 1
        if result is not None:
            outputs.append(result)
    stats.outputs = len(outputs)
    if spec.get("output") and spec["output"] != "console":
        write_outputs(spec["output"], batch_id, partition, outputs, spec.get("output_format", "jsonl"))
    stats.applied = store.apply_batch(state.puts, state.counter_deltas, marker=marker)
    if spec.get("output") == "console":
        for record in outputs[:20]:
            print(json.dumps(record, default=str))
    return stats


def records_table(values: Any, input_format: str) -> Any:
    """A partition's records (a pyarrow string array, or a list of str) as the ``pyarrow.Table``
    ``process_batch`` receives: JSON lines as one column per field (objects only; a line holding
    another JSON value becomes a row with that value in a ``value`` column), text as one ``value``
    column. Raises :class:`FunctionRecordError` naming the first malformed record's position."""
    import pyarrow as pa

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


def _batch_output(result: Any) -> Any:
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


def _run_batch(spec: dict, batch_id: int, partition: int, records: Any, store: Any, marker: str,
               process_batch: Callable, stats: PartitionStats) -> PartitionStats:
    """run_partition for a ``process_batch`` function: one call for the whole partition."""
    where = f"batch {batch_id}, partition {partition}"
    fqfn = f"{spec['tenant']}/{spec['namespace']}/{spec['name']}"
    state = BufferedState(store.fetch_many, store.max_value_size)
    context = Context(spec["tenant"], spec["namespace"], spec["name"], state, spec.get("user_config"))
    table, output = None, None
    try:
        try:
            table = records_table(records, spec["input_format"])
        except FunctionRecordError as e:
            raise FunctionRecordError(f"{fqfn} process_batch: {where}, {e}") from None
        try:
            output = _batch_output(process_batch(table, context))
        except Exception as e:  # noqa: BLE001 - user code: any error is reported with where it happened
            raise FunctionRecordError(
                f"{fqfn} process_batch failed on {where} ({table.num_rows} records): "
                f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}") from None
    except FunctionRecordError as e:
        if not spec.get("skip_errors"):
            raise
        return _skip_batch(store, marker, stats, table.num_rows if table is not None else len(records), e)
    stats.processed = table.num_rows
    stats.outputs = output.num_rows if output is not None else 0
    if output is not None and spec.get("output") and spec["output"] != "console":
        write_outputs(spec["output"], batch_id, partition, output, spec.get("output_format", "jsonl"))
    try:
        stats.applied = store.apply_batch(state.puts, state.counter_deltas, marker=marker)
    except InvalidArgumentError as e:  # incr_counters read nothing: a key holding bytes, an overflow
        error = FunctionRecordError(f"{fqfn} process_batch: the state changes of {where} were refused "
                                    f"(nothing written): {type(e).__name__}: {e}")
        if not spec.get("skip_errors"):
            raise error from None  # a replay fails alike, and rewrites the same output file
        if output is not None and spec.get("output") and spec["output"] != "console":
            fmt = spec.get("output_format", "jsonl")  # skipped: its outputs go too
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(spec["output"], f"batch-{batch_id:012d}-part-{partition:05d}.{fmt}"))
        stats.processed = stats.outputs = 0
        return _skip_batch(store, marker, stats, table.num_rows, error)
    if output is not None and spec.get("output") == "console":
        for record in output.slice(0, 20).to_pylist():
            print(json.dumps(record, default=str))
    return stats


def _skip_batch(store: Any, marker: str, stats: PartitionStats, records: int, error: Exception) -> PartitionStats:
    """``--skip-errors`` for process_batch: the partition's batch is one unit, skipped whole; only its
    marker is written (a replay skips it again)."""
    stats.skipped = records
    stats.errors.append(str(error).split("\n")[0])
    stats.applied = store.apply_batch({}, {}, marker=marker)
    return stats


def arrow_partition_runner(spec: dict, batch_id: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function for one micro-batch: record batches in, one stats row out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        if is_batch_function(_cached_process(spec)):  # the records stay in Arrow
            columns = [batch.column("__record") for batch in batches]
            records = pa.chunked_array(columns, pa.string()) if columns else pa.array([], pa.string())
            stats = run_partition(spec, batch_id, partition, records)
            yield _stats_batch(stats)
            return
        values: list[Any] = []
        keys: set[str] = set()
        for batch in batches:
            values.extend(batch.column("__record").to_pylist())
            keys.update(batch.column("__key").to_pylist())
        keys.discard(None)
        stats = run_partition(spec, batch_id, partition, values, keys)
        yield _stats_batch(stats)

    return run


def _stats_batch(stats: PartitionStats) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_pylist([{
        "partition": stats.partition, "processed": stats.processed, "skipped": stats.skipped,
        "outputs": stats.outputs, "applied": stats.applied, "error": "\n".join(stats.errors) or None,
    }])
