"""The app's OpenAPI document, made to tell the truth (:func:`install`):

- path parameters ``tenant``, ``namespace`` and ``name`` carry the name pattern and length the
  server enforces, ``key`` its length limits;
- FastAPI's default 422 response is gone (validation errors are sent as 400 ``{"reason"}``), and
  error responses are documented as JSON even on routes whose success is text;
- optional parameters are strings when present (no JSON ``null`` alternative);
- guarded routes (``Depends(authorize)``) list 401 and 403 and the ``bearer`` scheme only when the
  server has tokens; without tokens the spec has no security at all (nothing would enforce it).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from statekeep.functions.config.model import NAME_PATTERN
from statekeep.server.schemas import KEY_SCHEMA, errors
from statekeep.state.keys import MAX_NAME

NAME_SCHEMA: dict[str, Any] = {
    "type": "string", "pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME,
    "description": f"1-{MAX_NAME} of A-Z a-z 0-9 _ . - (not . or ..)"}
PATH_SCHEMAS: dict[str, dict[str, Any]] = {
    "tenant": NAME_SCHEMA, "namespace": NAME_SCHEMA, "name": NAME_SCHEMA, "key": KEY_SCHEMA,
    # a function instance (statekeep.server.lifecycle): digits; one past the function's parallelism is a 404
    "instanceId": {"type": "string", "pattern": "^[0-9]{1,6}$"}}
_AUTH_ERRORS = {str(code): value for code, value in errors(401, 403).items()}


ERROR_REF = "#/components/schemas/ErrorBody"


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional parameter is absent or a string, never JSON null: drop the ``null`` alternative
    FastAPI writes for ``str | None`` (a client would send the text "null")."""
    alternatives = [a for a in schema.get("anyOf", []) if a.get("type") != "null"]
    if len(alternatives) != 1:
        return schema
    rest = {k: v for k, v in schema.items() if k != "anyOf"}
    return {**alternatives[0], **rest}


def _truthful(spec: dict[str, Any], auth: bool) -> dict[str, Any]:
    for item in spec.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            responses.pop("422", None)
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter.get("name") in PATH_SCHEMAS:
                    parameter["schema"] = {**PATH_SCHEMAS[parameter["name"]], "title": parameter["name"]}
                elif not parameter.get("required"):
                    parameter["schema"] = _not_null(parameter.get("schema", {}))
            for code, response in responses.items():
                media = response.get("content", {}).values()  # errors are JSON, whatever the route's type
                if code.startswith("4") and any(m.get("schema", {}).get("$ref") == ERROR_REF for m in media):
                    response["content"] = {"application/json": {"schema": {"$ref": ERROR_REF}}}
            if operation.get("security") and auth:
                for code, value in _AUTH_ERRORS.items():
                    responses.setdefault(code, {"description": value["description"], "content": {
                        "application/json": {"schema": {"$ref": ERROR_REF}}}})
            else:
                operation.pop("security", None)
                responses.pop("401", None)
                responses.pop("403", None)
    components = spec.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    if not auth:
        components.pop("securitySchemes", None)
    return spec


def install(app: FastAPI, auth: bool) -> None:
    """Replace ``app.openapi`` with the truthful document (built once, then cached)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = _truthful(build(), auth)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
