"""Read-only followers (see :mod:`statekeep.server.followers`; ``FOL`` =
``/admin/v3/followers/{tenant}/{namespace}/{name}``):

- ``GET /admin/v3/followers``: every follower's status with its ``lag`` (records) and ``lagMs``;
- ``GET FOL/state/{key}``: a key as FunctionState JSON, from the follower's local copy, and
  ``GET FOL/state?prefix=&startAfter=&limit=``: a page of keys (user keys only, as the leader's routes:
  statekeep's internal and expired keys are not there);
- ``GET FOL/variables/{key}``: the key's typed state variables decoded to JSON, as the leader's
  ``.../variables/{key}`` gives them (``{"key", "variables"}``; 404 if it has none);
- any write (``POST``, ``PUT``, ``PATCH``, ``DELETE``) on ``FOL/state...`` or ``FOL/variables...``: 405 with a
  JSON ``reason`` and ``Allow: GET``; nothing is written."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from statekeep.errors import NotFoundError, StatekeepError
from statekeep.server import schemas
from statekeep.server.auth import authorize
from statekeep.server.context import ServerContext, get_context
from statekeep.server.routes.state import KeyVariables
from statekeep.state import typed
from statekeep.state.keys import encode_key
from statekeep.state.shape import function_state_json
from statekeep.state.timestate import check_user_key, visible_entries, visible_entry

FOL = "/admin/v3/followers/{tenant}/{namespace}/{name}"

router = APIRouter(dependencies=[Depends(authorize)], tags=["followers"])


@router.get("/admin/v3/followers", summary="Followers served here, with their lag")
async def list_followers(request: Request, ctx: ServerContext = Depends(get_context)) -> Response:
    out = []
    for fqfn, follower in sorted(ctx.followers.by_name.items()):
        ctx.authorizer.check(request.headers.get("authorization"), follower.tenant)
        status = follower.status()
        try:
            status["lag"], status["lagMs"] = await ctx.call(lambda f=follower: (f.lag, f.lag_ms))
        except StatekeepError as e:
            status["lag"], status["lagMs"], status["error"] = None, None, str(e)
        out.append(status)
    return JSONResponse(out)


@router.get(FOL + "/state", responses=schemas.errors(400, 404), response_model=schemas.FunctionStatePage,
            summary="List a follower's state keys, one page at a time")
async def list_follower_state(tenant: str, namespace: str, name: str, prefix: str = "",
                              start_after: str | None = Query(None, alias="startAfter"),
                              limit: int = Query(100, ge=1, le=1000),
                              ctx: ServerContext = Depends(get_context)) -> Response:
    follower = ctx.followers.get(tenant, namespace, name)
    # as the leader's routes: no internal key (statekeep's time state) and no expired one
    found = list(visible_entries(follower, prefix, start_after or None, limit + 1))
    items = [function_state_json(e) for e in found[:limit]]
    return JSONResponse({"items": items, "nextStartAfter": items[-1]["key"] if len(found) > limit else None})


@router.get(FOL + "/state/{key:path}", responses=schemas.errors(400, 404), response_model=schemas.FunctionState,
            summary="Query a state key of a follower (read-only)")
async def query_follower_state(tenant: str, namespace: str, name: str, key: str,
                               ctx: ServerContext = Depends(get_context)) -> Response:
    entry = visible_entry(ctx.followers.get(tenant, namespace, name), key)
    if entry is None:
        raise NotFoundError(f"key {key!r} not found in follower {tenant}/{namespace}/{name}")
    return JSONResponse(function_state_json(entry), headers={"ETag": f'"{entry.version}"'})


@router.get(FOL + "/variables/{key:path}", responses=schemas.errors(400, 404), response_model=KeyVariables,
            summary="A key's typed state variables on a follower, decoded to JSON (read-only)")
async def follower_key_variables(tenant: str, namespace: str, name: str, key: str,
                                 ctx: ServerContext = Depends(get_context)) -> Response:
    encode_key(key)
    check_user_key(key)
    variables = await ctx.call(typed.key_variables, ctx.followers.get(tenant, namespace, name), key)
    if not variables:
        raise NotFoundError(f"key {key!r} of follower {tenant}/{namespace}/{name} has no state variables")
    return JSONResponse({"key": key, "variables": variables})


for _path in (FOL + "/state", FOL + "/state/{key:path}", FOL + "/variables/{key:path}"):
    # OPTIONS too: the generic 405 would list these refusing methods in Allow
    @router.api_route(_path, methods=["POST", "PUT", "PATCH", "DELETE", "OPTIONS"], status_code=405,
                      include_in_schema=False)
    async def refuse_write(tenant: str, namespace: str, name: str) -> Response:
        return JSONResponse({"reason": f"{tenant}/{namespace}/{name} is a read-only follower here: write to its "
                                       "leader (/admin/v3/functions/...)"}, status_code=405, headers={"Allow": "GET"})
