"""Functions: ``POST|PUT|GET|DELETE FN`` and ``GET /admin/v3/functions/{tenant}/{namespace}`` (status, stats
and start/stop/restart/trigger are in :mod:`statekeep.server.lifecycle`)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from statekeep.errors import InvalidArgumentError
from statekeep.server import schemas
from statekeep.server.auth import authorize
from statekeep.server.bodies import check_length, read_form, read_part
from statekeep.server.context import ServerContext, get_context

FN = "/admin/v3/functions/{tenant}/{namespace}/{name}"
#: the multipart parts a create or update takes; Pulsar's ``url`` and ``updateOptions`` are refused
PARTS = ("functionConfig", "data")

router = APIRouter(dependencies=[Depends(authorize)], tags=["functions"])


async def upload(request: Request, ctx: ServerContext, tenant: str, namespace: str, name: str,
                 need_code: bool) -> tuple[dict[str, Any], bytes | None]:
    """The ``functionConfig`` JSON (with tenant/namespace/name from the URL) and the ``data`` part."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidArgumentError("send multipart/form-data with a functionConfig part (JSON) and a data "
                                   "part (the Python file)")
    limit = ctx.config.max_request_bytes
    check_length(request, limit)
    form = await read_form(request, limit, max_files=4, max_fields=16)
    for part in form:
        if part == "url":  # Pulsar's package URL (http://, file://, function://) instead of the file
            raise InvalidArgumentError("the url part is not supported: send the function's Python file as the "
                                       "data part")
        if part not in PARTS:
            raise InvalidArgumentError(f"the {part} part is not supported (send functionConfig and data)")
    raw = await read_part(form.get("functionConfig"), limit)
    if raw is None:
        raise InvalidArgumentError("the functionConfig part (FunctionConfig JSON) is missing")
    try:
        function_config = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise InvalidArgumentError(f"functionConfig is not valid JSON: {e}") from None
    if not isinstance(function_config, dict):
        raise InvalidArgumentError("functionConfig must be a JSON object")
    for what, value in (("tenant", tenant), ("namespace", namespace), ("name", name)):
        if function_config.get(what) is None:
            function_config[what] = value
        elif function_config[what] != value:
            raise InvalidArgumentError(f"{what} in functionConfig ({function_config[what]!r}) differs from "
                                       f"the URL ({value!r})")
    code = await read_part(form.get("data"), limit)
    if need_code and code is None:
        raise InvalidArgumentError("the data part (the function's Python file) is missing")
    return function_config, code


@router.post(FN, responses=schemas.errors(400, 409, 413), openapi_extra=schemas.FUNCTION_BODY,
             response_model=schemas.FunctionConfig, summary="Create a function")
async def create_function(tenant: str, namespace: str, name: str, request: Request,
                          ctx: ServerContext = Depends(get_context)) -> Response:
    function_config, code = await upload(request, ctx, tenant, namespace, name, need_code=True)
    created = await ctx.call(ctx.registry.create, function_config, code)
    return JSONResponse(created.to_json())


@router.put(FN, responses=schemas.errors(400, 404, 409, 413), openapi_extra=schemas.FUNCTION_UPDATE_BODY,
            response_model=schemas.FunctionConfig, summary="Update a function")
async def update_function(tenant: str, namespace: str, name: str, request: Request,
                          ctx: ServerContext = Depends(get_context)) -> Response:
    function_config, code = await upload(request, ctx, tenant, namespace, name, need_code=False)
    updated = await ctx.call(ctx.registry.update, tenant, namespace, name, function_config, code)
    return JSONResponse(updated.to_json())


@router.get(FN, responses=schemas.errors(400, 404), response_model=schemas.FunctionConfig, summary="Get a function")
async def get_function(tenant: str, namespace: str, name: str, ctx: ServerContext = Depends(get_context)) -> Response:
    return JSONResponse((await ctx.call(ctx.registry.get, tenant, namespace, name, read=True)).to_json())


@router.delete(FN, status_code=204, responses=schemas.errors(400, 404, 409), summary="Delete a function and its state")
async def delete_function(tenant: str, namespace: str, name: str,
                          ctx: ServerContext = Depends(get_context)) -> Response:
    await ctx.call(ctx.registry.get, tenant, namespace, name, read=True)  # 404 before telling the worker
    if hasattr(ctx.worker, "function_deleting"):
        await ctx.call(ctx.worker.function_deleting, tenant, namespace, name)
    await ctx.call(ctx.registry.delete, tenant, namespace, name)
    return Response(status_code=204)


@router.get("/admin/v3/functions/{tenant}/{namespace}", responses=schemas.errors(400), response_model=list[str],
            summary="List the functions of a namespace")
async def list_functions(tenant: str, namespace: str, ctx: ServerContext = Depends(get_context)) -> Response:
    return JSONResponse(await ctx.call(ctx.registry.list, tenant, namespace, read=True))
