"""The byte format of a function snapshot: a compact binary stream, written and read in chunks.

::

    b"SKSNAP1\\n"  u32 header length  header (JSON: tenant, namespace, name, offset, epoch, purged, created_ms)
    per entry:    struct ">HcQI" = key length, tag (b"B" bytes | b"C" counter), version, value length;
                  then the UTF-8 key, then the value (a counter's 8-byte big-endian form)
    trailer:      u16 0xFFFF (no key is that long), u64 entry count

Entries are in key order (as ``scan`` yields them), which restores rely on. Memory stays bounded by a
chunk whatever the number of entries; integrity is the blob store's sha256 plus the trailer's count.
The format has no index, so a reader of one key prefix (``decode(..., key_prefix=)``) cannot jump to
it: it steps over the entries before it by their lengths without decoding them, stops decoding
after the prefix's range, and reads the rest only raw, so the blob's sha256 is still checked whole.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from statekeep.errors import CorruptStateError
from statekeep.state.base import StateEntry

MAGIC = b"SKSNAP1\n"
_U32 = struct.Struct(">I")
_ENTRY = struct.Struct(">HcQI")
_TRAILER = struct.Struct(">HQ")
_END = 0xFFFF
_TAGS = {"bytes": b"B", "counter": b"C"}
_KINDS = {b"B": "bytes", b"C": "counter"}
CHUNK = 1 << 20
_new_entry = tuple.__new__


def encode(header: dict[str, Any], entries: Iterable[StateEntry], chunk_size: int = CHUNK) -> Iterator[bytes]:
    """The snapshot as chunks of about ``chunk_size`` bytes."""
    raw_header = json.dumps(header, sort_keys=True).encode()
    yield MAGIC + _U32.pack(len(raw_header)) + raw_header
    buf = bytearray()
    count = 0
    pack = _ENTRY.pack
    for entry in entries:
        key = entry.key.encode("utf-8")
        buf += pack(len(key), _TAGS[entry.kind], entry.version, len(entry.value))
        buf += key
        buf += entry.value
        count += 1
        if len(buf) >= chunk_size:
            yield bytes(buf)
            buf.clear()
    buf += _TRAILER.pack(_END, count)
    yield bytes(buf)


def decode(read: Callable[[int], bytes], chunk_size: int = CHUNK, *,
           key_prefix: bytes = b"") -> tuple[dict[str, Any], Iterator[StateEntry]]:
    """``(header, entries)`` of the stream ``read(n)`` returns; :class:`CorruptStateError` if it is not a
    whole snapshot (raised by the header read, or by the entries iterator where it breaks). With
    ``key_prefix`` (UTF-8), only the entries whose key starts with it; the stream is still read to its
    end (the blob reader checks the sha256 there), but the trailer's count is then not checked."""
    start = read(len(MAGIC) + 4)
    if len(start) < len(MAGIC) + 4 or not start.startswith(MAGIC):
        raise CorruptStateError("not a statekeep snapshot (bad magic)")
    size = _U32.unpack_from(start, len(MAGIC))[0]
    raw = read(size)
    try:
        header = json.loads(raw)
        if len(raw) != size or not isinstance(header, dict):
            raise ValueError("truncated")
    except ValueError as e:
        raise CorruptStateError(f"snapshot header is unreadable: {e}") from e
    return header, _entries(read, chunk_size, key_prefix)


def _entries(read: Callable[[int], bytes], chunk_size: int, key_prefix: bytes = b"") -> Iterator[StateEntry]:
    buf, pos, count = b"", 0, 0
    unpack = _ENTRY.unpack_from
    head = _ENTRY.size

    def more(need: int) -> bool:
        nonlocal buf, pos
        while len(buf) - pos < need:
            data = read(max(chunk_size, need))
            if not data:
                return False
            buf, pos = buf[pos:] + data, 0
        return True

    before = bool(key_prefix)  # still before the prefix's range
    while True:
        while before:  # a tight loop over the buffered entries before the range (the common case)
            if len(buf) - pos < head:
                break
            key_len, _, _, value_len = unpack(buf, pos)
            stop = pos + head + key_len + value_len
            if key_len == _END or stop > len(buf):
                break  # the trailer, or an entry not wholly buffered: the general path below
            if buf[pos + head:pos + head + key_len] >= key_prefix:
                before = False
                break
            pos = stop
            count += 1
        if not more(2):
            raise CorruptStateError(f"snapshot ends after {count} entries without its trailer")
        if buf[pos] == 0xFF and buf[pos + 1] == 0xFF:
            if not more(_TRAILER.size):
                raise CorruptStateError("snapshot trailer is truncated")
            expected = _TRAILER.unpack_from(buf, pos)[1]
            if expected != count or more(_TRAILER.size + 1):
                raise CorruptStateError(f"snapshot holds {count} entries, its trailer says {expected} (or trails data)")
            return
        if not more(head):
            raise CorruptStateError("snapshot entry header is truncated")
        key_len, tag, version, value_len = unpack(buf, pos)
        if not more(head + key_len + value_len):
            raise CorruptStateError("snapshot entry is truncated")
        kind = _KINDS.get(tag)
        start = pos + head
        if key_prefix and not buf.startswith(key_prefix, start, start + key_len):
            if buf[start:start + key_len] > key_prefix:  # past the prefix's range (keys are sorted)
                while read(max(chunk_size, 1 << 20)):  # the rest only raw: the reader checks the sha256
                    pass
                return
            pos = start + key_len + value_len  # before the range: stepped over, not decoded
            count += 1
            continue
        if kind is None or (kind == "counter" and value_len != 8):
            raise CorruptStateError(f"snapshot entry {count} has an unknown tag {tag!r}")
        try:
            key = buf[start:start + key_len].decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptStateError(f"snapshot entry {count} has a key that is not UTF-8") from e
        value = buf[start + key_len:start + key_len + value_len]
        pos = start + key_len + value_len
        count += 1
        yield _new_entry(StateEntry, (key, value, kind, version))
