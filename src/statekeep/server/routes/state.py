"""A function's state: ``GET|POST|DELETE FN/state/{key}``, ``GET FN/state`` (a page of keys), ``POST
FN/counter/{key}`` (an atomic increment), and the functions hosted elsewhere whose state statekeep keeps
(``PUT|DELETE /admin/v3/hosted-state/{tenant}/{namespace}/{name}``, :mod:`statekeep.server.hosted`): their state
answers on the same ``FN/state`` routes."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from statekeep.errors import InvalidArgumentError, NotFoundError
from statekeep.server import schemas
from statekeep.server.auth import authorize
from statekeep.server.bodies import check_length, read_body, read_form, read_part
from statekeep.server.context import ServerContext, get_context

FN = "/admin/v3/functions/{tenant}/{namespace}/{name}"

router = APIRouter(dependencies=[Depends(authorize)], tags=["state"])


#: what If-Match takes: a version, optionally quoted and weak (``3``, ``"3"``, ``W/"3"``)
IF_MATCH_PATTERN = r'^[ \t]*(W/)?"?[0-9]{1,18}"?[ \t]*$'
#: what If-None-Match takes: ``*`` (create only)
IF_NONE_MATCH_PATTERN = r"^[ \t]*\*[ \t]*$"
_IF_MATCH = re.compile(IF_MATCH_PATTERN)
_IF_NONE_MATCH = re.compile(IF_NONE_MATCH_PATTERN)


def expected_version(if_match: str | None, if_none_match: str | None = None) -> int | None:
    """``If-Match: 3`` / ``"3"`` / ``W/"3"`` -> 3; ``If-None-Match: *`` -> -1 (must not exist)."""
    if if_match is not None:
        if not _IF_MATCH.fullmatch(if_match):
            raise InvalidArgumentError("If-Match takes a version number, e.g. If-Match: \"3\"")
        return int(if_match.strip(" \t").removeprefix("W/").strip('"'))
    if if_none_match is not None:
        if not _IF_NONE_MATCH.fullmatch(if_none_match):
            raise InvalidArgumentError("only If-None-Match: * is supported (create only)")
        return -1
    return None


def _if_match(conditional: str) -> Any:
    return Header(None, description=f"{conditional} only if the key's version is this one (e.g. \"3\")",
                  json_schema_extra={"pattern": IF_MATCH_PATTERN})


# first in the router: the hottest route is matched first; it reads its path parameters itself
# (documented through openapi_extra), skipping FastAPI's per-parameter resolution
@router.get(FN + "/state/{key:path}", responses=schemas.errors(404), response_model=schemas.FunctionState,
            openapi_extra=schemas.STATE_PATH, summary="Query a state key (Pulsar: querystate)")
async def query_state(request: Request) -> Response:
    p = request.path_params
    ctx: ServerContext = request.app.state.ctx
    ctx.metrics.state_op("get")
    try:
        body = await ctx.call(ctx.hosted.query_state, p["tenant"], p["namespace"], p["name"], p["key"], read=True)
    except InvalidArgumentError as e:
        # a name or key that cannot exist is not found, as Pulsar answers a read (a write of it is a 400)
        raise NotFoundError(f"no such function or key: {e}") from None
    return JSONResponse(body, headers={"ETag": f'"{body["version"]}"'})


@router.get(FN + "/state", responses=schemas.errors(400, 404), response_model=schemas.FunctionStatePage,
            summary="List state keys, one page at a time")
async def list_state(tenant: str, namespace: str, name: str, prefix: str = "",
                     start_after: str | None = Query(None, alias="startAfter"),
                     limit: int = Query(100, ge=1, le=1000), ctx: ServerContext = Depends(get_context)) -> Response:
    ctx.metrics.state_op("list")
    return JSONResponse(await ctx.call(ctx.hosted.list_state, tenant, namespace, name, prefix, start_after, limit,
                                       read=True))


class FunctionTimer(BaseModel):
    key: str | None = Field(description="the key the timer belongs to (null: a function without a key field)")
    timestamp: int = Field(description="when it fires, ms since the epoch (event or processing time)")
    domain: str = Field(description="event, processing, or window (a window's end)")


class FunctionTimers(BaseModel):
    watermark: int | None = Field(description="the function's event-time watermark, ms (null before any event)")
    timers: list[FunctionTimer]


@router.get(FN + "/timers", responses=schemas.errors(400, 404), response_model=FunctionTimers,
            summary="List a function's timers and its watermark")
async def list_timers(tenant: str, namespace: str, name: str, ctx: ServerContext = Depends(get_context)) -> Response:
    return JSONResponse(await ctx.call(ctx.service.list_timers, tenant, namespace, name, read=True))


class KeyVariables(BaseModel):
    key: str
    variables: dict[str, Any] = Field(description="each typed state variable of the key (value, list or map state) "
                                                  "by name, decoded to JSON: a value, a list, or an object")


@router.get(FN + "/variables/{key:path}", responses=schemas.errors(400, 404), response_model=KeyVariables,
            summary="A key's typed state variables, decoded to JSON")
async def key_variables(tenant: str, namespace: str, name: str, key: str,
                        ctx: ServerContext = Depends(get_context)) -> Response:
    ctx.metrics.state_op("get")
    return JSONResponse(await ctx.call(ctx.service.key_variables, tenant, namespace, name, key, read=True))


@router.post(FN + "/state/{key:path}", responses=schemas.errors(400, 404, 409, 413), openapi_extra=schemas.STATE_BODY,
             response_model=schemas.FunctionState, summary="Put a state key (Pulsar: putstate)")
async def put_state(tenant: str, namespace: str, name: str, key: str, request: Request,
                    if_match: str | None = _if_match("write"),
                    if_none_match: str | None = Header(None, description="*: write only if the key does not exist",
                                                       json_schema_extra={"pattern": IF_NONE_MATCH_PATTERN}),
                    ctx: ServerContext = Depends(get_context)) -> Response:
    version = expected_version(if_match, if_none_match)
    body = await state_body(request, ctx.config.max_request_bytes)
    ctx.metrics.state_op("put")
    out = await ctx.call(ctx.hosted.put_state, tenant, namespace, name, key, body, version)
    return JSONResponse(out, headers={"ETag": f'"{out["version"]}"'})


@router.delete(FN + "/state/{key:path}", status_code=204, responses=schemas.errors(400, 404, 409),
               summary="Delete a state key")
async def delete_state(tenant: str, namespace: str, name: str, key: str, if_match: str | None = _if_match("delete"),
                       ctx: ServerContext = Depends(get_context)) -> Response:
    version = expected_version(if_match)
    ctx.metrics.state_op("delete")
    await ctx.call(ctx.hosted.delete_state, tenant, namespace, name, key, version)
    return Response(status_code=204)


class CounterIncrement(BaseModel):
    model_config = ConfigDict(extra="forbid")
    amount: int = Field(1, ge=-(2**63), le=2**63 - 1, description="what to add (negative: subtract); default 1")


class CounterValue(BaseModel):
    key: str
    numberValue: int = Field(description="the counter's value after this increment")


@router.post(FN + "/counter/{key:path}", responses=schemas.errors(400, 404, 413), response_model=CounterValue,
             summary="Add to a counter atomically (Pulsar: incrCounter)")
async def increment_counter(tenant: str, namespace: str, name: str, key: str, request: Request,
                            ctx: ServerContext = Depends(get_context)) -> Response:
    """An absent key counts from 0; a key holding bytes is a 400 (on a hosted function, 8 bytes are Pulsar's
    form of a counter and count on); past a signed 64-bit integer is a 400, and nothing is written."""
    check_length(request, ctx.config.max_request_bytes)
    raw = await read_body(request, ctx.config.max_request_bytes)
    try:
        increment = CounterIncrement.model_validate_json(raw or b"{}")
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        raise InvalidArgumentError(f"{where}: {first.get('msg', 'invalid')} (the body is {{\"amount\": N}})") from None
    ctx.metrics.state_op("put")
    return JSONResponse(await ctx.call(ctx.hosted.increment, tenant, namespace, name, key, increment.amount))


HOSTED = "/admin/v3/hosted-state/{tenant}/{namespace}"


class HostedFunction(BaseModel):
    tenant: str
    namespace: str
    name: str


@router.put(HOSTED + "/{name}", status_code=201, response_model=HostedFunction,
            responses={200: {"model": HostedFunction, "description": "already registered"}, **schemas.errors(400, 409)},
            summary="Keep the state of a function that runs elsewhere (a Pulsar worker's state provider)")
async def register_hosted(tenant: str, namespace: str, name: str,
                          ctx: ServerContext = Depends(get_context)) -> Response:
    """201 when registered now, 200 when it already was; 409 if a statekeep function has that name."""
    created = await ctx.call(ctx.hosted.register, tenant, namespace, name)
    return JSONResponse({"tenant": tenant, "namespace": namespace, "name": name}, status_code=201 if created else 200)


@router.delete(HOSTED + "/{name}", responses=schemas.errors(400, 404), status_code=204,
               summary="Delete a hosted function's state and its registration (PIP-312 cleanUp)")
async def cleanup_hosted(tenant: str, namespace: str, name: str,
                         ctx: ServerContext = Depends(get_context)) -> Response:
    await ctx.call(ctx.hosted.cleanup, tenant, namespace, name)
    return Response(status_code=204)


@router.get(HOSTED, responses=schemas.errors(400), response_model=list[str], summary="List hosted functions")
async def list_hosted(tenant: str, namespace: str, ctx: ServerContext = Depends(get_context)) -> Response:
    return JSONResponse(await ctx.call(ctx.hosted.list, tenant, namespace, read=True))


async def state_body(request: Request, limit: int) -> bytes | str:
    """The FunctionState JSON from a multipart ``state`` part or the raw body."""
    check_length(request, limit)
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await read_form(request, limit, max_files=2, max_fields=8)
        data = await read_part(form.get("state"), limit)
        if data is None:
            raise InvalidArgumentError("the multipart body has no 'state' part")
        return data
    return await read_body(request, limit)
