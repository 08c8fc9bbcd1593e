"""Serdes of Kafka's own byte forms, for functions that name them (``inputSpecs``' ``serdeClassName``,
``outputSerdeClassName``, ``publish``'s ``serde_class_name``) as they name Pulsar's: ``statekeep.serde.StringSerDe``.

Pulsar's default serde (``serde.IdentitySerDe``) gives bytes that are not UTF-8 as bytes; these refuse what is not
their form, with an error naming it (the record fails, or goes to the dead-letter topic).
"""

from __future__ import annotations

import json
import struct
from typing import Any

from statekeep.errors import InvalidArgumentError


class StringSerDe:
    """UTF-8 text, as Kafka's ``Serdes.String()``: a value that is not UTF-8 raises :class:`InvalidArgumentError`."""

    def serialize(self, value: Any) -> bytes:
        return str(value).encode("utf-8")

    def deserialize(self, data: bytes) -> str:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidArgumentError(f"the value is not UTF-8 text ({e.reason} at byte {e.start} of "
                                       f"{len(data)}), as StringSerDe needs") from None


class LongSerDe:
    """A 64-bit signed big-endian integer, as Kafka's ``Serdes.Long()`` (and statekeep's counters): 8 bytes."""

    def serialize(self, value: Any) -> bytes:
        return struct.pack(">q", int(value))

    def deserialize(self, data: bytes) -> int:
        if len(data) != 8:
            raise InvalidArgumentError(f"a long is 8 bytes, not {len(data)}, as LongSerDe needs")
        number: int = struct.unpack(">q", data)[0]
        return number


class JsonSerDe:
    """JSON in UTF-8, as Kafka Streams' JSON serdes write it."""

    def serialize(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode("utf-8")

    def deserialize(self, data: bytes) -> Any:
        try:
            return json.loads(data)
        except ValueError as e:
            raise InvalidArgumentError(f"the value is not JSON ({e}), as JsonSerDe needs") from None
