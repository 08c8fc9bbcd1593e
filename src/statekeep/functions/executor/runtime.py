"""Running a function over one partition of one micro-batch, on a Spark executor.

Exactly-once, and why it is cheap:

- Spark replays a failed micro-batch with the same batch id and the same records, and
  ``repartition(n, key)`` sends each record to the same partition again.
- A partition's state changes, their changelog records and the marker "(function, batch,
  partition) applied" are written in ONE atomic write (the run's
  :class:`~statekeep.state.transaction.KeyedTransaction`). A replayed partition whose marker exists
  is skipped; one whose write never happened is simply redone.
- Output records are kept before the state write, where a replay of (batch, partition) keeps them
  again, and delivered after it: the run's :class:`~statekeep.functions.executor.checkpoint.Checkpoint`
  orders the steps.
- Within the partition, state for all the batch's keys is read in one bulk read, the function
  runs against it in memory, and all changes go back in that one write: no store round trip
  per record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from statekeep.errors import InvalidArgumentError, StateConflictError
from statekeep.functions.config.loader import BATCH
from statekeep.functions.config.spec import ExecutorSpec, Layout
from statekeep.functions.executor.checkpoint import Checkpoint
from statekeep.functions.executor.collector import young_generation_only
from statekeep.functions.executor.record import RecordSource
from statekeep.functions.messaging.columns import MessageColumns
from statekeep.functions.executor.errors import FunctionRecordError
from statekeep.functions.executor.path import PartitionStats, RecordPath, _cached_process, _rows
from statekeep.functions.messaging.delivery import deliver_kept
from statekeep.functions.messaging.messages import output_sink, published_targets
from statekeep.retry import DEFAULT
from statekeep.state.base import TaskState
from statekeep.state.transaction import KeyedTransaction


def run_partition(spec: ExecutorSpec, batch_id: int, partition: int, records: Iterable[Any] | MessageColumns,
                  keys: Iterable[str] = (), *, record_keys: list[Any] | None = None,
                  topics: list[Any] | None = None, layout: Layout = Layout()) -> PartitionStats:
    """Run the function over one partition of one batch (on a :class:`RecordPath`) and apply its state
    changes, their changelog and the (batch, partition) marker in one atomic write. ``layout``: where the run
    stands in its query (see :class:`~statekeep.functions.config.spec.Layout`).

    ``records``: a list, Arrow data, or for a ``message`` input a
    :class:`~statekeep.functions.messaging.columns.MessageColumns` (or message records, made into one);
    ``keys``: the partition's distinct key-field values, prefetched in one bulk read;
    ``record_keys`` and ``topics``: each record's key and input file (for the Context's per-record
    methods; ``keys`` defaults to the distinct ``record_keys``); :class:`InvalidArgumentError` for record keys
    not one per record.
    Raises :class:`FunctionRecordError` naming the record's position when the function raises,
    unless the spec handles failing records (``skip_errors``, ``max_retries``, ``dead_letter``,
    see :meth:`RecordPath.run_records`; a ``process_batch`` partition is skipped whole). With
    partition-owned state, a batch that finds the state changed since it read it (a REST write
    committed first) runs again.
    """
    if not isinstance(records, (list, MessageColumns)) and not hasattr(records, "to_pylist"):
        records = list(records)  # a conflict runs the batch again (below); the record loop takes a list
    count = len(records)  # type: ignore[arg-type]  # a list or Arrow data by now
    if record_keys is not None and len(record_keys) != count:  # the Context reads a record's key by its position
        raise InvalidArgumentError(f"record_keys has {len(record_keys)} keys for {count} records")
    for _ in DEFAULT.bounded(attempts=20).attempts():
        store = spec.state_store().task(batch_id, partition, layout.partitions)
        try:
            with young_generation_only():  # the batch stays in memory until its commit (see collector)
                return _run_partition(spec, layout, store, batch_id, partition, records, keys, record_keys, topics)
        except StateConflictError:
            continue  # a write committed since this task read the state (partition-owned state): again
    raise StateConflictError(f"{spec.fqfn} batch {batch_id}, partition {partition}: the state kept changing "
                             "under 20 runs of the batch")


def _run_partition(spec: ExecutorSpec, layout: Layout, store: TaskState, batch_id: int, partition: int, records: Any,
                   keys: Iterable[str], record_keys: list[Any] | None, topics: list[Any] | None) -> PartitionStats:
    """The stages of a (batch, partition)'s run, in order: a replay of an applied one only hands over what it kept;
    else :func:`_open` (its transaction and record path), time, :func:`_process` (the function over the records),
    :func:`_commit` (the checkpoint), then :func:`_after` (housekeeping)."""
    sink = output_sink(spec, spec.output)
    if store.has_marker(f"{batch_id}-{partition}"):
        return _replayed(spec, sink, batch_id, partition)
    path, keys = _open(spec, store, batch_id, partition, records, keys, record_keys, topics)
    path.keep_time(layout, partition, keys)
    try:
        output = _process(path, record_keys, sink.topic)
    except FunctionRecordError as e:
        if path.kind != BATCH or not spec.skip_errors:
            raise
        return _skip_batch(store, path, path.stats.received or len(records), e)  # process_batch: one unit
    stats = path.stats
    stats.outputs = len(output) if output is not None else 0
    stats.metrics = path.context.metrics
    try:
        stats.applied = _commit(path, output)
    except InvalidArgumentError as e:  # process_batch's incr_counters read nothing: a key holding bytes, an overflow
        if path.kind != BATCH:
            raise
        error = FunctionRecordError(f"{spec.fqfn} process_batch: the state changes of batch {batch_id}, partition "
                                    f"{partition} were refused (nothing written): {type(e).__name__}: {e}")
        if not spec.skip_errors:
            raise error from None  # a replay fails alike, and rewrites the same output file
        sink.discard(batch_id, partition)  # skipped: its outputs go too
        stats.processed = stats.outputs = 0
        return _skip_batch(store, path, len(records), error)
    _after(spec, sink, batch_id, partition, output)
    return stats


def _replayed(spec: ExecutorSpec, sink: Any, batch_id: int, partition: int) -> PartitionStats:
    """A replay of a (batch, partition) whose marker is applied: nothing runs; what it kept is handed over."""
    stats = PartitionStats(partition)
    stats.applied = False
    if spec.rows_schema is not None:  # the operator's replay gives the rows the first run kept
        stats.rows = sink.read(batch_id, partition)
    deliver_kept(spec, batch_id, partition)  # its brokers' records, unless the brokers have them already
    return stats


def _open(spec: ExecutorSpec, store: TaskState, batch_id: int, partition: int, records: Any, keys: Iterable[str],
          record_keys: list[Any] | None, topics: list[Any] | None) -> tuple[RecordPath, list[Any]]:
    """The run's :class:`RecordPath` over a new :class:`KeyedTransaction` of ``store`` (journaled where the spec
    handles failing records), and the keys its state reads in one bulk read at the first read."""
    process, kind = _cached_process(spec)
    txn = KeyedTransaction.begin(store, careful=spec.careful and kind != BATCH)
    if kind != BATCH:
        if record_keys is not None and not keys:
            keys = {k for k in record_keys if k is not None}
        keys = list(keys)  # read again by the time's prefetch
        txn.state.prefetch_later(keys)  # one bulk read, unless the function reads no plain key
    source = RecordSource(batch_id, records, record_keys, topics, list(spec.inputs),
                          spec.user_config.get("eventTimeField"), spec.format)
    return RecordPath(spec, batch_id, partition, txn, source, process, kind), list(keys)


def _process(path: RecordPath, record_keys: list[Any] | None, topic: bool) -> Any:
    """The function over the run's records, timers and windows; its output as the output holds it (``topic``:
    message records; the operator's: the rows of its schema)."""
    started = time.perf_counter()
    assert path.source is not None  # _open gave it one
    careful = path.txn.state.journal is not None  # journaled: the spec handles failing records (see _open)
    table = path.run(path.source.records, record_keys, careful=careful)
    path.stats.latency = time.perf_counter() - started
    output = path.output(table, topic=topic)
    if path.spec.rows_schema is not None:
        output = path.stats.rows = _rows(path, output)
    return output


def _commit(path: RecordPath, output: Any) -> bool:
    """The run's :class:`Checkpoint`: state and marker committed, outputs kept before and handed over after."""
    context = path.context
    return Checkpoint(path, output, published_targets(path.spec, context.published, context.get_logger())).commit()


def _after(spec: ExecutorSpec, sink: Any, batch_id: int, partition: int, output: Any) -> None:
    """After the commit: the operator's kept rows of an older batch go (Spark replays at most the batch after the
    last committed one); a console output is printed."""
    if spec.rows_schema is not None and spec.run_id is None and batch_id >= 2:
        sink.discard(batch_id - 2, partition)
    if output is not None and spec.output == "console":
        rows = output if isinstance(output, list) else output.slice(0, 20).to_pylist()
        for record in rows[:20]:
            print(json.dumps(record, default=str))


def _skip_batch(store: TaskState, path: RecordPath, records: int, error: Exception) -> PartitionStats:
    """``--skip-errors`` for process_batch: the partition's batch is one unit, skipped whole; only its
    marker is written (a replay skips it again)."""
    stats = path.stats
    stats.skipped = records
    stats.errors.append(str(error).split("\n")[0])
    stats.applied = store.apply_batch({}, {}, marker=f"{path.batch_id}-{path.partition}")
    return stats
