"""The one codec of stored state: stored values, stored entries and changelog records, used by every
provider, follower, snapshot and segment. All are compact binary, not JSON.

Stored value (the metadata value at ``.../kv/<segment>``): one tag byte, then the payload.

- ``b"B" + bytes``: a byte value, exactly as put.
- ``b"C" + 8 bytes``: a counter, signed 64-bit big-endian (PIP-312's counter form).

The tag is what lets the REST API answer ``numberValue`` for counters and ``stringValue``/``byteValue``
otherwise, and what makes ``incr`` refuse a key that holds bytes.

Stored entry (a value in an LMDB of the embedded provider, of partition-owned state's local copies, of
a follower's copy, and in segments and snapshots): ``version (8 bytes, big-endian) + stored value``,
or in a segment, for a deletion, ``version + b"D" + deletion time (8 bytes, ms)``.

Changelog record (the value at ``.../log/r<offset>``): ``struct ">cqH"`` = tag, version, key length,
then the UTF-8 key, then the payload. Tag ``B``/``C`` as above (the new value after the change),
``D`` a tombstone, whose payload is the deletion time (8-byte big-endian milliseconds since the epoch;
compaction keeps a tombstone for a retention period measured from it; a tombstone with an empty
payload, written before times were recorded, counts as infinitely old). ``version`` is the key's
version after the change (for a tombstone: the version that was deleted). The offset is not inside
the record: it is the record's sequence number, assigned by the store in the same atomic write.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

from statekeep.errors import CorruptStateError, CounterOverflowError, InvalidArgumentError

BYTES, COUNTER, TOMBSTONE = b"B", b"C", b"D"
_COUNTER = struct.Struct(">q")
_VERSION = struct.Struct(">Q")
_COUNTER_ENTRY = struct.Struct(">Qcq")  # the stored entry of a counter: version, tag, value
#: the byte of a stored entry that holds its tag (after the version)
TAG_AT = 8
TOMBSTONE_TAG = TOMBSTONE[0]
_COUNTER_TAG = COUNTER[0]
RECORD_FORMAT = ">cqH"  # tag, version, key length
_RECORD = struct.Struct(RECORD_FORMAT)
RECORD_HEADER_SIZE = _RECORD.size
COUNTER_MIN, COUNTER_MAX = -(1 << 63), (1 << 63) - 1

Kind = Literal["bytes", "counter"]


def encode_bytes(value: bytes) -> bytes:
    return BYTES + value


def encode_counter(value: int) -> bytes:
    return COUNTER + _COUNTER.pack(value)


def counter_bytes(value: int) -> bytes:
    """The 8-byte big-endian form of a counter (what ``get`` returns for a counter key)."""
    return _COUNTER.pack(value)


def decode_stored(raw: bytes, path: str = "") -> tuple[Kind, bytes]:
    """``(kind, payload)`` of a stored value; a counter's payload is its 8 bytes.
    Raises :class:`CorruptStateError` for a value no provider wrote."""
    tag = raw[:1]
    if tag == BYTES:
        return "bytes", raw[1:]
    if tag == COUNTER and len(raw) == 9:
        return "counter", raw[1:]
    raise CorruptStateError(f"state value at {path or '?'} is not in statekeep's format "
                            f"(tag {tag!r}, {len(raw)} bytes)")


def decode_counter(payload: bytes) -> int:
    value: int = _COUNTER.unpack(payload)[0]
    return value


class StateEntry(NamedTuple):
    """One key's value. ``value`` is the raw bytes (a counter's 8-byte big-endian form)."""

    key: str
    value: bytes
    kind: Kind
    version: int

    @property
    def counter(self) -> int | None:
        """The counter's value, or None when the key holds bytes."""
        return decode_counter(self.value) if self.kind == "counter" else None


# ---- stored entries: version + stored value -------------------------------------------------------

_new_entry = tuple.__new__


def encode_value(kind: Kind | None, value: bytes) -> bytes:
    """The stored value of a value of ``kind`` (a counter's ``value``: its 8-byte form)."""
    return (COUNTER if kind == "counter" else BYTES) + value


def entry_bytes(version: int, kind: Kind | None, value: bytes) -> bytes:
    """The stored entry of a value of ``kind`` at ``version``."""
    return _VERSION.pack(version) + encode_value(kind, value)


def tombstone_entry(version: int, deleted_ms: int) -> bytes:
    """The stored entry of a deletion (in a segment) of ``version`` at ``deleted_ms``."""
    return _VERSION.pack(version) + TOMBSTONE + _VERSION.pack(deleted_ms)


def entry_version(raw: bytes) -> int:
    version: int = _VERSION.unpack_from(raw)[0]
    return version


def decode_entry(key: str, raw: bytes) -> StateEntry:
    """The :class:`StateEntry` of ``key`` stored as ``raw``; :class:`CorruptStateError` naming ``key``
    if it is not the stored entry of a value (a tombstone is not)."""
    if len(raw) < 9:
        raise CorruptStateError(f"state key {key!r} holds {len(raw)} bytes, not a stored entry")
    kind, payload = decode_stored(raw[8:], repr(key))
    return _new_entry(StateEntry, (key, payload, kind, _VERSION.unpack_from(raw)[0]))


def entry_value(key: str, raw: bytes | None) -> bytes | None:
    """What ``get`` answers for ``key`` stored as ``raw`` (None: absent); :class:`CorruptStateError`."""
    if raw is None:
        return None
    tag = raw[8:9]
    if tag == BYTES or (tag == COUNTER and len(raw) == 17):
        return raw[9:]
    return decode_entry(key, raw).value  # raises


def entry_counter(key: str, raw: bytes | None) -> int:
    """What ``get_counter`` answers for ``key`` stored as ``raw`` (0: absent); :class:`InvalidArgumentError`
    if it holds bytes, :class:`CorruptStateError` if it is not a stored entry."""
    if raw is None:
        return 0
    if raw[8:9] == COUNTER and len(raw) == 17:
        return _COUNTER.unpack_from(raw, 9)[0]  # type: ignore[no-any-return]
    decode_entry(key, raw)  # raises for garbage
    raise InvalidArgumentError(f"state key {key!r} holds bytes, not a counter")


def entry_record(key: bytes, raw: bytes, offset: int = -1) -> ChangelogRecord:
    """A stored entry (a deletion included) as the changelog record of that change of ``key`` (UTF-8)."""
    name = key.decode()
    if raw[8:9] == TOMBSTONE and len(raw) == 17:
        return ChangelogRecord(name, None, None, entry_version(raw), offset, _VERSION.unpack_from(raw, 9)[0])
    entry = decode_entry(name, raw)
    return ChangelogRecord(name, entry.kind, entry.value, entry.version, offset)


def plan_batch(get: Callable[[bytes], bytes | None], values: Mapping[str, bytes | None],
               deltas: Mapping[str, int], now_ms: int, prefix: bytes = b"") -> list[tuple[bytes, bytes]]:
    """The ``(key, stored entry)`` changes of ``apply_batch(values, deltas)`` over the stored entries
    ``get(prefix + key)`` returns: puts (``values``: stored value, or None to delete: a :func:`tombstone_entry`
    of a present key, at ``now_ms``), then counter deltas; each key once. Every provider that stores entries
    plans its writes here. Raises before returning anything: :class:`CounterOverflowError`, or
    :class:`InvalidArgumentError` for a delta on a key that holds bytes."""
    changes: list[tuple[bytes, bytes]] = []
    append, pack, unpack_version = changes.append, _VERSION.pack, _VERSION.unpack_from
    pack_counter, unpack_counter = _COUNTER_ENTRY.pack, _COUNTER_ENTRY.unpack
    for key in (dict.fromkeys([*values, *deltas]) if values else deltas):
        raw_key = key.encode()
        raw = get(prefix + raw_key)
        delta = deltas.get(key)
        if delta is None:
            version = 0 if raw is None else unpack_version(raw)[0] + 1
            stored = values[key]
            if stored is None:
                if raw is not None:
                    append((raw_key, tombstone_entry(version - 1, now_ms)))
                continue
            append((raw_key, pack(version) + stored))
            continue
        if raw is None:
            version, total = 0, delta
        elif len(raw) == 17 and raw[8] == _COUNTER_TAG:  # a stored counter: its version and value in one unpack
            version, _, total = unpack_counter(raw)
            version, total = version + 1, (delta if key in values else total + delta)
        else:
            version = unpack_version(raw)[0] + 1
            total = delta if key in values else entry_counter(key, raw) + delta  # raises: bytes, or no entry
        if not COUNTER_MIN <= total <= COUNTER_MAX:
            raise CounterOverflowError(f"counter {key!r} would overflow a signed 64-bit integer")
        append((raw_key, pack_counter(version, COUNTER, total)))
    return changes


def entry_change_record(key: bytes, entry: bytes) -> bytes:
    """The changelog record of the change that left ``key`` (UTF-8) stored as ``entry`` (a deletion's
    :func:`tombstone_entry` included): the same fields, in the record's order."""
    return entry[8:9] + entry[:8] + len(key).to_bytes(2, "big") + key + entry[9:]


@dataclass(frozen=True, slots=True)
class ChangelogRecord:
    """One change of one key. ``value`` is None for a tombstone; ``offset`` comes from the record's name."""

    key: str
    kind: Kind | None
    value: bytes | None
    version: int
    offset: int = -1
    #: a tombstone's deletion time (ms since the epoch); None for values and for untimed tombstones
    deleted_ms: int | None = None

    @property
    def tombstone(self) -> bool:
        return self.value is None


def encode_record(key: str, stored: bytes | None, version: int) -> bytes:
    """A changelog record for ``key`` now holding the stored value ``stored`` (None: deleted now)."""
    raw_key = key.encode("utf-8")
    if stored is None:
        return _RECORD.pack(TOMBSTONE, version, len(raw_key)) + raw_key + _COUNTER.pack(int(time.time() * 1000))
    return _RECORD.pack(stored[:1], version, len(raw_key)) + raw_key + stored[1:]


def decode_record(raw: bytes, offset: int = -1) -> ChangelogRecord:
    """Parse a record written by :func:`encode_record`; :class:`CorruptStateError` if malformed."""
    try:
        tag, version, key_len = _RECORD.unpack_from(raw)
        start = _RECORD.size
        key = raw[start : start + key_len].decode("utf-8")
        payload = raw[start + key_len :]
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptStateError(f"malformed changelog record at offset {offset}") from e
    if tag == TOMBSTONE:
        deleted_ms = _COUNTER.unpack(payload)[0] if len(payload) == 8 else None
        return ChangelogRecord(key, None, None, version, offset, deleted_ms)
    kind, value = decode_stored(tag + payload, f"changelog offset {offset}")
    return ChangelogRecord(key, kind, value, version, offset)
