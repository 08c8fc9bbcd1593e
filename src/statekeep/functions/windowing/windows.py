"""Windows per key, kept as state and fired by timers (see :mod:`statekeep.functions.config.windowconfig`).

A key's open windows are one state entry (:func:`statekeep.state.timestate.buffer_key`). A time window's
records are a list of their own (:func:`window_list`: one entry per record, numbered by the window's count in the
key's entry, appended without reading the others, so a window has no size limit but the store's; read in one
bulk read with the other windows firing in the batch); the key's entry holds only its windows' starts and
record counts. Session and count windows keep their records in the key's entry. With an aggregate
(:class:`Aggregate`), a time or session window keeps its accumulator in the key's entry instead of records.
A time or session window registers a window timer at its end, and fires (the function is called once with
the window's records) when the watermark reaches it, in the batch whose write also deletes its records: so it
fires exactly once, with exactly its records, across crashes and replays.
Count windows fire as their count is reached, in arrival order. A record whose every window the
watermark has already passed is late: it enters no window.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec

from statekeep.errors import InvalidArgumentError
from statekeep.functions.messaging.jsonscan import loads_at
from statekeep.functions.windowing.timekeeping import TimeState
from statekeep.state.timestate import buffer_key, has_buffer_key
from statekeep.state.typed import element_key, variable_prefix


class Window(NamedTuple):
    """What ``context.get_window()`` returns while a window is processed: its key (None without a key
    field), start and end in ms (end exclusive; for a count window the first and last record's event
    times) and how many records it holds (``size``)."""

    key: str | None
    start: int
    end: int
    size: int


Fired = list[tuple[Window, Any]]  # a window and its records (or its aggregate's result)
_encode = json.JSONEncoder(separators=(",", ":")).encode
_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder().decode


def window_list(key: str, start: int) -> str:
    """The prefix of the records of ``key``'s time window starting at ``start``: a list as typed state keeps one
    (:mod:`statekeep.state.typed`) under the key, named so that no user variable can be (it starts with a digit)."""
    return variable_prefix(key, f"{start}w")


class Aggregate(NamedTuple):
    """A time or session window's incremental aggregate (after Flink's ``AggregateFunction``), from the function's
    file or class: ``create_accumulator()``, ``add_to_accumulator(accumulator, record) -> accumulator``,
    ``get_result(accumulator)``, which the function's ``process`` receives instead of the window's records, and
    ``merge_accumulators(a, b) -> accumulator`` (``merge``; required by session windows: a record bridging two
    sessions joins them). The accumulator (JSON data) is kept in place of the records."""

    create: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]
    merge: Callable[[Any, Any], Any] | None = None


class Windows:
    """The windows of one (batch, partition); ``spec`` is :meth:`WindowConfig.to_spec`'s dict."""

    def __init__(self, spec: dict[str, Any], time: TimeState,
                 extractor: Callable[[Any], Any] | None = None, event_field: str | None = None,
                 aggregate: Aggregate | None = None) -> None:
        self.kind: str = spec["kind"]
        self.length: int = spec["length"]
        self.slide: int = spec["slide"]
        self.time = time
        self.extractor = extractor
        self.event_field = event_field
        if aggregate is not None and self.kind == "count":
            raise InvalidArgumentError("windowConfig: create_accumulator (an aggregate) works with time and session "
                                       "windows, not count windows")
        if aggregate is not None and self.kind == "session" and aggregate.merge is None:
            raise InvalidArgumentError("windowConfig: an aggregate over session windows needs merge_accumulators(a, b) "
                                       "beside create_accumulator (a record bridging two sessions joins them)")
        self.aggregate = aggregate
        self._open: dict[str, Any] = {}
        #: tumbling time windows: :meth:`add_tumbling` applies
        self.tumbling = self.kind == "time" and self.slide == self.length
        self._dirty: set[str] = set()

    # ---- event time ----------------------------------------------------------------------------

    def event_time(self, record: Any) -> int:
        """The record's event time in ms: the extractor's, else the ``eventTimeField``'s, else the batch's
        processing time. :class:`InvalidArgumentError` naming the field if it is missing or not a number."""
        if self.extractor is not None:
            try:
                value = self.extractor(record)
            except Exception as e:  # noqa: BLE001 - user code: reported as the record's error
                raise InvalidArgumentError(f"timestampExtractorClassName raised {type(e).__name__}: {e}") from None
            what = "timestampExtractorClassName's result"
        elif self.event_field:
            if not isinstance(record, dict) or self.event_field not in record:
                raise InvalidArgumentError(f"event-time field {self.event_field!r} is missing from the record")
            value, what = record[self.event_field], f"event-time field {self.event_field!r}"
        else:
            return self.time.now
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise InvalidArgumentError(f"{what} is not a number of ms: {value!r}")
        return int(value)

    # ---- buffers -------------------------------------------------------------------------------

    def _buffer(self, key: str) -> Any:
        buffer = self._open.get(key)
        if buffer is None:
            raw = self.time.state.get(buffer_key(key))
            buffer = loads_at(raw.decode()) if raw else ({"r": [], "n": 0} if self.kind == "count" else {})
            self._open[key] = buffer
        return buffer

    def prefetch(self, keys: list[str]) -> None:
        self.time.state.prefetch([buffer_key(k) for k in keys if has_buffer_key(k)])

    def _touch(self, key: str) -> None:
        self._dirty.add(key)

    def flush(self) -> None:
        """Write the changed buffers (an empty one is deleted) into the batch's buffer."""
        for key in sorted(self._dirty):
            buffer = self._open[key]
            empty = not buffer["r"] if self.kind == "count" else not buffer
            encoded = None if empty else _encode(buffer).encode()
            if encoded is not None and len(encoded) > self.time.state.max_value_size:
                raise InvalidArgumentError(f"key {key!r}'s open windows take {len(encoded)} bytes, over the state "
                                           f"store's limit of {self.time.state.max_value_size}: shorter windows "
                                           "or smaller records")
            self.time.state.put(buffer_key(key), encoded)
        self._dirty.clear()

    # ---- records -------------------------------------------------------------------------------

    def add_tumbling(self, key: str, record: Any, ts: int) -> Fired | None:
        """:meth:`add` for tumbling time windows (the common case, one window per record)."""
        start = ts - ts % self.length
        watermark = self.time.watermark
        if watermark is not None and start + self.length <= watermark:
            return None
        buffer = self._open.get(key)
        if buffer is None:
            buffer = self._buffer(key)
        self._append(key, buffer, str(start), start, ts, record)
        self._dirty.add(key)
        return []

    def _append(self, key: str, buffer: dict[str, Any], slot: str, start: int, ts: int, record: Any) -> None:
        """Add ``[ts, record]`` to the time window ``slot`` of ``key`` (opening it: its timer): to its list, or to
        the records the key's entry holds for a window opened before windows had lists."""
        journal = self.time.state.journal
        held: Any = buffer.get(slot)
        if held is None:
            held = buffer[slot] = 0
            self.time.register(key, start + self.length, "w")
            if journal is not None:
                journal.append(lambda: buffer.pop(slot, None))
        if held.__class__ is list:  # written by an earlier version: it stays in the entry until it fires
            held.append([ts, record])
            if journal is not None:
                journal.append(held.pop)
            return
        if self.aggregate is not None:  # {"a": accumulator, "n": records}, in place of the records
            acc = held["a"] if held else self.aggregate.create()
            buffer[slot] = {"a": self.aggregate.add(acc, record), "n": (held["n"] if held else 0) + 1}
            if journal is not None:
                journal.append(lambda: buffer.__setitem__(slot, held))
            return
        # the key's entry counts the window's records, so the list's elements are numbered from it (0 up, never
        # trimmed) and the list keeps no bounds entry: one write per record
        self.time.state.put(element_key(window_list(key, start), held), _pack([ts, record]))
        buffer[slot] = held + 1
        if journal is not None:  # the list's entries are the state buffer's own (taken back by it)
            journal.append(lambda: buffer.__setitem__(slot, held))

    @property
    def bulk(self) -> bool:
        """Whether :meth:`add_all` applies: tumbling time windows on an ``eventTimeField`` (no extractor)."""
        return self.tumbling and bool(self.event_field) and self.extractor is None

    def add_all(self, records: list[Any], keys: list[Any], decode: Callable[[Any], Any],
                general: Callable[[int, Any], None]) -> None:
        """:meth:`add_tumbling` for a partition's records (each decoded by ``decode``, its key in ``keys``)
        in one loop, the record loop of a :attr:`bulk` windowed function. A record off the common path
        (no key, malformed, no int event time, late) goes to ``general(position, record)``, the runtime's
        per-record path, which does for it what it does for any record (and raises its error)."""
        field, add = self.event_field, self.add_tumbling
        largest = None
        for position, record in enumerate(records):
            key = keys[position]
            try:
                ts = (value := decode(record))[field]
            except Exception:  # noqa: BLE001 - the general path reports it
                ts = None
            if key is None or ts.__class__ is not int or add(key, value, ts) is None:  # None: late, not added
                general(position, record)
                continue
            if largest is None or ts > largest:
                largest = ts
        if largest is not None:
            self.time.observe(largest)

    def add(self, key: str, record: Any, ts: int) -> Fired | None:
        """Put ``record`` (event time ``ts``) into its windows; returns the count windows it completes
        (fire now), or None if the record is late (it entered no window)."""
        if self.kind == "count":
            return self._add_count(key, record, ts)
        watermark = self.time.watermark
        if self.kind == "time":
            if self.slide == self.length:  # tumbling: one window
                start = ts // self.length * self.length
                starts = [start] if watermark is None or start + self.length > watermark else []
            else:
                starts = [s for s in range((ts // self.slide) * self.slide, ts - self.length, -self.slide)
                          if watermark is None or s + self.length > watermark]
            if not starts:
                return None
            buffer = self._buffer(key)
            for start in starts:
                self._append(key, buffer, str(start), start, ts, record)
            self._touch(key)
            return []
        return self._add_session(key, record, ts, watermark)

    def _add_count(self, key: str, record: Any, ts: int) -> Fired:
        buffer = self._buffer(key)
        if self.time.state.journal is not None:  # a count window's records are few (its length)
            self.time.state.journal.append(lambda old=dict(buffer, r=list(buffer["r"])): buffer.update(old))
        buffer["r"].append([ts, record])
        buffer["n"] += 1
        del buffer["r"][:-self.length]
        self._touch(key)
        if buffer["n"] < self.slide:
            return []
        buffer["n"] = 0
        records = list(buffer["r"])
        if self.slide == self.length:  # tumbling: the next window starts empty
            buffer["r"] = []
        window = Window(key or None, records[0][0], records[-1][0], len(records))
        return [(window, [r for _, r in records])]

    def _add_session(self, key: str, record: Any, ts: int, watermark: int | None) -> Fired | None:
        gap = self.length
        buffer = self._buffer(key)
        # [first ts, last ts, [[ts, record]...] or an aggregate's {"a": accumulator, "n": records}], disjoint, by start
        sessions = buffer.setdefault("s", [])
        journal = self.time.state.journal
        touching = [s for s in sessions if s[0] - gap < ts < s[1] + gap]
        if not touching and watermark is not None and ts + gap <= watermark:
            return None  # would open a session the watermark has already closed
        aggregate = self.aggregate
        if len(touching) == 1:  # the usual case: the record extends one session (records sorted at firing)
            session = touching[0]
            if journal is not None:
                journal.append(lambda old=session[:]: session.__setitem__(slice(None), old))
                if aggregate is None:
                    journal.append(session[2].pop)
            if aggregate is not None:
                held = session[2]
                session[2] = {"a": aggregate.add(held["a"], record), "n": held["n"] + 1}
            else:
                session[2].append([ts, record])
            if ts < session[0]:
                session[0] = ts
            if ts > session[1]:
                self.time.delete(key, session[1] + gap, "w")
                session[1] = ts
                self.time.register(key, ts + gap, "w")
            self._touch(key)
            return []
        first, last = min([ts] + [s[0] for s in touching]), max([ts] + [s[1] for s in touching])
        if aggregate is not None:
            assert aggregate.merge is not None  # checked at __init__
            acc = aggregate.create()
            for s in touching:
                acc = aggregate.merge(acc, s[2]["a"])
            merged = [first, last, {"a": aggregate.add(acc, record), "n": sum(s[2]["n"] for s in touching) + 1}]
        else:
            merged = [first, last, [r for s in touching for r in s[2]] + [[ts, record]]]
        if journal is not None:  # the touched sessions are replaced, not changed: put them back
            journal.append(lambda old=list(sessions): sessions.__setitem__(slice(None), old))
        for old in touching:
            sessions.remove(old)
            self.time.delete(key, old[1] + gap, "w")
        sessions.append(merged)
        sessions.sort(key=lambda s: s[0])
        self.time.register(key, merged[1] + gap, "w")
        self._touch(key)
        return []

    # ---- firing --------------------------------------------------------------------------------

    def _names(self, key: str, start: int, count: int) -> list[str]:
        """The entries of the list of ``key``'s time window at ``start`` holding ``count`` records: its elements,
        then the bounds entry an earlier version wrote beside them."""
        prefix = window_list(key, start)
        return [element_key(prefix, n) for n in range(count)] + [prefix + "#"]

    def prefetch_due(self, due: list[tuple[int, str, str]]) -> None:
        """Before timers ``(ms, key, code)`` fire: the records of every time window they close, in one bulk read
        (a window's own read would be one per window)."""
        if self.kind != "time" or self.aggregate is not None:
            return
        latest: dict[str, int] = {}  # key -> its latest window timer due
        for at, key, code in due:
            if code == "w" and at > latest.get(key, at - 1):
                latest[key] = at
        names = []
        for key, at in latest.items():
            for slot, held in self._buffer(key).items():
                if held.__class__ is int and int(slot) + self.length <= at:
                    names += self._names(key, int(slot), held)
        if names:
            self.time.state.prefetch(names)

    def _take(self, key: str, start: int, count: int) -> list[Any]:
        """A time window's ``[ts, record]`` list (``count`` records), in arrival order, deleted with the batch."""
        state = self.time.state
        names = self._names(key, start, count)
        state.prefetch(names)
        bounds = names.pop()
        records = [_unpack(raw) for name in names if (raw := state.get(name)) is not None]
        for name in names:
            state.put(name, None)
        if state.get(bounds) is not None:
            state.put(bounds, None)
        return records

    def due(self, key: str, at: int) -> Fired:
        """The windows of ``key`` ending at or before ``at`` (their window timer fired), removed."""
        buffer = self._buffer(key)
        fired: Fired = []
        if self.kind == "time":
            for slot in sorted((s for s in buffer if int(s) + self.length <= at), key=int):
                held = buffer.pop(slot)
                if held.__class__ is dict:  # an aggregate: its result
                    assert self.aggregate is not None  # only an aggregate writes one
                    window = Window(key or None, int(slot), int(slot) + self.length, held["n"])
                    fired.append((window, self.aggregate.result(held["a"])))
                    continue
                records = held if held.__class__ is list else self._take(key, int(slot), held)
                window = Window(key or None, int(slot), int(slot) + self.length, len(records))
                fired.append((window, [r for _, r in records]))
        elif self.kind == "session":
            for session in [s for s in buffer.get("s", []) if s[1] + self.length <= at]:
                buffer["s"].remove(session)
                held = session[2]
                if held.__class__ is dict:  # an aggregate: its result
                    assert self.aggregate is not None  # only an aggregate writes one
                    window = Window(key or None, session[0], session[1] + self.length, held["n"])
                    fired.append((window, self.aggregate.result(held["a"])))
                    continue
                window = Window(key or None, session[0], session[1] + self.length, len(held))
                fired.append((window, [r for _, r in sorted(held, key=lambda r: r[0])]))
            if not buffer.get("s"):
                buffer.pop("s", None)
        if fired:
            self._touch(key)
        return fired
