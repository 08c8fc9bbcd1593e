"""Time kept as state: the reserved key namespace for timers, window buffers, watermarks and state TTL.

Everything a function's notion of time needs is ordinary state, written through the same per-batch
buffer and committed in the same atomic write (or staged commit) as the batch's own changes, on every
provider. It lives under keys starting with :data:`RESERVED` (a NUL character), which a function, REST
or the CLI can never write (:func:`check_user_key`) and which user-visible reads never show
(:func:`visible_entry`, :func:`visible_entries`, :func:`visible_records` for the changelog):

``\\0g<group>`` (:func:`group_key`)
    one per key group: JSON ``{"wm": watermark, "t": {key: [[ms, domain], ...]}, "x": {key: expiry}}``
    -- the watermark as of the last batch that touched the group, the timers of the group's keys
    (domain ``e`` event time, ``p`` processing time, ``w`` a window's end) and the TTL index of its keys.
    A group whose timers and TTL index outgrow half the store's value limit keeps them in ``"s"`` shards
    instead (a power of two; a key's shard is :func:`shard_of`), each an entry ``\\0g<group>/<i>``
    (:func:`shard_key`), and lower bounds of their earliest timer and expiry (``tn``, ``xn``).
``\\0w\\0<key>`` (:func:`buffer_key`)
    a key's open windows (JSON).
``\\0x\\0<key>`` (:func:`expiry_key`)
    a key's expiry in ms since the epoch (ASCII digits), so a read of one key needs one more key only. A typed
    variable's entry carries its expiry itself (:func:`statekeep.state.typed.encode_entry`); either way the group's
    TTL index lists the key, and :func:`expiry_entry` / :func:`stored_expiry` read what it holds now.
``\\0v<length>:<key>...``
    a key's typed state variables (:mod:`statekeep.state.typed`).

Every internal key is in a key group (:func:`statekeep.state.keygroups.key_group`): a
per-key entry in the group of the user key it embeds, a group entry in the group it names
(:func:`internal_owner`), so partition-owned state moves them with their groups when it rescales.
"""

from __future__ import annotations

import json
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

from statekeep import jsonrecords
from statekeep.errors import InvalidArgumentError
from statekeep.state.base import Capability
from statekeep.state import typed
from statekeep.state.keys import valid_key
from statekeep.state.records import ChangelogRecord
from statekeep.validate import check_int

#: The first character of every internal key.
RESERVED = "\x00"
_GROUP, _BUFFER, _EXPIRY = "\x00g", "\x00w\x00", "\x00x\x00"
#: sorts after every internal key (their second character is g, v, w or x) and before every user key
_PAST_INTERNAL = "\x00\U0010ffff"
#: the prefix of every key group's time entry (a scan of it lists them all)
GROUP_PREFIX = _GROUP

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    """Milliseconds since the epoch (the default clock; tests inject another)."""
    return int(time.time() * 1000)


def is_internal(key: str) -> bool:
    return key[:1] == RESERVED


def check_user_key(key: str) -> str:
    """``key`` if a user may write it; :class:`InvalidArgumentError` for a key in the reserved namespace."""
    if key[:1] == RESERVED:
        raise InvalidArgumentError(f"state key {key!r} starts with NUL, reserved for statekeep's timers, "
                                   "windows and TTL")
    return key


def check_ttl(ttl_seconds: object) -> int:
    """``ttl_seconds`` if it is an int from 1 to 10**9; :class:`InvalidArgumentError` otherwise."""
    return check_int(ttl_seconds, "ttl_seconds", minimum=1, maximum=10 ** 9)


def group_key(group: int) -> str:
    return f"{_GROUP}{group}"


def shard_key(group: int, shard: int) -> str:
    return f"{_GROUP}{group}/{shard}"


def shard_of(key: str, groups: int, shards: int) -> int:
    """The shard of a group's timers and TTL index holding ``key`` (hash bits above the group's)."""
    return zlib.crc32(key.encode()) // groups % shards


def buffer_key(key: str) -> str:
    return _BUFFER + key


def expiry_key(key: str) -> str:
    return _EXPIRY + key


def expiry_entry(key: str) -> str:
    """The state key holding ``key``'s expiry: the entry itself for a typed variable's (its expiry inline), else
    its :func:`expiry_key`."""
    return key if key.startswith(typed.PREFIX) else expiry_key(key)


def stored_expiry(key: str, raw: bytes | None) -> int | None:
    """``key``'s expiry (ms) from ``raw``, the value of its :func:`expiry_entry`; None: it has none."""
    return typed.entry_expiry(raw) if key.startswith(typed.PREFIX) else decode_expiry(raw)


def has_expiry_key(key: str) -> bool:
    """Whether ``key`` is short enough to have an expiry (its internal key within the key length limit)."""
    return valid_key(expiry_key(key))


def has_buffer_key(key: str) -> bool:
    """Whether ``key`` is short enough to have a window buffer (its internal key within the length limit)."""
    return valid_key(buffer_key(key))


def internal_owner(key: str) -> int | str:
    """What decides an internal key's key group: the group number a group entry (or one of its shards)
    names, or the user key a per-key entry embeds (its group is that key's). Anything else under the
    reserved prefix is its own owner."""
    if key.startswith(_GROUP):
        return int(key[len(_GROUP):].partition("/")[0])
    if key.startswith(typed.PREFIX):  # a typed variable's entry (statekeep.state.typed), or a window's records
        owner = typed.owner(key)
        return key if owner is None else owner
    return key[3:] if key[:3] in (_BUFFER, _EXPIRY) else key


def decode_group(raw: bytes | None, key: str = _GROUP) -> dict[str, Any]:
    """A group entry (kept at state key ``key``) as a dict with ``wm`` (int or None), ``t`` and ``x``;
    :class:`CorruptRecordError` naming ``key`` if it is not one."""
    data: dict[str, Any] = jsonrecords.decode(raw, key, "time group") if raw else {}
    return {"wm": None, "t": {}, "x": {}, **data}


def encode_group(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def decode_expiry(raw: bytes | None) -> int | None:
    return int(raw) if raw else None


def encode_expiry(expires_ms: int) -> bytes:
    return str(int(expires_ms)).encode()


# ---- user-visible reads ------------------------------------------------------------------------

def visible_entry(store: Any, key: str, now_ms: int | None = None) -> Any:
    """``store.get_entry(key)`` as a user sees it: None for an internal key or an expired one."""
    if is_internal(key):
        return None
    if not has_expiry_key(key):
        return store.get_entry(key)
    found = store.get_entries([key, expiry_key(key)])
    entry = found.get(key)
    if entry is None:
        return None
    expiry = found.get(expiry_key(key))
    if expiry is not None and int(expiry.value) <= (wall_clock_ms() if now_ms is None else now_ms):
        return None
    return entry


def visible_entries(store: Any, prefix: str = "", start_after: str | None = None, limit: int | None = None,
                    now_ms: int | None = None) -> Iterator[Any]:
    """``store.scan_entries(...)`` without internal and expired keys (``limit`` counts what is shown)."""
    now = wall_clock_ms() if now_ms is None else now_ms
    after = start_after
    if not prefix and (after is None or after < _PAST_INTERNAL):
        after = _PAST_INTERNAL  # every internal key sorts before it: a listing never pages through them
    shown = 0
    page = max(64, min(limit or 1000, 1000) + 1)
    while True:
        entries = list(store.scan_entries(prefix, after, page))
        if not entries:
            return
        user = [e for e in entries if not is_internal(e.key)]
        asked = [expiry_key(e.key) for e in user if has_expiry_key(e.key)]
        expiries = {k[3:]: e for k, e in store.get_entries(asked).items()} if asked else {}
        for entry in user:
            expiry = expiries.get(entry.key)
            if expiry is not None and int(expiry.value) <= now:
                continue
            yield entry
            shown += 1
            if limit is not None and shown >= limit:
                return
        if len(entries) < page:
            return
        after = entries[-1].key


def visible_records(store: Any, after: int = -1, last: int | None = None, prefix: str = "",
                    page: int = 10_000, *, partition: int = 0, variables: bool = False) -> Iterator[ChangelogRecord]:
    """``store.read_partition_changelog(partition, ...)`` as a user reads it: the records after offset
    ``after`` up to ``last`` (included; None: to the end), in offset order, of the keys starting with
    ``prefix``, never one of an internal key but, with ``variables``, those of typed variables' entries
    (:func:`statekeep.state.typed.decoded_entry` shows them). Offsets stay the changelog's (a reader resumes
    after the last one it saw). Per-key stores have one partition, 0."""
    while last is None or after < last:
        shown, read_to = visible_page(store, after, page, prefix, partition=partition, variables=variables)
        if read_to == after:
            return
        for r in shown:
            if last is not None and r.offset > last:
                return
            yield r
        after = read_to


def visible_page(store: Any, after: int, limit: int, prefix: str = "", *,
                 partition: int = 0, variables: bool = False) -> tuple[list[ChangelogRecord], int]:
    """One page of :func:`visible_records`: the user-visible records among the next ``limit`` of
    ``partition`` after ``after``, and the offset the page read to (``after``: nothing new)."""
    records = store.read_partition_changelog(partition, after, limit)
    shown = [r for r in records if _user_record(r.key, prefix, variables)]
    return shown, records[-1].offset if records else after


def _user_record(key: str, prefix: str, variables: bool) -> bool:
    if key[:1] != RESERVED:
        return key.startswith(prefix)
    found = typed.entry_variable(key) if variables else None  # a variable's entry: its record key decides
    return found is not None and found[0].startswith(prefix)


def recent_records(store: Any, limit: int, *, variables: bool = False) -> list[tuple[int, ChangelogRecord]]:
    """The newest ``limit`` user-visible records (``variables``: with typed variables' entries, as
    :func:`visible_records`) of each changelog partition, as ``(partition, record)``, partition by partition,
    each oldest first (the console's changelog page)."""
    out: list[tuple[int, ChangelogRecord]] = []
    for p in range(store.changelog_partitions()):
        pos = store.partition_position(p)
        # per-key offsets are dense: a little further back holds the newest; partition-owned offsets are
        # sparse (seq << 32 | index): its records since the snapshot, a bounded read
        after = (pos.purged_offset if Capability.PARTITIONED in store.capabilities
                 else max(-1, pos.last_offset - 4 * limit))
        out += [(p, r) for r in list(visible_records(store, after, pos.last_offset, partition=p,
                                                      variables=variables))[-limit:]]
    return out


def timers_of(store: Any) -> list[dict[str, Any]]:
    """Every registered timer of a function (the dedicated view of its timers): ``[{"key", "timestamp",
    "domain"}]`` sorted by time, domain ``event``, ``processing`` or ``window`` (a window's end)."""
    names = {"e": "event", "p": "processing", "w": "window"}
    out: list[dict[str, Any]] = []
    for entry in store.scan_entries(_GROUP):
        for key, timers in decode_group(entry.value, entry.key)["t"].items():
            out.extend({"key": key or None, "timestamp": ts, "domain": names.get(d, d)} for ts, d in timers)
    return sorted(out, key=lambda t: (t["timestamp"], t["key"] or "", t["domain"]))


def stored_watermark_of(store: Any) -> int | None:
    """The function's event-time watermark as its committed state holds it (None before any)."""
    marks = [decode_group(e.value, e.key)["wm"] for e in store.scan_entries(_GROUP)]
    return max((m for m in marks if m is not None), default=None)
