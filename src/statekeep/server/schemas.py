"""The OpenAPI description of the request and response bodies, built from the same pydantic models
that validate them (:class:`statekeep.functions.config.model.FunctionConfig`,
:class:`statekeep.state.shape.FunctionStateBody` / :class:`~statekeep.state.shape.FunctionState`), so
the spec cannot drift from the code. Handlers return plain JSON (no second validation pass)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from statekeep.functions.config.model import FunctionConfig
from statekeep.state.keys import MAX_SEGMENT
from statekeep.state.shape import FunctionState, FunctionStateBody

__all__ = ["ERRORS", "FUNCTION_BODY", "FUNCTION_UPDATE_BODY", "STATE_BODY", "STATE_PATH", "ErrorBody",
           "FunctionConfig", "FunctionState", "FunctionStatePage"]

REF = "#/components/schemas/{model}"


class ErrorBody(BaseModel):
    reason: str


class FunctionStatePage(BaseModel):
    items: list[FunctionState]
    nextStartAfter: str | None = Field(None, description="pass as startAfter for the next page; null on the last")


_ERROR_TEXT = {400: "malformed request", 401: "no valid token (only with tokens configured)",
               403: "tenant not granted (only with tokens configured)", 404: "unknown function or key",
               405: "method not allowed (see the Allow header)", 409: "version conflict or already exists",
               413: "too large"}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that sends exactly these error statuses (401 and 403 are added
    to guarded routes, and removed from the spec of a server without tokens, by
    :func:`statekeep.server.openapi.install`)."""
    return {code: {"model": ErrorBody, "description": _ERROR_TEXT[code]} for code in codes}


#: every client error status (for routes that do not list their own)
ERRORS: dict[int | str, dict[str, Any]] = errors(400, 401, 403, 404, 409, 413)


def _inline(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template=REF)
    schema.pop("$defs", None)  # the nested models are in components (response models)
    return schema


STATE_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": _inline(FunctionStateBody)},
    "multipart/form-data": {"schema": {"type": "object", "required": ["state"], "properties": {
        "state": {**_inline(FunctionStateBody), "description": "the FunctionState JSON, as pulsar-admin sends it"}}},
        "encoding": {"state": {"contentType": "application/json"}}},
}}}


def _function_body(required: list[str]) -> dict[str, Any]:
    config = _inline(FunctionConfig)
    if "data" not in required:  # an update: only the fields given change
        config.pop("required", None)
    return {"requestBody": {"required": True, "content": {
        "multipart/form-data": {"schema": {"type": "object", "required": required, "properties": {
            "functionConfig": {**config, "description": "FunctionConfig JSON"},
            "data": {"type": "string", "format": "binary", "description": "the Python file"},
        }}, "encoding": {"functionConfig": {"contentType": "application/json"}}},
    }}}


FUNCTION_BODY = _function_body(["functionConfig", "data"])
FUNCTION_UPDATE_BODY = _function_body(["functionConfig"])

#: a state key in a path: 1 to MAX_SEGMENT characters (the exact limit is on its encoded form:
#: ASCII letters and digits count 1, other bytes of its UTF-8 form 3; see statekeep.state.keys)
KEY_SCHEMA: dict[str, Any] = {"type": "string", "minLength": 1, "maxLength": MAX_SEGMENT}

STATE_PATH = {"parameters": [
    {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
    for name in ("tenant", "namespace", "name")
] + [{"name": "key", "in": "path", "required": True, "schema": KEY_SCHEMA}]}
