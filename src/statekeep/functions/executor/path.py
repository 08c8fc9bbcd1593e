"""One (batch, partition) run of a function, from its records to its outputs: :class:`RecordPath`, the one record
path of every entry point and of a trigger's one record, with its statistics (:class:`PartitionStats`) and errors
(:class:`FunctionRecordError`). :mod:`statekeep.functions.executor.runtime` runs it over a micro-batch's partition
and commits it."""

from __future__ import annotations

import functools
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.loader import BATCH, NATIVE, FunctionLoadError, cached_function, entry_point
from statekeep.functions.config.spec import ExecutorSpec, Layout
from statekeep.functions.executor.context import Context
from statekeep.functions.executor.record import RecordSource
from statekeep.functions.messaging.columns import MessageColumns
from statekeep.functions.executor.errors import FunctionRecordError, ProcessingTimeout
from statekeep.functions.executor.tables import batch_output, records_table
from statekeep.functions.messaging.jsonscan import loads_at
from statekeep.functions.messaging.messages import dead_letter_message, function_logger, message_decoder, output_wrapper
from statekeep.functions.windowing import timerun
from statekeep.lru import BoundedLRU
from statekeep.metadata import MetadataStore
from statekeep.state.buffer import JournaledState
from statekeep.state.schemas import read_schemas, registry_store
from statekeep.state.keys import valid_key
from statekeep.state.transaction import KeyedTransaction

MAX_EXCEPTIONS = 10


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
    :func:`records_table` for ``process_batch``), state (``txn``, the batch's keyed-state transaction, which the
    caller prefetches and a :class:`~statekeep.functions.executor.checkpoint.Checkpoint` commits), time
    (:meth:`keep_time`), the function (:meth:`run_records` through the one per-record :meth:`loop`,
    :meth:`run_table`, then :meth:`finish`), outputs (:attr:`outputs` as the output
    holds them, :attr:`fired` by timers and windows, :attr:`dead` letters; :meth:`output`) and errors
    (:class:`FunctionRecordError` naming the record, or the spec's retries, skips and dead letters).
    ``wrap=False`` keeps results as returned (the trigger's answer). :class:`FunctionLoadError` if a
    ``message`` input's serde cannot be loaded.
    """

    __slots__ = ("spec", "batch_id", "partition", "txn", "state", "context", "kind", "user_process", "process",
                 "source", "decode", "wrap", "timed", "outputs", "fired", "dead", "stats", "registry")

    def __init__(self, spec: ExecutorSpec, batch_id: int | str, partition: int, txn: KeyedTransaction,
                 source: RecordSource | None, process: Callable[..., Any], kind: str, *, wrap: bool = True) -> None:
        self.spec, self.batch_id, self.partition, self.txn, self.kind = spec, batch_id, partition, txn, kind
        self.state = txn.state
        self.context = context = Context(
            spec.tenant, spec.namespace, spec.name, txn, spec.user_config, function_logger(spec, partition),
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
        self.source = source
        self.decode: Callable[[Any], Any] = (
            _identity if kind == BATCH
            else message_decoder(spec, context.get_current_message_topic_name, _messages(source),
                                 lambda: context.position)
            if spec.format.message else loads_at if spec.format.json else _identity)
        self.wrap: Callable[[Any], Any] = output_wrapper(spec, context) if wrap else _identity
        self.timed: timerun.TimedRun | None = None
        self.outputs: list[Any] = []
        self.fired: list[Any] = []
        self.dead: list[Any] = []
        self.stats = PartitionStats(partition)

    def _recorded_schemas(self) -> dict[str, dict[str, Any]]:
        spec = self.spec
        return {} if self.registry is None else read_schemas(self.registry(), spec.tenant, spec.namespace, spec.name)

    def keep_time(self, layout: Layout, partition: int, keys: Iterable[Any] = ()) -> None:
        """Wire the function's time in, if it keeps any (``spec.time``): ``layout`` is the run's (its key groups,
        partitions and watermark before the batch) and ``partition`` the one whose key groups this run owns;
        ``keys``' time entries are read in the batch's bulk read. :class:`FunctionRecordError` for a windowed
        ``process_batch``."""
        spec = self.spec
        if spec.time is None:
            return
        timed = timerun.TimedRun(spec, layout, self.txn, partition, self.context, self.user_process,
                                 self.fired.append, self.batch_id if isinstance(self.batch_id, int) else None)
        if self.kind == BATCH and timed.windows is not None:
            raise FunctionRecordError(f"{spec.fqfn}: {timerun.BATCH_WINDOWS}")
        timed.prefetch(k for k in keys if valid_key(k))
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
        if careful:  # the careful call decodes and wraps: a malformed record fails in it
            self.loop(records, self._careful(), _identity, _identity)
        elif timed is not None and timed.windows is not None and timed.windows.bulk and record_keys is not None:
            process, observe = timed.windows.bulk_process(record_keys, self.process)
            self.loop(records, process, self.decode)
            observe()
        else:
            self.loop(records, self.process, self.decode)
        stats.processed += len(records) - (stats.skipped + stats.dead_letters - given_up)
        self.context.position = -1

    def loop(self, records: list[Any], process: Callable[[Any, Any], Any], decode: Callable[[Any], Any],
             wrap: Callable[[Any], Any] | None = None) -> None:
        """THE per-record loop: ``process(decode(record), context)`` for each record, in order, with
        ``context.position`` its position; a result that is not None is an output record (``wrap``, by default
        :attr:`wrap`, makes it one). The first record whose decode, call or wrap raises (a property that is not
        UTF-8) fails the run: :class:`FunctionRecordError` naming it."""
        context, append = self.context, self.outputs.append
        wrap = self.wrap if wrap is None else wrap
        for position, record in enumerate(records):  # written out: no call per record beyond the function's
            context.position = position
            try:  # a malformed record is a failing record too
                result = process(decode(record), context)
                if result is not None:
                    append(wrap(result))
            except Exception as e:
                raise self._record_error(position, e) from None

    def _careful(self) -> Callable[[Any, Any], Any]:
        """The per-record call of a careful run (see :meth:`run_records`), given the record undecoded: a user
        exception is rolled back and retried, then dead-lettered or skipped (None: no output), or raised."""
        spec, stats, state, process, decode, wrap = (self.spec, self.stats, self.state, self.process, self.decode,
                                                     self.wrap)
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
                    return None if result is None else wrap(result)
                except Exception as e:
                    state.rollback()
                    del context.published[mark:]
                    message = f"{self._where(context.position)}: {type(e).__name__}: {e}"
                    stats.user_exception(message)
                    if attempt < retries:
                        attempt += 1
                        continue
                    if spec.dead_letter:
                        stats.dead_letters += 1
                        self.dead.append(dead_letter_message(_messages(self.source), context.position)
                                         if spec.format.message else _dead_letter(record, decode))
                    elif skips:
                        stats.skipped += 1
                        if len(stats.errors) < MAX_EXCEPTIONS:
                            stats.errors.append(message)
                    else:
                        raise  # the loop fails the run on it
                    return None

        return careful

    def _where(self, position: int) -> str:
        """The record at ``position``, as an error names it: its batch and task partition, then, for a Kafka
        message, its topic, partition and offset (else its place in the batch)."""
        where = f"batch {self.batch_id}, partition {self.partition}, "
        source = self.source
        if source is None or source.messages is None or source.messages.offsets is None:
            return where + f"record {position}"
        return where + f"the message of {self.context.get_current_message_topic_name()} at " \
                       f"{source.messages.where(position)}"

    def _record_error(self, position: int, error: Exception) -> FunctionRecordError:
        """The error failing the run on the record at ``position`` (made inside its ``except``)."""
        return FunctionRecordError(
            f"{self.spec.fqfn} failed on {self._where(position)}: "
            f"{type(error).__name__}: {error}\n{traceback.format_exc(limit=3)}", error)

    def run_table(self, records: Any) -> Any:
        """Run ``process_batch`` once on the records (see :func:`records_table`), a partition without
        records (a tick: its timers' batch) not at all; returns its result as a Table (None: no output).
        Raises :class:`FunctionRecordError` for a malformed record or a failing call."""
        where = f"batch {self.batch_id}, partition {self.partition}"
        try:
            table = records_table(_messages(self.source) if self.spec.format.message else records, self.spec.format)
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

    def run(self, records: Any, record_keys: list[Any] | None = None, *, careful: bool = False) -> Any:
        """The run's records through the function and then :meth:`finish`: :meth:`run_table` for ``process_batch``
        (its result returned, a Table or None), else :meth:`run_records` (None returned)."""
        table = self.run_table(records) if self.kind == BATCH else None
        if self.kind != BATCH:
            self.run_records(records, record_keys, careful=careful)
        self.finish()
        return table

    def finish(self) -> None:
        """After the records: fire the due timers and windows and delete expired keys (the time state is written
        into the transaction's cache when it is prepared). A failure there (``on_timer``, a window's call) is a
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


def _messages(source: RecordSource | None) -> MessageColumns:
    """The messages of a run of a ``message`` input (none without a source)."""
    return source.messages if source is not None and source.messages is not None else MessageColumns([])


def _identity(value: Any) -> Any:
    return value


def _native(native: Callable[[Any], Any], value: Any, context: Any) -> Any:
    return native(value)


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
