"""The ``FunctionState`` JSON of Pulsar's admin API, in ONE place for the REST server and the CLI.

Out (``function_state_json``): ``{"key", <one value field>, "version"}`` where a counter gives
``numberValue``, bytes that are valid UTF-8 give ``stringValue`` and other bytes ``byteValue``
(base64). So a ``byteValue`` put whose bytes happen to be UTF-8 reads back as ``stringValue`` (same
bytes), as in Pulsar.

In (``parse_function_state``): exactly one of ``stringValue`` (stored as its UTF-8 bytes),
``byteValue`` (base64 text, or a JSON array of byte values -128..255 as pulsar-admin's Gson writes
``byte[]``) or ``numberValue`` (an integer in the signed 64-bit range: the key becomes a counter).
``key``, if present, must equal the key in the URL. ``version`` is ignored (as Pulsar does; use the
``If-Match`` header for compare-and-set). Unknown fields are ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.base import StateEntry, StateStore
from statekeep.state.records import COUNTER_MAX, COUNTER_MIN, decode_counter

VALUE_FIELDS = ("stringValue", "byteValue", "numberValue")


def function_state_json(entry: StateEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"key": entry.key}
    if entry.kind == "counter":
        out["numberValue"] = decode_counter(entry.value)
    else:
        try:
            out["stringValue"] = entry.value.decode("utf-8")
        except UnicodeDecodeError:
            out["byteValue"] = base64.b64encode(entry.value).decode("ascii")
    out["version"] = entry.version
    return out


@dataclass(frozen=True, slots=True)
class StateValue:
    """A parsed value to write: ``counter`` set for a numberValue, else ``data``."""

    data: bytes | None = None
    counter: int | None = None

    def write(self, store: StateStore, key: str, expected_version: int | None = None) -> int:
        if self.counter is not None:
            return store.set_counter(key, self.counter, expected_version=expected_version)
        return store.put(key, self.data, expected_version=expected_version)


def parse_function_state(body: object, key: str) -> StateValue:
    """Validate a FunctionState body for ``key``; :class:`InvalidArgumentError` says what is wrong."""
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidArgumentError(f"the state is not valid JSON: {e}") from None
    if not isinstance(body, Mapping):
        raise InvalidArgumentError("the state must be a JSON object like {\"key\": K, \"stringValue\": V}")
    if body.get("key") is not None and body["key"] != key:
        raise InvalidArgumentError(f"the key in the body ({body['key']!r}) differs from the key in the path ({key!r})")
    given = [f for f in VALUE_FIELDS if body.get(f) is not None]
    if len(given) != 1:
        raise InvalidArgumentError(f"give exactly one of {', '.join(VALUE_FIELDS)} (got {len(given)})")
    value = body[given[0]]
    if given[0] == "stringValue":
        if not isinstance(value, str):
            raise InvalidArgumentError("stringValue must be a string")
        try:
            return StateValue(data=value.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidArgumentError("stringValue must be valid Unicode") from None
    if given[0] == "numberValue":
        if isinstance(value, bool) or not isinstance(value, int) or not COUNTER_MIN <= value <= COUNTER_MAX:
            raise InvalidArgumentError("numberValue must be an integer in the signed 64-bit range")
        return StateValue(counter=value)
    if isinstance(value, str):
        try:
            return StateValue(data=base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            raise InvalidArgumentError("byteValue must be base64") from None
    if isinstance(value, list) and all(isinstance(b, int) and not isinstance(b, bool) and -128 <= b <= 255
                                       for b in value):
        return StateValue(data=bytes(b & 0xFF for b in value))
    raise InvalidArgumentError("byteValue must be base64 text or an array of byte values")
