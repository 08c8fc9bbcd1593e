"""The ``FunctionState`` JSON of Pulsar's admin API, in ONE place for the REST server and the CLI:
the pydantic models :class:`FunctionStateBody` (what a put takes; it validates the body and documents
it in the OpenAPI spec) and :class:`FunctionState` (what is returned).

Out (``function_state_json``): ``{"key", <one value field>, "version"}`` where a counter gives
``numberValue``, bytes that are valid UTF-8 give ``stringValue`` and other bytes ``byteValue``
(base64). So a ``byteValue`` put whose bytes happen to be UTF-8 reads back as ``stringValue`` (same
bytes), as in Pulsar.

In (``parse_function_state``): exactly one of ``stringValue`` (stored as its UTF-8 bytes),
``byteValue`` (base64 text, or a JSON array of byte values -128..255 as pulsar-admin's Gson writes
``byte[]``) or ``numberValue`` (an integer in the signed 64-bit range: the key becomes a counter);
a ``null`` field counts as absent. ``key``, if present, must equal the key in the URL. ``version`` is
ignored (as Pulsar does; use the ``If-Match`` header for compare-and-set). Unknown fields are ignored.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from statekeep.errors import InvalidArgumentError
from statekeep.state.base import StateEntry, StateStore
from statekeep.state.records import COUNTER_MAX, COUNTER_MIN, decode_counter

VALUE_FIELDS = ("stringValue", "byteValue", "numberValue")
#: canonical padded base64, what ``base64.b64decode(validate=True)`` accepts
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


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


def _b64(value: str) -> str:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None
    return value


Int64 = Annotated[int, Field(ge=COUNTER_MIN, le=COUNTER_MAX)]
Base64 = Annotated[str, AfterValidator(_b64), Field(pattern=BASE64_PATTERN, description="base64")]
ByteArray = list[Annotated[int, Field(ge=-128, le=255)]]
#: the JSON Schema of "exactly one value field, not null"
_EXACTLY_ONE: dict[str, Any] = {"oneOf": [
    {"required": ["stringValue"], "properties": {"stringValue": {"type": "string"}}},
    {"required": ["byteValue"], "properties": {"byteValue": {"type": ["string", "array"]}}},
    {"required": ["numberValue"], "properties": {"numberValue": {"type": "integer"}}},
]}
_MESSAGES = {"stringValue": "stringValue must be a string",
             "numberValue": "numberValue must be an integer in the signed 64-bit range",
             "byteValue": "byteValue must be base64 text or an array of byte values (-128..255)",
             "key": "key must be a string"}


class FunctionStateBody(BaseModel):
    """A put's body: exactly one of ``stringValue``, ``byteValue`` (base64, or an array of byte values
    as pulsar-admin sends ``byte[]``) and ``numberValue`` (a signed 64-bit integer: a counter)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, json_schema_extra=_EXACTLY_ONE)

    key: str | None = Field(None, description="if given, must equal the key in the path")
    stringValue: str | None = None
    byteValue: Base64 | ByteArray | None = None
    numberValue: Int64 | None = None
    version: Any = Field(None, description="ignored (use If-Match)")

    @model_validator(mode="before")
    @classmethod
    def _exactly_one(cls, data: object) -> object:
        if not isinstance(data, dict):
            raise ValueError("the state must be a JSON object like {\"key\": K, \"stringValue\": V}")
        given = [f for f in VALUE_FIELDS if data.get(f) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(VALUE_FIELDS)} (got {len(given)})")
        return data


class FunctionState(BaseModel):
    """A key as returned: ``key``, exactly one value field (``byteValue`` is base64) and ``version``."""

    model_config = ConfigDict(json_schema_extra=_EXACTLY_ONE)

    key: str
    stringValue: str | None = None
    byteValue: str | None = Field(None, description="base64", pattern=BASE64_PATTERN)
    numberValue: Int64 | None = None
    version: int


@dataclass(frozen=True, slots=True)
class StateValue:
    """A parsed value to write: ``counter`` set for a numberValue, else ``data``."""

    data: bytes | None = None
    counter: int | None = None

    def write(self, store: StateStore, key: str, expected_version: int | None = None) -> int:
        if self.counter is not None:
            return store.set_counter(key, self.counter, expected_version=expected_version)
        assert self.data is not None  # one of the two is set
        return store.put(key, self.data, expected_version=expected_version)


def parse_function_state(body: object, key: str) -> StateValue:
    """Validate a FunctionState body for ``key`` (JSON text or a decoded object) with
    :class:`FunctionStateBody`; :class:`InvalidArgumentError` says what is wrong."""
    if isinstance(body, (str, bytes)):
        try:
            body = json.loads(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidArgumentError(f"the state is not valid JSON: {e}") from None
    try:
        state = FunctionStateBody.model_validate(body)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        raise InvalidArgumentError(_MESSAGES.get(field) or first["msg"].removeprefix("Value error, ")) from None
    if state.key is not None and state.key != key:
        raise InvalidArgumentError(f"the key in the body ({state.key!r}) differs from the key in the path ({key!r})")
    if state.stringValue is not None:
        try:
            return StateValue(data=state.stringValue.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidArgumentError("stringValue must be valid Unicode") from None
    if state.numberValue is not None:
        return StateValue(counter=state.numberValue)
    if isinstance(state.byteValue, str):
        return StateValue(data=base64.b64decode(state.byteValue, validate=True))
    return StateValue(data=bytes(b & 0xFF for b in state.byteValue or ()))
