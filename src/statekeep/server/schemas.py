"""OpenAPI documentation of the request and response bodies (handlers return plain JSON; these
models only describe it, so no per-request validation cost is paid twice)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ErrorBody(BaseModel):
    reason: str


class FunctionState(BaseModel):
    """Exactly one of stringValue, byteValue (base64) and numberValue is present."""

    key: str
    stringValue: str | None = None
    byteValue: str | None = Field(None, description="base64")
    numberValue: int | None = Field(None, ge=-(1 << 63), le=(1 << 63) - 1)
    version: int


class FunctionStatePage(BaseModel):
    items: list[FunctionState]
    nextStartAfter: str | None = Field(None, description="pass as startAfter for the next page; null on the last")


class FunctionConfig(BaseModel):
    """A function's configuration (Pulsar's FunctionConfig shape; unknown fields are ignored)."""

    tenant: str | None = None
    namespace: str | None = None
    name: str | None = None
    className: str | None = "process"
    runtime: str | None = "PYTHON"
    py: str | None = None
    inputs: list[str] | None = None
    output: str | None = None
    parallelism: int | None = 1
    userConfig: dict[str, Any] | None = None
    keyField: str | None = None
    inputFormat: str | None = None
    outputFormat: str | None = None


ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorBody, "description": text} for status, text in [
        (400, "malformed request"), (401, "no valid token"), (403, "tenant not granted"),
        (404, "unknown function or key"), (409, "version conflict or already exists"), (413, "too large"),
    ]
}

STATE_IN_SCHEMA = {
    "type": "object",
    "properties": {
        "key": {"type": "string"},
        "stringValue": {"type": "string"},
        "byteValue": {"type": "string", "description": "base64"},
        "numberValue": {"type": "integer", "minimum": -(1 << 63), "maximum": (1 << 63) - 1},
        "version": {"type": "integer"},
    },
}

STATE_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": STATE_IN_SCHEMA},
    "multipart/form-data": {"schema": {"type": "object", "required": ["state"], "properties": {
        "state": {"type": "string", "description": "the FunctionState JSON, as pulsar-admin sends it"}}}},
}}}

FUNCTION_BODY = {"requestBody": {"required": True, "content": {
    "multipart/form-data": {"schema": {"type": "object", "required": ["functionConfig"], "properties": {
        "functionConfig": {"type": "string", "description": "FunctionConfig JSON"},
        "data": {"type": "string", "format": "binary", "description": "the Python file (required on create)"},
    }}},
}}}

STATE_PATH = {"parameters": [
    {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
    for name in ("tenant", "namespace", "name", "key")
]}
