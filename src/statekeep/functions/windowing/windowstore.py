"""Where a key's windows keep their records (:class:`WindowEntries`, the storage side of
:class:`statekeep.functions.windowing.windows.Windows`).

A key's open windows are one state entry (:func:`statekeep.state.timestate.buffer_key`, msgpack). Each time window and
session holds its records as one list, in one of two places by one rule: inline, its ``[ts, record]`` pairs in the
key's entry, while that entry stays under :func:`inline_limit`; past it, every inline list of the key moves (at the
batch's end, :meth:`WindowEntries.flush`) onto list entries under the key, one per record, numbered from 0 and
appended without reading the others (so a window has no size limit but the store's), the key's entry then keeping
only the list's count. A window in the key's entry costs one write per batch however many records join it; one on
its list, a write per record. Count windows keep a list on entries with its bounds (``f``, ``e``) in the key's
entry, as a count window slides by deleting its oldest.
"""

from __future__ import annotations

from typing import Any

import msgspec

from statekeep.errors import InvalidArgumentError
from statekeep.functions.messaging.jsonscan import loads_at
from statekeep.state.timekeeping import TimeState
from statekeep.functions.windowing.windowtypes import _list
from statekeep.state.timestate import buffer_key, has_buffer_key
from statekeep.state.typed import delete_elements, element_key, read_elements

_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder().decode

#: a key's windows keep their records in its entry (inline) up to this size, or a quarter of the store's value limit
INLINE_BYTES = 16 * 1024


def read_buffer(raw: bytes) -> Any:
    """A key's windows entry: msgpack, as its records' lists are (so a record is kept as it came, bytes too), or
    the JSON that versions before inline lists wrote (a map in msgpack never starts with ``{``)."""
    return loads_at(raw.decode()) if raw[:1] == b"{" else _unpack(raw)


def inline_limit(max_value_size: int) -> int:
    """The size of a key's entry past which its windows' records move onto their lists (see the module)."""
    return min(INLINE_BYTES, max_value_size // 4)


class WindowEntries:
    """The entries of one (batch, partition)'s windows of ``kind`` (time, session or count): each key's entry,
    read once and written at :meth:`flush`, and its lists' elements."""

    def __init__(self, kind: str, time: TimeState) -> None:
        self.kind, self.time = kind, time
        self._open: dict[str, Any] = {}
        self._dirty: set[str] = set()

    # ---- a key's entry -------------------------------------------------------------------------

    def _buffer(self, key: str) -> Any:
        buffer = self._open.get(key)
        if buffer is None:
            raw = self.time.state.get(buffer_key(key))
            buffer = self._open[key] = read_buffer(raw) if raw else {}
            if self._earlier(buffer):
                self._upgrade(key, buffer)
        return buffer

    def _earlier(self, buffer: dict[str, Any]) -> bool:
        """Whether an earlier version wrote the key's entry in a form this one does not read (see :meth:`_upgrade`);
        a time window's records in the key's entry are its inline list."""
        if self.kind == "time":
            return False
        return "r" in buffer or any(len(s) == 3 and s[2].__class__ is list for s in buffer.get("s", ()))

    def _upgrade(self, key: str, buffer: dict[str, Any]) -> None:
        """Move the records an earlier version kept in the key's entry (a count buffer's ``r``, a session's third
        item) into the lists this version reads: the count windows' list, a session's one inline list."""
        if self.time.state.journal is not None:  # taken back: the entry is read again, as stored
            self.time.state.journal.append(lambda: self._open.pop(key, None))
        if "r" in buffer:
            records = buffer.pop("r")
            for n, item in enumerate(records):
                self._push(key, "c", n, item)
            buffer.update(f=0, e=len(records))
        for i, session in enumerate(buffer.get("s", ())):
            if len(session) == 3 and session[2].__class__ is list:
                number = buffer["i"] = buffer.get("i", 0) + 1
                buffer["s"][i] = [session[0], session[1], [[number, session[2]]], len(session[2])]
        self._touch(key)

    def _push(self, key: str, name: str, n: int, item: Any) -> None:
        """Write ``item`` as element ``n`` of the list ``name`` of ``key`` (its bounds are the key entry's)."""
        self.time.state.put(element_key(_list(key, name), n), _pack(item))

    def _items(self, key: str, name: str, first: int, end: int, *, drop: int = 0) -> list[Any]:
        """Elements ``first`` to ``end`` - 1 of the list ``name`` of ``key``, in order; the first ``drop`` of them
        deleted with the batch."""
        prefix, state = _list(key, name), self.time.state
        items = [_unpack(raw) for _, raw in read_elements(state, prefix, first, end) if raw is not None]
        delete_elements(state, prefix, first, first + drop)
        return items

    def prefetch(self, keys: list[str]) -> None:
        self.time.state.prefetch([buffer_key(k) for k in keys if has_buffer_key(k)])

    def _touch(self, key: str) -> None:
        self._dirty.add(key)

    def flush(self) -> None:
        """Write the changed buffers (an empty one is deleted) into the batch's buffer; a key's entry past
        :func:`inline_limit` first moves its inline lists onto list entries."""
        state = self.time.state
        limit = inline_limit(state.max_value_size)
        for key in sorted(self._dirty):
            buffer = self._open[key]
            empty = buffer.get("e") == buffer.get("f") if self.kind == "count" else not buffer.keys() - {"i"}
            encoded = None if empty else _pack(buffer)
            if encoded is not None and len(encoded) > limit and self._spill(key, buffer):
                encoded = _pack(buffer)
            if encoded is not None and len(encoded) > state.max_value_size:
                raise InvalidArgumentError(f"key {key!r}'s open windows take {len(encoded)} bytes, over the state "
                                           f"store's limit of {state.max_value_size}: shorter windows "
                                           "or smaller records")
            state.put(buffer_key(key), encoded)
        self._dirty.clear()

    def _spill(self, key: str, buffer: dict[str, Any]) -> bool:
        """Move every inline list of ``key`` onto its list entries (elements 0 up), leaving its count in the
        key's entry; whether any moved."""
        moved = False
        if self.kind == "time":
            for slot, held in buffer.items():
                if held.__class__ is list:
                    buffer[slot], moved = self._onto_entries(key, f"{slot}w", held), True
        for session in buffer.get("s", ()) if self.kind == "session" else ():
            for part in session[2] if session[2].__class__ is list else ():
                if part[1].__class__ is list:
                    part[1], moved = self._onto_entries(key, f"{part[0]}s", part[1]), True
        return moved

    def _onto_entries(self, key: str, name: str, items: list[Any]) -> int:
        """Write the inline list ``items`` as the elements of the list ``name`` of ``key``; their count."""
        for n, item in enumerate(items):
            self._push(key, name, n, item)
        return len(items)

    def _records(self, key: str, name: str, held: Any) -> list[Any]:
        """A firing window's list ``name`` of ``key``: inline (``held``), or its ``held`` entries, deleted."""
        return held if held.__class__ is list else self._take(key, name, held)

    # ---- a list's elements ---------------------------------------------------------------------

    def _names(self, key: str, name: str, count: int) -> list[str]:
        """The entries of the list ``name`` of ``key`` holding ``count`` elements: its elements, then the bounds
        entry an earlier version wrote beside a time window's."""
        prefix = _list(key, name)
        return [element_key(prefix, n) for n in range(count)] + [prefix + "#"]

    def _take(self, key: str, name: str, count: int) -> list[Any]:
        """The list ``name`` of ``key`` (``count`` ``[ts, record]`` elements), in arrival order, deleted with the
        batch."""
        state, prefix = self.time.state, _list(key, name)
        state.prefetch(self._names(key, name, count))  # with the bounds entry: one read
        records = [_unpack(raw) for _, raw in read_elements(state, prefix, 0, count) if raw is not None]
        delete_elements(state, prefix, 0, count)
        if state.get(prefix + "#") is not None:
            state.put(prefix + "#", None)
        return records
