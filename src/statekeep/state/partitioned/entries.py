"""The one byte format of state blobs: segments and snapshots, of partition-owned state and of function
snapshots (:mod:`statekeep.changelog.snapshots`) alike.

A blob is a magic (:data:`SEGMENT` or :data:`SNAPSHOT`) then entries; an entry is ``>HI`` (key length,
value length), the UTF-8 key and the stored entry (:mod:`statekeep.state.records`: ``version + tagged
value``, or in a segment, for a deletion, ``version + b"D" + deletion time``). A segment holds one
commit's changes in order, a snapshot every live key in key order. Applying an entry to a local copy is
one LMDB put (or delete), so restoring is a sequential read and a bulk put, with no per-key decoding.
Both are written and read in chunks: memory stays bounded by a chunk whatever the number of entries.

Integrity is the blob store's: it checks each blob's size and sha256 on the read that reaches its end
(readers act on what they read only once it is exhausted). A magic that is not ours, or entries that
overrun the blob, raise :class:`CorruptStateError` naming the blob.

LEGACY, read only: function snapshots written before this format (magic ``SKSNAP1``: a JSON header,
entries ``>HcQI`` = key length, tag, version, value length, then key and value, and a trailer ``u16
0xFFFF, u64 entry count``) are read as snapshots by :func:`decode`; nothing writes them any more.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Iterable, Iterator

from statekeep.errors import CorruptStateError

SEGMENT, SNAPSHOT = b"SKSEG1\n", b"SKSNP1\n"
CHUNK = 1 << 20
_ENTRY = struct.Struct(">HI")

Source = bytes | Callable[[int], bytes]


def encode(kind: bytes, entries: Iterable[tuple[bytes, bytes]], chunk_size: int = CHUNK) -> Iterator[bytes]:
    """A segment or snapshot (``kind``) of ``(key, stored entry)`` pairs, as chunks of about
    ``chunk_size`` bytes (what :meth:`BlobStore.write` takes)."""
    pack = _ENTRY.pack
    buf = bytearray(kind)
    for key, value in entries:
        buf += pack(len(key), len(value))
        buf += key
        buf += value
        if len(buf) >= chunk_size:
            yield bytes(buf)
            buf.clear()
    yield bytes(buf)


def decode(kind: bytes, source: Source, where: str, *, key_prefix: bytes = b"",
           chunk_size: int = CHUNK) -> Iterator[tuple[bytes, bytes]]:
    """The ``(key, stored entry)`` pairs of a blob of ``kind`` (a snapshot: also a legacy one), read to its
    end from ``source``: the blob's bytes, or a ``read(n)`` returning ``n`` bytes except at the end. With
    ``key_prefix``, only the keys that start with it; in a snapshot (key order) decoding stops after the
    prefix's range and the rest is read raw (the blob reader checks the sha256 at the end).
    :class:`CorruptStateError` naming ``where`` if the blob is not ours or is truncated."""
    read = io.BytesIO(source).read if isinstance(source, bytes) else source
    magic = read(len(kind))
    if kind == SNAPSHOT and magic == _LEGACY[:len(kind)]:
        pairs = _legacy(read, where)
    elif magic != kind:
        raise CorruptStateError(f"{where} is not a statekeep {'segment' if kind == SEGMENT else 'snapshot'}")
    else:
        pairs = _pairs(read, where, len(kind), key_prefix if kind == SNAPSHOT else b"", chunk_size)
    if not key_prefix:
        return pairs
    return _select(pairs, read, key_prefix, kind == SNAPSHOT)


def _pairs(read: Callable[[int], bytes], where: str, position: int, skip_below: bytes,
           chunk_size: int) -> Iterator[tuple[bytes, bytes]]:
    """The entries of the current format; those whose key sorts below ``skip_below`` are stepped over
    without being copied (a snapshot's prefix read)."""
    buf, pos, unpack = b"", 0, _ENTRY.unpack_from
    while True:
        end = len(buf)
        if end - pos >= 6:
            key_len, value_len = unpack(buf, pos)
            start = pos + 6
            stop = start + key_len + value_len
            if stop <= end:
                if skip_below and buf[start:start + key_len] < skip_below:
                    pos = stop
                    continue
                yield buf[start:start + key_len], buf[start + key_len:stop]
                pos = stop
                continue
        more = read(chunk_size)
        if not more:
            if pos < end:
                raise CorruptStateError(f"{where} is truncated at byte {position + pos}")
            return
        position += pos
        buf, pos = buf[pos:] + more, 0


def _select(pairs: Iterator[tuple[bytes, bytes]], read: Callable[[int], bytes], key_prefix: bytes,
            ordered: bool) -> Iterator[tuple[bytes, bytes]]:
    for key, value in pairs:
        if key.startswith(key_prefix):
            yield key, value
        elif ordered and key > key_prefix:  # past the prefix's range: the rest only raw, to the end
            while read(CHUNK):
                pass
            return


# ---- LEGACY: function snapshots written before this format (read only) -------------------------

_LEGACY = b"SKSNAP1\n"
_LEGACY_ENTRY = struct.Struct(">HcQI")
_LEGACY_END = 0xFFFF
_U64 = struct.Struct(">Q")


def _legacy(read: Callable[[int], bytes], where: str) -> Iterator[tuple[bytes, bytes]]:
    """The entries of a legacy snapshot (its magic's first bytes already read) as current pairs."""
    rest = read(len(_LEGACY) - len(SNAPSHOT) + 4)
    if len(rest) < 5 or rest[:1] != _LEGACY[-1:]:
        raise CorruptStateError(f"{where} is not a statekeep snapshot")
    size = struct.unpack_from(">I", rest, 1)[0]
    if len(read(size)) != size:  # the JSON header: the handle's attributes say the same
        raise CorruptStateError(f"{where}: the snapshot header is truncated")
    count = 0
    while True:
        head = read(2)
        if len(head) == 2 and head == b"\xff\xff":
            trailer = read(9)
            if len(trailer) != 8 or _U64.unpack(trailer)[0] != count:
                raise CorruptStateError(f"{where}: the snapshot holds {count} entries, its trailer disagrees")
            return
        head += read(_LEGACY_ENTRY.size - 2)
        if len(head) < _LEGACY_ENTRY.size:
            raise CorruptStateError(f"{where} ends after {count} entries without its trailer")
        key_len, tag, version, value_len = _LEGACY_ENTRY.unpack(head)
        body = read(key_len + value_len)
        if len(body) < key_len + value_len or tag not in b"BC" or (tag == b"C" and value_len != 8):
            raise CorruptStateError(f"{where}: snapshot entry {count} is truncated or has an unknown tag {tag!r}")
        count += 1
        yield body[:key_len], _U64.pack(version) + tag + body[key_len:]
