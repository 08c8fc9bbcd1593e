"""The portable file of ``statekeep export`` / ``statekeep import``: versioned JSON lines.

Format version 1, UTF-8, one JSON object per line (gzip-compressed when the file name ends in
``.gz``); binary values are base64. In order:

1. header: ``{"format": "statekeep-export", "version": 1, "createdMs": ..., "sourceScheme": "local"}``
2. the records of :mod:`statekeep.migrate.records`, in their order:
   ``{"node": PATH, "value": B64}``, ``{"skipped": PATH, "reason": "ephemeral"}``,
   ``{"sequence": PARENT, "last": N}``,
   ``{"function": "T/N/F", "state": "copied"|"external", "provider": NAME}``,
   ``{"key": KEY, "kind": "bytes"|"counter", "value": B64}`` (state of the function before it)
3. trailer: ``{"end": true, "records": N, "sha256": HEX}``: the number of records and the SHA-256 of
   every byte before the trailer line (header included).

Reading streams: nothing is held in memory but one line. A file that is truncated, altered, of an
unknown version or not this format raises :class:`CorruptFileError` naming the line; since the
checksum is only known at the end, an importer checks the whole file (:func:`check_file`) before
writing anything.
"""

from __future__ import annotations

import base64
import binascii
import collections
import gzip
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from statekeep.errors import StatekeepError
from statekeep.migrate.records import Entry, Function, Node, Record, Sequence, Skipped
from statekeep.validate import check_int

FORMAT, VERSION = "statekeep-export", 1


class CorruptFileError(StatekeepError):
    """The file is not a complete, unaltered statekeep export of a known version."""


def _open(path: str | os.PathLike[str], mode: str, gz: bool | None = None) -> IO[bytes]:
    if gz is None:
        gz = str(path).endswith(".gz")
    return gzip.open(path, mode) if gz else open(path, mode)  # type: ignore[return-value]


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def encode(record: Record) -> dict[str, Any]:
    if isinstance(record, Node):
        return {"node": record.path, "value": _b64(record.value)}
    if isinstance(record, Entry):
        return {"key": record.key, "kind": record.kind, "value": _b64(record.value)}
    if isinstance(record, Skipped):
        return {"skipped": record.path, "reason": record.reason}
    if isinstance(record, Sequence):
        return {"sequence": record.parent, "last": record.last}
    if isinstance(record, Function):
        return {"function": record.fqfn, "state": record.state, "provider": record.provider}
    raise TypeError(f"not a migration record: {record!r}")


def write_file(path: str | os.PathLike[str], records: Iterable[Record], source_scheme: str) -> int:
    """Write ``records`` to ``path`` (through a temporary file renamed at the end, so an interrupted
    export never leaves a file that looks complete); returns the number of records."""
    tmp = f"{path}.partial"
    digest, count = hashlib.sha256(), 0
    with _open(tmp, "wb", gz=str(path).endswith(".gz")) as out:
        def line(obj: dict[str, Any]) -> None:
            data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            digest.update(data)
            out.write(data)

        line({"format": FORMAT, "version": VERSION, "createdMs": int(time.time() * 1000),
              "sourceScheme": source_scheme})
        for record in records:
            line(encode(record))
            count += 1
        out.write(json.dumps({"end": True, "records": count, "sha256": digest.hexdigest()}).encode() + b"\n")
    os.replace(tmp, path)
    return count


def _decode_b64(text: object, where: str) -> bytes:
    if not isinstance(text, str):
        raise CorruptFileError(f"{where}: value must be base64 text")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise CorruptFileError(f"{where}: bad base64 value") from e


def _str(obj: dict[str, object], field: str, where: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not value:
        raise CorruptFileError(f"{where}: {field!r} must be a non-empty string")
    return value


def decode(obj: object, where: str) -> Record:
    if not isinstance(obj, dict):
        raise CorruptFileError(f"{where}: not a JSON object")
    if "node" in obj:
        return Node(_str(obj, "node", where), _decode_b64(obj.get("value"), where))
    if "key" in obj:
        kind = obj.get("kind")
        if kind != "bytes" and kind != "counter":  # (not `in`: mypy narrows this to the Literal)
            raise CorruptFileError(f"{where}: kind must be 'bytes' or 'counter'")
        value = _decode_b64(obj.get("value"), where)
        if kind == "counter" and len(value) != 8:
            raise CorruptFileError(f"{where}: a counter value is 8 bytes")
        return Entry(_str(obj, "key", where), kind, value)
    if "skipped" in obj:
        return Skipped(_str(obj, "skipped", where), str(obj.get("reason", "")))
    if "sequence" in obj:
        last = check_int(obj.get("last"), f"{where}: 'last'", minimum=0, error=CorruptFileError)
        return Sequence(_str(obj, "sequence", where), last)
    if "function" in obj:
        parts = _str(obj, "function", where).split("/")
        state = obj.get("state")
        if len(parts) != 3 or not all(parts) or state not in ("copied", "external"):
            raise CorruptFileError(f"{where}: a function record needs 'T/N/F' and state 'copied' or 'external'")
        return Function(parts[0], parts[1], parts[2], str(state), str(obj.get("provider", "")))
    raise CorruptFileError(f"{where}: unknown record {sorted(obj)[:3]}")


def read_file(path: str | os.PathLike[str]) -> Iterator[Record]:
    """The records of an export file, streamed. Raises :class:`CorruptFileError` at the first problem
    (the checksum and count are checked when the trailer is reached; use :func:`check_file` first),
    ``OSError`` if it cannot be read."""
    digest, count = hashlib.sha256(), 0
    name = os.fspath(path)
    try:
        with _open(path, "rb") as src:
            first = src.readline()
            try:
                header = json.loads(first)
            except ValueError as e:
                raise CorruptFileError(f"{name}: line 1 is not JSON: not a statekeep export file") from e
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise CorruptFileError(f"{name}: not a statekeep export file (no {FORMAT!r} header)")
            if header.get("version") != VERSION:
                raise CorruptFileError(f"{name}: format version {header.get('version')!r}; this statekeep "
                                       f"reads version {VERSION}")
            digest.update(first)
            for number, line in enumerate(src, start=2):
                where = f"{name}: line {number}"
                if not line.endswith(b"\n"):
                    raise CorruptFileError(f"{where}: truncated (no end of line)")
                try:
                    obj = json.loads(line)
                except ValueError as e:
                    raise CorruptFileError(f"{where}: not JSON") from e
                if isinstance(obj, dict) and obj.get("end") is True:
                    if obj.get("records") != count or obj.get("sha256") != digest.hexdigest():
                        raise CorruptFileError(f"{where}: checksum or record count does not match the content "
                                               "(the file was altered)")
                    if src.read(1):
                        raise CorruptFileError(f"{where}: data after the end record")
                    return
                digest.update(line)
                yield decode(obj, where)
                count += 1
    except (EOFError, gzip.BadGzipFile, UnicodeDecodeError) as e:
        raise CorruptFileError(f"{name}: {e}") from e
    raise CorruptFileError(f"{name}: truncated (no end record)")


def check_file(path: str | os.PathLike[str]) -> dict[str, int]:
    """Read the whole file and count its records by kind; :class:`CorruptFileError` if anything is wrong."""
    return dict(collections.Counter(type(record).__name__ for record in read_file(path)))
