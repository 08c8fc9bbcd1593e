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

import json
import logging
import os
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from statekeep.errors import StatekeepError
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
    """Compile a function file and return its ``process``; raises :class:`FunctionRecordError`
    (a clear message, not a stack trace) when the file has a syntax error or no ``process``."""
    namespace: dict[str, Any] = {"__name__": "statekeep_function", "__file__": filename}
    try:
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - running user code is the point
    except SyntaxError as e:
        raise FunctionRecordError(f"{filename}:{e.lineno}: syntax error: {e.msg}") from e
    process = namespace.get("process")
    if not callable(process):
        raise FunctionRecordError(f"{filename} defines no function 'process(input, context)'")
    return process


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


def write_outputs(directory: str, batch_id: int, partition: int, outputs: list[Any], fmt: str) -> None:
    """Write a partition's outputs under a name fixed by (batch, partition): a replay replaces the
    same file, so each output record exists once."""
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, f"batch-{batch_id:012d}-part-{partition:05d}.{fmt}")
    temp = os.path.join(directory, f".{os.path.basename(final)}.{os.getpid()}.tmp")
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [o if isinstance(o, dict) else {"value": o} for o in outputs]
        pq.write_table(pa.Table.from_pylist(rows), temp)
    else:
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


def arrow_partition_runner(spec: dict, batch_id: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function for one micro-batch: record batches in, one stats row out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        partition = TaskContext.get().partitionId()
        values: list[Any] = []
        keys: set[str] = set()
        for batch in batches:
            values.extend(batch.column("__record").to_pylist())
            keys.update(batch.column("__key").to_pylist())
        keys.discard(None)
        stats = run_partition(spec, batch_id, partition, values, keys)
        yield pa.RecordBatch.from_pylist([{
            "partition": partition, "processed": stats.processed, "skipped": stats.skipped,
            "outputs": stats.outputs, "applied": stats.applied, "error": "\n".join(stats.errors) or None,
        }])

    return run
