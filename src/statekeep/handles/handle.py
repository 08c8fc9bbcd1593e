"""``StateHandle``: the small pointer kept in the metadata store for one large state held as a blob.

Stored as JSON (never the state bytes)::

    {"format": 1, "blob": "file:///blobs/.../1700000000000-<uuid>.blob", "size": 1073741824,
     "sha256": "<hex>", "created_ms": 1700000000000, "attributes": {"offset": 42}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekeep import jsonrecords
from statekeep.errors import CorruptStateError, InvalidArgumentError

if TYPE_CHECKING:
    from statekeep.handles.blobs import BlobRef, BlobStore
    from statekeep.handles.reader import BlobReader

FORMAT = 1
#: Largest encoded ``attributes``: they are for small facts about the state (an offset, a schema id).
MAX_ATTRIBUTES_SIZE = 16 * 1024


@dataclass(frozen=True)
class StateHandle:
    """A retrievable state: ``key`` at metadata ``version``, pointing to a blob of ``size`` bytes whose
    sha256 is ``sha256``. ``attributes`` are the small JSON facts stored with it (read-only).

    :meth:`open` streams the state and checks it; :meth:`read_bytes` returns it whole. Both raise
    :class:`CorruptStateError` if the blob is missing, truncated or differs from its checksum, and
    :class:`BlobStorageError` if blob storage fails.
    """

    key: str
    version: int
    blob_url: str
    size: int
    sha256: str
    created_ms: int
    attributes: Mapping[str, Any] = field(default_factory=dict, hash=False)
    _blobs: BlobStore | None = field(default=None, repr=False, compare=False, hash=False)

    def open(self) -> BlobReader:
        """A binary stream of the state, read ahead in chunks (memory stays bounded). ``read(n)`` returns
        ``n`` bytes unless at the end; the read that reaches the end verifies size and checksum, so act on
        the bytes only once the end was read without error. Use as a context manager."""
        if self._blobs is None:
            raise InvalidArgumentError("this handle is not bound to blob storage")
        try:
            return self._blobs.open(self.blob_url, self.size, self.sha256)
        except CorruptStateError as e:
            raise CorruptStateError(f"state handle {self.key!r}: {e}") from e

    def read_bytes(self) -> bytes:
        """The whole state, verified (for states that fit in memory)."""
        with self.open() as reader:
            try:
                return reader.read()
            except CorruptStateError as e:
                raise CorruptStateError(f"state handle {self.key!r}: {e}") from e


def check_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """``attributes`` as a JSON-ready dict, or :class:`InvalidArgumentError`."""
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping) or not all(isinstance(k, str) for k in attributes):
        raise InvalidArgumentError("attributes must be a mapping with str keys")
    try:
        encoded = json.dumps(dict(attributes), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"attributes must be JSON-serializable: {e}") from e
    if len(encoded) > MAX_ATTRIBUTES_SIZE:
        raise InvalidArgumentError(f"attributes take {len(encoded)} bytes as JSON; at most {MAX_ATTRIBUTES_SIZE} "
                                   "are allowed (put large data in the state itself)")
    decoded: dict[str, Any] = json.loads(encoded)
    return decoded


def encode(ref: BlobRef, attributes: dict[str, Any]) -> bytes:
    return json.dumps({"format": FORMAT, "blob": ref.url, "size": ref.size, "sha256": ref.sha256,
                       "created_ms": ref.created_ms, "attributes": attributes},
                      separators=(",", ":")).encode()


def decode(key: str, version: int, raw: bytes, blobs: BlobStore | None) -> StateHandle:
    """The handle stored as ``raw``; :class:`CorruptRecordError` (a :class:`CorruptStateError`) naming
    ``key`` if it is not a state handle."""
    def build(data: dict[str, Any]) -> StateHandle:
        if data.get("format") != FORMAT:
            raise ValueError(f"unknown handle format {data.get('format')!r}")
        return StateHandle(key, version, str(data["blob"]), int(data["size"]), str(data["sha256"]),
                           int(data["created_ms"]), dict(data.get("attributes") or {}), blobs)

    return jsonrecords.decode(raw, key, "state handle", build)
