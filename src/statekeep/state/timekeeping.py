"""One partition's time during one micro-batch: its watermark, its keys' timers and their TTLs.

All of it is state (:mod:`statekeep.state.timestate` has the layout): read through the batch's
:class:`~statekeep.state.buffer.BufferedState` and written back into it by :meth:`TimeState.flush`,
so it commits in the batch's one atomic write and a replayed batch sees it exactly as before.

The watermark is the function's, as in Spark: a micro-batch starts from the function's watermark
(``previous``, the same for every partition: the largest event time of all records before the batch
minus ``maxLagMs``, which the driver takes from the partitions' reports) and its records are judged late
against it. At the end of the batch a partition fires the event-time timers (and windows) its own
watermark has passed, ``max(previous, largest event time of its records - maxLagMs)``: never ahead of
the function's next watermark, so no record a later batch accepts belongs to a window already fired.
What the function's watermark passes but a partition's did not fires in the next micro-batch (within a
second for a running query, see the clock source; in one last micro-batch without input at the end of
a ``--once`` run). Each key group's entry keeps the watermark, so it survives restarts and rescales and
never goes back. Processing-time timers fire once the batch's clock passes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.keygroups import key_group
from statekeep.state.timestate import (Clock, check_ttl, decode_expiry, decode_group, encode_expiry, encode_group,
                                       expiry_entry, expiry_key, group_key, has_expiry_key, shard_key, shard_of,
                                       stored_expiry, wall_clock_ms)

#: A timer further than this from the current time (event time: the watermark, or the clock before
#: any event) is refused as a mistake.
MAX_TIMER_DISTANCE_MS = 10 * 365 * 24 * 3600 * 1000
DOMAINS = {"event": "e", "processing": "p"}
_NAMES = {"e": "event", "p": "processing", "w": "window"}
MAX_FIRING_ROUNDS = 100


class TimeState:
    """The time of one (batch, partition). ``state`` is the batch's buffer (get/put/prefetch);
    ``owned`` the key groups (of ``groups``) the partition owns; ``ttl_ms`` the function's
    ``stateTtlSeconds`` in ms (None: keys live until deleted unless written with a TTL)."""

    def __init__(self, state: Any, groups: int, owned: Iterable[int], *, lag_ms: int = 0,
                 ttl_ms: int | None = None, ttl_used: bool = True, clock: Clock = wall_clock_ms,
                 previous: int | None = None, batch: int | None = None) -> None:
        self.state = state
        self.groups = groups
        self.owned = list(owned)
        self._owned = frozenset(self.owned)
        self.lag_ms = lag_ms
        self.ttl_ms = ttl_ms
        self.ttl_used = ttl_used or ttl_ms is not None  # False: no key of this function can have a TTL
        self.now = clock()  # one processing time per batch
        self._entries: dict[str, dict[str, Any]] = {}  # time entries read (by state key), see _group, _map
        self._places: dict[str, tuple[str, dict[str, Any], dict[str, Any], int]] = {}  # see _place
        self._dirty: set[str] = set()
        state.prefetch(group_key(g) for g in self.owned)
        state.prefetch(shard_key(g, i) for g in self.owned for i in range(self._group(g).get("s", 1))
                       if self._group(g).get("s", 1) > 1)
        # the driver's watermark if it gave one (the same on a replay); else the groups' own
        marks = [previous] if previous is not None else [m for m in (self._group(g)["wm"] for g in self.owned)
                                                          if m is not None]
        self.batch = batch
        #: the watermark as the batch found it (None: no event seen yet)
        self.watermark: int | None = max(marks) if marks else None
        self.max_event: int | None = None
        self.current_key: str | None = None  # the key being processed, or whose timer fires
        #: after :meth:`fire`: lower bounds of the earliest timer left in event time (windows too) and in
        #: processing time (None: none), which tell the driver whether a last batch has anything to fire
        self.next_event: int | None = None
        self.next_processing: int | None = None

    # ---- group entries -------------------------------------------------------------------------
    # A key group's entry holds its watermark and, until it outgrows half the store's value limit, its
    # keys' timers ("t") and expiries ("x"); then they move to "s" shards (a power of two, by key hash),
    # each an entry of its own, and the group's entry keeps lower bounds of the earliest timer ("tn")
    # and expiry ("xn") so a batch reads the shards of a group only when something there may be due.

    def _load(self, name: str) -> dict[str, Any]:
        entry = self._entries.get(name)
        if entry is None:
            entry = self._entries[name] = decode_group(self.state.get(name), name)
        return entry

    def _group(self, group: int) -> dict[str, Any]:
        return self._load(group_key(group))

    def _map(self, group: int, key: str) -> tuple[str, dict[str, Any]]:
        """(state key, entry) of the entry holding ``key``'s timers and expiry in ``group``."""
        shards = self._group(group).get("s", 1)
        if shards == 1:
            return group_key(group), self._group(group)
        name = shard_key(group, shard_of(key, self.groups, shards))
        return name, self._load(name)

    def _maps(self, group: int) -> list[tuple[str, dict[str, Any]]]:
        shards = self._group(group).get("s", 1)
        if shards == 1:
            return [(group_key(group), self._group(group))]
        return [(name, self._load(name)) for name in (shard_key(group, i) for i in range(shards))]

    def _of(self, key: str) -> tuple[str, dict[str, Any]]:
        return self._place(key)[:2]

    def _place(self, key: str) -> tuple[str, dict[str, Any], dict[str, Any], int]:
        """(state key, entry) of the entry holding ``key``'s timers and expiry, its group's entry and the group;
        kept for the batch (a function moving a key's timer at each record asks for it twice a record)."""
        place = self._places.get(key)
        if place is None:
            group = key_group(key, self.groups)
            if group not in self._owned:  # routing sends a key's records to its group's owner: a bug if not
                raise InvalidArgumentError(f"key {key!r} (group {group}) is not owned by this partition")
            place = self._places[key] = (*self._map(group, key), self._group(group), group)
        return place

    # ---- event time ----------------------------------------------------------------------------

    def observe(self, event_ms: int) -> None:
        """A record's event time (advances the watermark at the end of the batch)."""
        if self.max_event is None or event_ms > self.max_event:
            journal = self.state.journal
            if journal is not None:
                journal.append(lambda previous=self.max_event: setattr(self, "max_event", previous))
            self.max_event = event_ms

    def next_watermark(self) -> int | None:
        """The larger of the batch's watermark and its largest event time minus the lag (None: neither)."""
        mark = self.watermark
        if self.max_event is None:
            return mark
        event = self.max_event - self.lag_ms
        return event if mark is None or event > mark else mark

    # ---- timers --------------------------------------------------------------------------------

    def check_timestamp(self, timestamp_ms: object, domain: str) -> int:
        if isinstance(timestamp_ms, bool) or not isinstance(timestamp_ms, int):
            raise InvalidArgumentError(f"a timer's timestamp is int milliseconds, not {type(timestamp_ms).__name__}")
        if domain not in DOMAINS:
            raise InvalidArgumentError(f"a timer's domain is 'event' or 'processing', not {domain!r}")
        if domain == "event":
            reference = self.next_watermark()
            reference = self.now if reference is None else reference
        else:
            reference = self.now
        if abs(timestamp_ms - reference) > MAX_TIMER_DISTANCE_MS:
            raise InvalidArgumentError(f"timer at {timestamp_ms} ms is more than ten years from the current "
                                       f"{domain} time {reference} ms")
        return timestamp_ms

    def register(self, key: str, timestamp_ms: int, code: str) -> None:
        name, entry, header, group = self._place(key)
        timer = [timestamp_ms, code]
        timers = entry["t"].get(key)
        if timers is None:
            entry["t"][key] = [timer]
        elif timer in timers:
            return
        else:
            timers.append(timer)
            timers.sort()
        self._dirty.add(name)
        if header is not entry and (header.get("tn") is None or timestamp_ms < header["tn"]):
            header["tn"] = timestamp_ms
            self._dirty.add(group_key(group))
        if self.state.journal is not None:
            self.state.journal.append(lambda: self.delete(key, timestamp_ms, code))

    def delete(self, key: str, timestamp_ms: int, code: str) -> bool:
        name, entry, _, _ = self._place(key)
        timers = entry["t"].get(key)
        timer = [timestamp_ms, code]
        if timers is None or timer not in timers:
            return False
        timers.remove(timer)
        if not timers:
            del entry["t"][key]
        self._dirty.add(name)
        if self.state.journal is not None:
            self.state.journal.append(lambda: self.register(key, timestamp_ms, code))
        return True

    def timers(self, key: str) -> list[tuple[int, str]]:
        return [(ts, _NAMES[code]) for ts, code in self._of(key)[1]["t"].get(key, [])]

    def fire(self, callback: Callable[[str, int, str], None],
             before: Callable[[list[tuple[int, str, str]]], None] | None = None) -> int:
        """Fire every due timer, oldest first, removing each before ``callback(key, ms, code)`` runs
        (which may register more; those due fire too, up to :data:`MAX_FIRING_ROUNDS` rounds), then
        advance the watermark of the owned groups. ``before(due)`` is called with each round's due
        ``(ms, key, code)`` before any of them fires (to read what they need at once). Returns the number fired."""
        mark = self.next_watermark()
        fired = 0
        for _ in range(MAX_FIRING_ROUNDS):
            due = []
            latest = max(self.now, mark) if mark is not None else self.now
            left: dict[str, int] = {}  # domain ("p", else event) -> the earliest timer not due
            for group in self.owned:
                header = self._group(group)
                if header.get("s", 1) > 1 and (header.get("tn") is None or header["tn"] > latest):
                    if header.get("tn") is not None:  # sharded, nothing due (tn: a lower bound of its timers)
                        left["p"] = min(left.get("p", header["tn"]), header["tn"])
                        left["e"] = min(left.get("e", header["tn"]), header["tn"])
                    continue
                earliest = None
                for _, entry in self._maps(group):
                    for key, timers in entry["t"].items():
                        for ts, code in timers:
                            limit = self.now if code == "p" else mark
                            if limit is not None and ts <= limit:
                                due.append((ts, key, code))
                                continue
                            domain = "p" if code == "p" else "e"
                            left[domain] = min(left.get(domain, ts), ts)
                            if earliest is None or ts < earliest:
                                earliest = ts
                if header.get("s", 1) > 1 and header.get("tn") != earliest:
                    header["tn"] = earliest  # what stays after the due ones fire (re-lowered by register)
                    self._dirty.add(group_key(group))
            self.next_event, self.next_processing = left.get("e"), left.get("p")
            if not due:
                break
            if before is not None:
                before(due)
            for ts, key, code in sorted(due):
                if self.delete(key, ts, code):
                    self.current_key = key
                    try:
                        callback(key, ts, code)
                    finally:
                        self.current_key = None
                    fired += 1
        if mark is not None and mark != self.watermark:
            for group in self.owned:  # wp, wb: the batch's previous watermark, for its replay (timerun)
                self._group(group).update(wm=mark, wp=self.watermark, wb=self.batch)
                self._dirty.add(group_key(group))
            self.watermark = mark
        return fired

    # ---- TTL -----------------------------------------------------------------------------------

    def expired(self, key: str) -> bool:
        if not self.ttl_used or not has_expiry_key(key):
            return False
        expiry = decode_expiry(self.state.get(expiry_key(key)))
        return expiry is not None and expiry <= self.now

    def prefetch_expiries(self, keys: Iterable[str]) -> None:
        if self.ttl_used:
            self.state.prefetch(expiry_key(k) for k in keys if has_expiry_key(k))

    def written(self, key: str, ttl_seconds: int | None) -> None:
        """``key`` was just written (not deleted): set, refresh or clear its expiry."""
        if ttl_seconds is not None:
            ttl_ms: int | None = check_ttl(ttl_seconds) * 1000
        else:
            ttl_ms = self.ttl_ms
        if ttl_ms is None:
            if self.ttl_used and has_expiry_key(key) and self.state.get(expiry_key(key)) is not None:
                self.deleted(key)
            return
        if not has_expiry_key(key):
            raise InvalidArgumentError(f"state key {key!r} is too long to expire (its TTL entry would exceed "
                                       "the key length limit)")
        expires = self.now + ttl_ms
        self.state.put(expiry_key(key), encode_expiry(expires))
        self.index(key, expires)

    def index(self, key: str, expires: int) -> None:
        """List ``key`` (any state key: a plain one, whose expiry entry :meth:`written` wrote, or a typed variable's
        entry, which carries its expiry) in its group's TTL index at ``expires``, so that :meth:`sweep` deletes it
        once that has passed, whether or not anything reads it again."""
        group = key_group(key, self.groups)
        if group not in self._owned:  # a key of another group (a store any task may write): indexed in one
            if not self.owned:        # of this partition's groups; the sweep re-checks its expiry entry
                return
            group = self.owned[0]
        name, entry = self._map(group, key)
        self._journal_expiry(entry, key)
        entry["x"][key] = expires
        entry["xn"] = min(expires, entry.get("xn") or expires)
        self._dirty.add(name)
        header = self._group(group)
        if header is not entry and (header.get("xn") is None or expires < header["xn"]):
            header["xn"] = expires  # a lower bound over the shards (never taken back: a read too many)
            self._dirty.add(group_key(group))

    def _journal_expiry(self, entry: dict[str, Any], key: str) -> None:
        """How to take back a change of ``key``'s place in a group's TTL index (a failed record's)."""
        journal = self.state.journal
        if journal is None:
            return
        old, old_next = entry["x"].get(key), entry.get("xn")

        def undo() -> None:
            if old is None:
                entry["x"].pop(key, None)
            else:
                entry["x"][key] = old
            entry["xn"] = old_next

        journal.append(undo)

    def deleted(self, key: str) -> None:
        """``key`` was deleted: its expiry goes too."""
        if not self.ttl_used or not has_expiry_key(key) or self.state.get(expiry_key(key)) is None:
            return
        self.state.put(expiry_key(key), None)
        group = key_group(key, self.groups)
        if group in self._owned:
            name, entry = self._map(group, key)
            if key in entry["x"]:
                self._journal_expiry(entry, key)
                del entry["x"][key]
                self._dirty.add(name)

    def sweep(self) -> int:
        """Delete the expired keys of the owned groups' TTL indexes, plain keys with their expiry entries and typed
        variables' entries alike (each with a changelog tombstone, in this batch's write). Only groups whose earliest
        expiry has passed are looked at, and what their due keys hold now is read in one bulk read. Returns how
        many."""
        due: list[tuple[str, dict[str, Any]]] = []  # (key, the index entry listing it)
        touched: dict[str, dict[str, Any]] = {}
        for group in self.owned:
            header = self._group(group)
            earliest = header.get("xn")  # for a sharded group, a lower bound over its shards
            if (earliest is not None and earliest > self.now) or (earliest is None and not header["x"]):
                continue
            for name, entry in self._maps(group):
                if not entry["x"] or (entry.get("xn") or 0) > self.now:
                    continue
                due += [(key, entry) for key, expires in entry["x"].items() if expires <= self.now]
                touched[name] = entry
            if header.get("s", 1) > 1:
                touched[group_key(group)] = header
        self.state.prefetch(expiry_entry(key) for key, _ in due)
        removed = 0
        for key, entry in due:
            del entry["x"][key]
            current = stored_expiry(key, self.state.get(expiry_entry(key)))
            if current is None or current > self.now:
                continue  # deleted, or written again since (through another group's index)
            self.state.put(key, None)
            if expiry_entry(key) != key:
                self.state.put(expiry_key(key), None)
            removed += 1
        for name, entry in touched.items():
            if "s" in entry and entry["s"] > 1:  # a sharded group's header: the lower bound over its shards
                group = key_group(name, self.groups)
                entry["xn"] = min((e["xn"] for _, e in self._maps(group) if e.get("xn") is not None), default=None)
            else:
                entry["xn"] = min(entry["x"].values(), default=None)
            self._dirty.add(name)
        return removed

    def flush(self) -> None:
        """Write the changed time entries into the batch's buffer; a group whose timers and expiries
        outgrow half the store's value limit is spread over (more) shards first."""
        encoded = {name: encode_group(self._entries[name]) for name in self._dirty}
        limit = self.state.max_value_size
        for group in sorted({key_group(n, self.groups) for n, e in encoded.items() if len(e) > limit // 2}):
            size = sum(len(encode_group(e)) for _, e in self._maps(group))
            self._reshard(group, size)
            encoded.update((n, encode_group(self._entries[n])) for n in self._dirty if n not in encoded or
                           key_group(n, self.groups) == group)
        for name in sorted(encoded):
            if len(encoded[name]) > limit:  # a shard still too big: keys with very many timers
                raise InvalidArgumentError(f"the timers and TTL index entry {name!r} takes {len(encoded[name])} "
                                           f"bytes, over the state store's limit of {limit}")
            self.state.put(name, encoded[name])
        self._dirty.clear()

    def _reshard(self, group: int, size: int) -> None:
        """Spread ``group``'s timers and expiries (``size`` bytes encoded) over twice as many shards or
        more, so that each is expected to take a quarter of the store's value limit."""
        header = self._group(group)
        timers: dict[str, Any] = {}
        expiries: dict[str, int] = {}
        for _, entry in self._maps(group):
            timers.update(entry["t"])
            expiries.update(entry["x"])
        shards = header.get("s", 1) * 2
        while size / shards > self.state.max_value_size // 4:
            shards *= 2
        self._places.clear()  # the keys' entries move
        header.update(s=shards, t={}, x={},
                      tn=min((ts for ts_list in timers.values() for ts, _ in ts_list), default=None),
                      xn=min(expiries.values(), default=None))
        self._dirty.add(group_key(group))
        for i in range(shards):
            name = shard_key(group, i)
            self._entries[name] = {"wm": None, "t": {}, "x": {}}
            self._dirty.add(name)
        for key, ts_list in timers.items():
            self._entries[shard_key(group, shard_of(key, self.groups, shards))]["t"][key] = ts_list
        for key, expires in expiries.items():
            self._entries[shard_key(group, shard_of(key, self.groups, shards))]["x"][key] = expires
        for i in range(shards):
            entry = self._entries[shard_key(group, i)]
            entry["xn"] = min(entry["x"].values(), default=None)
