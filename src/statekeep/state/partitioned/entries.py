"""The byte layout of segments and snapshots, the durable copy of a partition's state.

Both are a header then entries; an entry is ``>HI`` (key length, value length), the UTF-8 key and the
value as the partition's LMDB stores it: ``version (8 bytes) + tagged value``
(:mod:`statekeep.state.records`: ``B`` bytes, ``C`` counter), or for a deletion in a segment
``version + b"D" + deletion time (8 bytes, ms)``. A segment holds one commit's changes in order, a
snapshot every live key in key order. Applying an entry to a partition is one LMDB put (or delete),
so restoring is a sequential read and a bulk put, with no per-key decoding.

The blob store checks each blob's size and sha256 on read; a header that is not ours, or entries that
overrun the blob, raise :class:`CorruptStateError` naming the blob.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator

from statekeep.errors import CorruptStateError
from statekeep.state import records

SEGMENT, SNAPSHOT = b"SKSEG1\n", b"SKSNP1\n"
_ENTRY = struct.Struct(">HI")
_U64 = struct.Struct(">Q")
TOMBSTONE_TAG = records.TOMBSTONE[0]


def tombstone(version: int, deleted_ms: int) -> bytes:
    """The stored form of a deletion in a segment."""
    return _U64.pack(version) + records.TOMBSTONE + _U64.pack(deleted_ms)


def encode(kind: bytes, entries: Iterable[tuple[bytes, bytes]]) -> bytes:
    """A segment or snapshot (``kind``: :data:`SEGMENT` or :data:`SNAPSHOT`) of ``(key, value)`` pairs."""
    pack = _ENTRY.pack
    parts = [kind]
    for key, value in entries:
        parts += (pack(len(key), len(value)), key, value)
    return b"".join(parts)


def decode(kind: bytes, data: bytes, where: str) -> Iterator[tuple[bytes, bytes]]:
    """The ``(key, value)`` pairs of a blob written by :func:`encode` with the same ``kind``."""
    if not data.startswith(kind):
        raise CorruptStateError(f"{where} is not a statekeep {'segment' if kind == SEGMENT else 'snapshot'}")
    view, position, end, unpack = memoryview(data), len(kind), len(data), _ENTRY.unpack_from
    while position < end:
        if position + 6 > end:
            raise CorruptStateError(f"{where} is truncated at byte {position}")
        key_len, value_len = unpack(data, position)
        start = position + 6
        position = start + key_len + value_len
        if position > end:
            raise CorruptStateError(f"{where} is truncated at byte {start}")
        yield bytes(view[start:start + key_len]), bytes(view[start + key_len:position])


def to_record(key: bytes, value: bytes, offset: int = -1) -> records.ChangelogRecord:
    """An entry as a changelog record (followers and changelog readers see these)."""
    version = _U64.unpack_from(value)[0]
    if value[8] == TOMBSTONE_TAG:
        return records.ChangelogRecord(key.decode(), None, None, version, offset, _U64.unpack_from(value, 9)[0])
    kind, payload = records.decode_stored(value[8:], key.decode())
    return records.ChangelogRecord(key.decode(), kind, payload, version, offset)
