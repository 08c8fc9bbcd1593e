"""Time in one (batch, partition) run: windows, timers and TTL wired into the runtime's record loop.

:class:`TimedRun` (built by :meth:`statekeep.functions.executor.path.RecordPath.keep_time` when the executor
spec has a ``time`` section) gives the context its
:class:`~statekeep.state.timekeeping.TimeState` and, for a windowed function, the ``process`` the
record loop calls instead (it puts the record in its windows and calls the user's function for each
count window it completes). :meth:`TimedRun.finish`, after the records, fires due timers (windows
and ``on_timer``) and deletes expired keys; the windows and the time state are views of the run's keyed-state
transaction, written into its cache when the checkpoint prepares it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.spec import ExecutorSpec, Layout
from statekeep.state.timekeeping import TimeState
from statekeep.functions.config.locations import carries_messages
from statekeep.functions.windowing.windows import Windows
from statekeep.functions.windowing.windowtypes import Aggregate, Window
from statekeep.state.transaction import KeyedTransaction
from statekeep.state.keygroups import KEY_GROUPS, group_range, key_group, owner
from statekeep.state.timestate import GROUP_PREFIX, Clock, decode_group, stored_watermark_of, wall_clock_ms

#: the clock of every run in this process (tests replace it to move time without waiting)
CLOCK: Clock = wall_clock_ms
LATE_METRIC = "lateRecordsDropped"
#: why a ``process_batch`` function with a windowConfig cannot run (its batch fails, its trigger is refused)
BATCH_WINDOWS = "a windowConfig needs process(records, context), not process_batch"


def entry_of(process: Callable[..., Any], name: str) -> Callable[..., Any] | None:
    """``name`` beside the loaded entry point: a method of its instance (a ``pulsar.Function`` class)
    or a function of its file (the last part of a dotted name)."""
    name = name.rpartition(".")[2]
    owner = getattr(process, "__self__", None)
    if owner is not None and callable(getattr(owner, name, None)):
        return getattr(owner, name)  # type: ignore[no-any-return]
    found = getattr(process, "__globals__", {}).get(name)
    return found if callable(found) else None


class TimedRun:
    """See the module docstring. ``process`` is the user's entry point; ``emit`` takes an output record."""

    def __init__(self, spec: ExecutorSpec, layout: Layout, txn: KeyedTransaction, partition: int, context: Any,
                 process: Callable[..., Any], emit: Callable[[Any], None], batch: int | None = None) -> None:
        section = spec.time
        assert section is not None  # built only for a spec with a time section (RecordPath.keep_time)
        owned = group_range(partition, layout.partitions, layout.groups)
        window = section.window
        lag = section.lag_ms if section.lag_ms is not None else (window or {}).get("lag", 0)
        self.time = TimeState(txn.state, layout.groups, owned, lag_ms=lag, ttl_ms=section.ttl_ms,
                              ttl_used=section.ttl_used, clock=CLOCK, previous=layout.watermark, batch=batch)
        self.context = context
        self.user_process = process
        self.emit = emit
        self.event_field = spec.user_config.get("eventTimeField")
        # get_message_eventtime parses the record again for what a dict value already holds: a JSON record's, or
        # a message input's without a custom serde (only a JSON file's line decodes to a dict there)
        self.event_in_value = bool(self.event_field) and (spec.format.json or spec.format.rows or (
            spec.format.message and not spec.input_serdes and not spec.input_schemas))
        self.json_input = spec.format.json
        self.on_timer = entry_of(process, "on_timer")
        self.late_topic = (window or {}).get("late_topic")
        self.windows: Windows | None = None
        if window is not None:
            extractor = None
            if window.get("extractor"):
                extractor = entry_of(process, window["extractor"])
                if extractor is None:
                    raise InvalidArgumentError(f"timestampExtractorClassName {window['extractor']!r}: no such "
                                               "callable in the function's file")
            aggregate = None
            create = entry_of(process, "create_accumulator")
            if create is not None:
                add, result = entry_of(process, "add_to_accumulator"), entry_of(process, "get_result")
                if add is None or result is None:
                    raise InvalidArgumentError("create_accumulator needs add_to_accumulator(accumulator, record) and "
                                               "get_result(accumulator) beside it in the function's file or class")
                aggregate = Aggregate(create, add, result, entry_of(process, "merge_accumulators"))
            self.windows = Windows(dict(window), self.time, extractor, self.event_field, aggregate)
            txn.view(self.windows.flush)
        txn.view(self.time.flush)  # the time state last: after everything that may change it
        context.keep_time(self.time)

    def prefetch(self, keys: Iterable[str]) -> None:
        """Read the batch's keys' time entries (expiries, window buffers) in the batch's one bulk read."""
        keys = list(keys)
        self.time.prefetch_expiries(keys)
        if self.windows is not None:
            self.windows.prefetch(keys)

    @property
    def process(self) -> Callable[[Any, Any], Any]:
        """What the record loop calls per record."""
        if self.windows is None:
            return self._observing
        return self._windowed

    def _observing(self, value: Any, context: Any) -> Any:
        if self.event_in_value and (value.__class__ is dict or self.json_input):
            # context.get_message_eventtime()'s answer, from the record already decoded
            event = value.get(self.event_field) if value.__class__ is dict else None
            if event.__class__ is int:  # not a bool, as get_message_eventtime
                self.time.observe(event)
        else:
            event = context.get_message_eventtime()
            if event is not None:
                self.time.observe(event)
        return self.user_process(value, context)

    def _windowed(self, value: Any, context: Any) -> Any:
        windows = self.windows
        assert windows is not None
        field = windows.event_field
        ts = value.get(field) if field and windows.extractor is None and value.__class__ is dict else None
        if ts.__class__ is not int:  # anything but a plain int field: the checked way (raises naming the field)
            ts = windows.event_time(value)
        key = context.get_message_key() or ""
        fired = windows.add_tumbling(key, value, ts) if windows.tumbling else windows.add(key, value, ts)
        self.time.observe(ts)
        if fired is None:  # late
            if self.late_topic:
                context.publish(self.late_topic, value)
            else:
                context.record_metric(LATE_METRIC, 1)
            return None
        result = None
        for window, records in fired:  # a count window: at most one per record
            result = self._call(window, records)
        return result

    def _call(self, window: Window, records: list[Any]) -> Any:
        context = self.context
        context.in_window(window)
        self.time.current_key = window.key or ""
        try:
            return self.user_process(records, context)
        finally:
            context.in_window(None)
            self.time.current_key = None

    def _fired(self, key: str, ts: int, code: str) -> None:
        if code == "w":
            assert self.windows is not None
            for window, records in self.windows.due(key, ts):
                result = self._call(window, records)
                if result is not None:
                    self.emit(result)
            return
        if self.on_timer is None:
            return  # a timer registered by a function that has no on_timer: nothing to call
        self.context.position = -1
        result = self.on_timer(key or None, ts, self.context)
        if result is not None:
            self.emit(result)

    def observe_table(self, table: Any) -> None:
        """A ``process_batch`` table's event times (its ``eventTimeField`` column, if any)."""
        if self.event_field and self.event_field in table.column_names and table.num_rows:
            import pyarrow.compute as pc

            largest = pc.max(table.column(self.event_field)).as_py()
            if isinstance(largest, (int, float)) and not isinstance(largest, bool):
                self.time.observe(int(largest))

    def finish(self) -> None:
        """Fire due timers and delete expired keys (the windows and the time state are the transaction's views:
        its prepare writes them into its cache)."""
        self.time.fire(self._fired, self.windows.prefetch_due if self.windows is not None else None)
        self.time.sweep()


def partitions(spec: ExecutorSpec, parallelism: int) -> int:
    """THE partition rule of every run of a function (the runner's query, the operator's, a time run's, a trigger's
    one record): its records are keyed, and so spread over its ``parallelism`` with each key's records in one
    partition, when they carry a key: the key field's value, or a topic message's own key (a topic input without a
    key field). Otherwise they run in one partition."""
    keyed = spec.key_field is not None or (spec.format.message and any(map(carries_messages, spec.inputs)))
    return parallelism if keyed else 1


def routing(spec: ExecutorSpec, store: Any, parallelism: int, *, prepare: bool = True) -> tuple[int | None, int]:
    """The driver's part: ``(key groups, partitions)`` a micro-batch of the function runs with (:func:`partitions`
    of the function's ``parallelism``), each record routed to the partition owning its key's group; key groups
    None: records go by key, any task writes any key. Partition-owned state decides (``prepare``: before a
    micro-batch, which may lay it out or rescale it, see :meth:`StateStore.partitioning`; else as it stands),
    else time state, kept per key group, does."""
    wanted = partitions(spec, parallelism)
    found: tuple[int, int] | None = store.partitioning(wanted, prepare=prepare)
    if found is None and spec.time is not None:
        found = KEY_GROUPS, min(wanted, KEY_GROUPS)
    return found if found is not None else (None, wanted)


def one_record(spec: ExecutorSpec, store: Any, parallelism: int, key: str | None) -> tuple[Layout, int]:
    """For a run of one record outside the micro-batches (a trigger) of a function keeping time: the layout a
    micro-batch would run in (:func:`routing` as the state stands, the function's committed watermark) and the
    partition that batch routes a record of ``key`` to (0 without a key, as Spark's routing)."""
    groups, parallelism = routing(spec, store, parallelism, prepare=False)
    assert groups is not None  # a spec with a time section is routed by key group
    layout = Layout(groups, parallelism, stored_watermark_of(store))
    return layout, 0 if key is None else owner(key_group(key, groups), parallelism, groups)


def stored_watermark(store: Any, batch: int) -> int | None:
    """The function's watermark before micro-batch ``batch`` as its committed state holds it: the largest
    of its key groups', where a group that already committed ``batch`` (a replay after a crash) gives the
    watermark that batch started from, so every partition of a replay uses the same one as the first run."""
    marks = []
    for entry in store.scan_entries(GROUP_PREFIX):
        group = decode_group(entry.value)
        marks.append(group.get("wp") if group.get("wb") is not None and group["wb"] >= batch else group["wm"])
    found = [m for m in marks if m is not None]
    return max(found) if found else None


def advance_watermark(known: dict[str, Any], rows: Iterable[Mapping[str, Any]], parallelism: int) -> None:
    """After a micro-batch: the function's watermark is the largest of its partitions' (their stats
    rows' ``watermark``) and the one before; ``known`` also keeps what :func:`last_batch_needed` needs."""
    rows = list(rows)
    marks = [m for m in [known.get("watermark"), *(row.get("watermark") for row in rows)] if m is not None]
    known["watermark"] = max(marks) if marks else None
    # every partition's task runs and reports; a replayed partition (already applied) reports nothing
    known["unreported"] = parallelism - (len(rows) if all(row.get("applied") for row in rows) else 0)
    for name in ("next_event", "next_processing"):
        known[name] = min((row[name] for row in rows if row.get(name) is not None), default=None)


def last_batch_needed(known: dict[str, Any]) -> bool:
    """Whether a ``--once`` run needs its last micro-batch without input: a partition left a timer (or
    a window) the function's watermark or the clock has passed, or did not report (a replayed batch)."""
    if known.get("unreported", 1) > 0:
        return True
    event, processing, mark = known.get("next_event"), known.get("next_processing"), known.get("watermark")
    return (event is not None and mark is not None and event <= mark) or (
        processing is not None and processing <= CLOCK())


def with_clock_source(frame: Any, *, tick: bool = False, still: bool = False) -> Any:
    """``frame`` unioned with the ``statekeep-clock`` source (see :mod:`statekeep.functions.driver.sources`),
    which has new data every second and never a row: a streaming query runs a micro-batch each second
    even while its inputs are idle (Spark runs none for sources without new data), so processing-time
    timers fire and expired keys are deleted without waiting for input (every partition's task runs in each).
    With ``Trigger.AvailableNow`` it adds no batch, or exactly one with ``tick``. ``still``: a clock that never
    has new data, the place of the source in a query whose checkpoint has it (a function that kept time, updated
    to keep none: Spark resumes a checkpoint only with the sources it was written with)."""
    from pyspark.sql import functions as F

    clock = (frame.sparkSession.readStream.format("statekeep-clock").option("tick", str(tick).lower())
             .option("still", str(still).lower()).load())
    types = dict(frame.dtypes)
    return frame.unionByName(clock.select(*[F.lit(None).cast(types[c]).alias(c) for c in frame.columns]))
