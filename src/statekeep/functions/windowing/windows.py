"""Windows per key, kept as state and fired by timers (see :mod:`statekeep.functions.config.windowconfig`).

Where a key's windows keep their records is :mod:`statekeep.functions.windowing.windowstore`'s rule. A time window's
slot is its start and its list (or its count); a session's are its first and last event time and its lists (one per
session merged into it, so a merge moves no record). With an aggregate (:class:`Aggregate`), a time window or session
keeps its accumulator there instead of records. A time or session window registers a window timer at its end, and
fires (the function is called once with the window's records) when the watermark reaches it, in the batch whose write
also deletes its records: so it fires exactly once, with exactly its records, across crashes and replays. Count
windows fire as their count is reached, in arrival order. A record whose every window the watermark has already
passed is late: it enters no window.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.timekeeping import TimeState
from statekeep.functions.windowing.windowstore import WindowEntries
from statekeep.functions.windowing.windowtypes import Aggregate, Fired, Window, _list
from statekeep.state.typed import delete_elements


class Windows(WindowEntries):
    """The windows of one (batch, partition), kept in their :class:`WindowEntries`; ``spec`` is
    :meth:`WindowConfig.to_spec`'s dict."""

    def __init__(self, spec: dict[str, Any], time: TimeState,
                 extractor: Callable[[Any], Any] | None = None, event_field: str | None = None,
                 aggregate: Aggregate | None = None) -> None:
        super().__init__(spec["kind"], time)
        self.length: int = spec["length"]
        self.slide: int = spec["slide"]
        self.extractor = extractor
        self.event_field = event_field
        if aggregate is not None and self.kind == "count":
            raise InvalidArgumentError("windowConfig: create_accumulator (an aggregate) works with time and session "
                                       "windows, not count windows")
        if aggregate is not None and self.kind == "session" and aggregate.merge is None:
            raise InvalidArgumentError("windowConfig: an aggregate over session windows needs merge_accumulators(a, b) "
                                       "beside create_accumulator (a record bridging two sessions joins them)")
        self.aggregate = aggregate
        #: tumbling time windows: :meth:`add_tumbling` applies
        self.tumbling = self.kind == "time" and self.slide == self.length

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
        """Add ``[ts, record]`` to the time window ``slot`` of ``key`` (opening it: its timer, and an inline list):
        to its inline list, or to its list's entries once it moved there."""
        journal = self.time.state.journal
        held: Any = buffer.get(slot)
        if held is None:
            held = buffer[slot] = []
            self.time.register(key, start + self.length, "w")
            if journal is not None:
                journal.append(lambda: buffer.pop(slot, None))
        if self.aggregate is not None:  # {"a": accumulator, "n": records}, in place of the records
            acc = held["a"] if held else self.aggregate.create()
            buffer[slot] = {"a": self.aggregate.add(acc, record), "n": (held["n"] if held else 0) + 1}
            if journal is not None:
                journal.append(lambda: buffer.__setitem__(slot, held))
            return
        if held.__class__ is list:
            held.append([ts, record])
            if journal is not None:
                journal.append(held.pop)
            return
        self._push(key, f"{start}w", held, [ts, record])  # numbered by the window's count: 0 up, never cut
        buffer[slot] = held + 1
        if journal is not None:  # the list's entries are the state buffer's own (taken back by it)
            journal.append(lambda: buffer.__setitem__(slot, held))

    @property
    def bulk(self) -> bool:
        """Whether :meth:`bulk_process` applies: tumbling time windows on an ``eventTimeField`` (no extractor)."""
        return self.tumbling and bool(self.event_field) and self.extractor is None

    def bulk_process(self, keys: list[Any], general: Callable[[Any, Any], Any]
                     ) -> tuple[Callable[[Any, Any], Any], Callable[[], None]]:
        """The per-record call of a :attr:`bulk` windowed function in the runtime's record loop, and what to
        call after the loop: :meth:`add_tumbling` of each decoded record (its key the next of ``keys``),
        the event times observed once, the largest, after the loop. A record off the common path (no key, no
        int event time, late) goes to ``general(value, context)``, the runtime's per-record call, which does
        for it what it does for any record (and raises its error)."""
        field, add = self.event_field, self.add_tumbling
        next_key = iter(keys).__next__  # the loop calls once per record, in order
        largest: int | None = None

        def process(value: Any, context: Any) -> Any:
            nonlocal largest
            key = next_key()
            try:
                ts = value[field]
            except Exception:  # noqa: BLE001 - the general path reports it
                ts = None
            if key is None or ts.__class__ is not int or add(key, value, ts) is None:  # None: late, not added
                return general(value, context)
            if largest is None or ts > largest:
                largest = ts
            return None

        def observe() -> None:
            if largest is not None:
                self.time.observe(largest)

        return process, observe

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
        """A key's last ``length`` records are its list ``c`` (bounds ``f``, ``e`` in its entry; ``n``: records
        since the last window fired)."""
        buffer = self._buffer(key)
        if self.time.state.journal is not None:
            self.time.state.journal.append(lambda old=dict(buffer): (buffer.clear(), buffer.update(old)))
        first, end = buffer.get("f", 0), buffer.get("e", 0)
        keep = max(first, end + 1 - self.length)
        self._push(key, "c", end, [ts, record])
        delete_elements(self.time.state, _list(key, "c"), first, keep)  # out of every window to come
        end += 1
        buffer.update(f=keep, e=end, n=buffer.get("n", 0) + 1)
        self._touch(key)
        if buffer["n"] < self.slide:
            return []
        buffer["n"] = 0
        tumbling = self.slide == self.length  # the next window starts empty
        records = self._items(key, "c", keep, end, drop=end - keep if tumbling else 0)
        if tumbling:
            buffer["f"] = end
        window = Window(key or None, records[0][0], records[-1][0], len(records))
        return [(window, [r for _, r in records])]

    def _add_session(self, key: str, record: Any, ts: int, watermark: int | None) -> Fired | None:
        gap = self.length
        buffer = self._buffer(key)
        # sessions: [first ts, last ts, [[list number, inline list or its count on entries]...] or an aggregate's
        # {"a": accumulator}, records], disjoint, by start; "i": the last list number taken (a session's records are
        # its lists', sorted at firing)
        sessions = buffer.setdefault("s", [])
        touching = [s for s in sessions if s[0] - gap < ts < s[1] + gap]
        if not touching and watermark is not None and ts + gap <= watermark:
            return None  # would open a session the watermark has already closed
        if self.time.state.journal is not None:  # a key's sessions are few, their entries small: copied whole
            old = {"i": buffer.get("i", 0), "s": [[s[0], s[1], dict(s[2]) if s[2].__class__ is dict else
                                                   [p[:] for p in s[2]], s[3]] for s in sessions]}
            self.time.state.journal.append(lambda: (buffer.clear(), buffer.update(old)))
        if len(touching) == 1:  # the usual case: the record extends one session
            session = touching[0]
            if ts > session[1]:
                self.time.delete(key, session[1] + gap, "w")
                self.time.register(key, ts + gap, "w")
        else:  # opens a session, or joins several into one: their lists become its lists (their accumulators merged)
            session = [ts, ts, self._joined(touching), sum(s[3] for s in touching)]
            for old_session in touching:
                sessions.remove(old_session)
                self.time.delete(key, old_session[1] + gap, "w")
            sessions.append(session)
            sessions.sort(key=lambda s: s[0])
            self.time.register(key, max([ts] + [s[1] for s in touching]) + gap, "w")
        session[0], session[1] = min([session[0], ts] + [s[0] for s in touching]), max(
            [session[1], ts] + [s[1] for s in touching])
        parts = session[2]
        if self.aggregate is not None:
            session[2] = {"a": self.aggregate.add(parts["a"], record)}
        else:
            if not parts:
                parts.append([buffer.setdefault("i", 0) + 1, []])  # inline until the key's entry is too large
                buffer["i"] += 1
            number, held = parts[-1]
            if held.__class__ is list:
                held.append([ts, record])
                if self.time.state.journal is not None:  # the copy above shares the inline list
                    self.time.state.journal.append(held.pop)
            else:
                self._push(key, f"{number}s", held, [ts, record])
                parts[-1][1] += 1
        session[3] += 1
        self._touch(key)
        return []

    def _joined(self, sessions: list[Any]) -> Any:
        """The records of a session joining ``sessions`` (none: a new session): their lists, or an aggregate's
        accumulator merged from theirs."""
        if self.aggregate is None:
            return [p for s in sessions for p in s[2]]
        acc = self.aggregate.create()
        for s in sessions:
            assert self.aggregate.merge is not None  # checked at __init__
            acc = self.aggregate.merge(acc, s[2]["a"])
        return {"a": acc}

    # ---- firing --------------------------------------------------------------------------------

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
                    names += self._names(key, f"{slot}w", held)
        if names:
            self.time.state.prefetch(names)

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
                records = self._records(key, f"{slot}w", held)
                window = Window(key or None, int(slot), int(slot) + self.length, len(records))
                fired.append((window, [r for _, r in records]))
        elif self.kind == "session":
            for session in [s for s in buffer.get("s", []) if s[1] + self.length <= at]:
                buffer["s"].remove(session)
                end = session[1] + self.length
                if session[2].__class__ is dict:  # an aggregate: its result
                    assert self.aggregate is not None  # only an aggregate writes one
                    fired.append((Window(key or None, session[0], end, session[3]),
                                  self.aggregate.result(session[2]["a"])))
                    continue
                records = [r for number, held in session[2] for r in self._records(key, f"{number}s", held)]
                window = Window(key or None, session[0], end, len(records))
                fired.append((window, [r for _, r in sorted(records, key=lambda r: r[0])]))
            if not buffer.get("s"):
                buffer.pop("s", None)
                buffer.pop("i", None)
        if fired:
            self._touch(key)
        return fired
