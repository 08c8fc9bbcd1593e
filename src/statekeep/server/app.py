"""The REST admin API, shaped like Pulsar's ``/admin/v3/functions``: ``create_app(config)``.

Routes (``FN`` = ``/admin/v3/functions/{tenant}/{namespace}/{name}``):

- ``POST|PUT FN``: create / update, multipart ``functionConfig`` (JSON) + ``data`` (the Python file);
  ``GET FN``: the config; ``DELETE FN``: the function and its state; ``GET .../{tenant}/{namespace}``: names.
- ``GET|POST|DELETE FN/state/{key}``: one key as FunctionState JSON; POST takes a multipart ``state``
  part or a JSON body; ``If-Match: VERSION`` (or ``If-None-Match: *``) makes POST and DELETE conditional.
- ``GET FN/state?prefix=&startAfter=&limit=``: a page of keys.
- ``GET FN/status``: Pulsar's FunctionStatus JSON; ``instances[0].status.workerId`` names the worker
  running the function now (any server answers for any function: status and locks are in the store).
- ``/metrics`` (Prometheus), ``/health``, ``/docs`` and ``/openapi.json``.
- ``/admin/v3/followers...``: read-only followers configured with the server
  (:mod:`statekeep.server.followers`).

Errors are ``{"reason"}`` with the status :mod:`statekeep.server.errors` maps; a refused request
changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from statekeep.errors import InvalidArgumentError, ValueTooLargeError
from statekeep.functions.service import FunctionService
from statekeep.functions.worker import function_status as read_function_status
from statekeep.functions.worker import pulsar_function_status
from statekeep.server import errors, schemas
from statekeep.server import followers as follower_routes
from statekeep.server.auth import Authorizer
from statekeep.server.config import ServerConfig
from statekeep.server.metrics import Metrics, MetricsMiddleware
from statekeep.server.worker import NullWorker

FN = "/admin/v3/functions/{tenant}/{namespace}/{name}"


def expected_version(if_match: str | None, if_none_match: str | None = None) -> int | None:
    """``If-Match: 3`` / ``"3"`` / ``W/"3"`` -> 3; ``If-None-Match: *`` -> -1 (must not exist)."""
    if if_match is not None:
        value = if_match.strip().removeprefix("W/").strip('"')
        if not (value.isascii() and value.isdigit() and len(value) <= 18):
            raise InvalidArgumentError("If-Match takes a version number, e.g. If-Match: \"3\"")
        return int(value)
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise InvalidArgumentError("only If-None-Match: * is supported (create only)")
        return -1
    return None


def create_app(config: ServerConfig | dict | None = None) -> FastAPI:
    """The ASGI app. Opens the metadata store now; the lifespan starts the worker and, at shutdown,
    stops it and closes the providers and the store."""
    cfg = ServerConfig.from_any(config)
    auth = Authorizer.from_file(cfg.tokens_file) if cfg.tokens_file else Authorizer(cfg.tokens)
    service = FunctionService.open(cfg.metadata_url, state_provider=cfg.state_provider,
                                   state_provider_config=cfg.state_provider_config,
                                   allow_custom_providers=cfg.allow_custom_state_providers,
                                   functions_root=cfg.functions_root)
    registry = service.registry
    store = registry.store
    metrics = Metrics()
    try:
        followers = follower_routes.Followers(cfg.followers, functions_root=cfg.functions_root)
    except BaseException:
        service.close()
        raise
    metrics.add_collector(followers.metrics_lines)
    worker = cfg.worker if cfg.worker is not None else NullWorker()
    # embedded stores answer reads from local memory-mapped pages: serve them on the event loop,
    # skipping a thread hop; anything that may wait (network, fsync) runs in the thread pool
    inline_reads = (store.scheme in ("memory", "local") and not cfg.allow_custom_state_providers
                    and registry.providers.get().nonblocking_reads)

    async def call(fn: Callable[..., Any], *args: Any, read: bool = False) -> Any:
        if read and inline_reads:
            return fn(*args)
        return await run_in_threadpool(fn, *args)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        worker.start(registry)
        try:
            yield
        finally:
            try:
                worker.stop()
            finally:
                followers.close()
                service.close()

    app = FastAPI(title="statekeep", version="0.1.0", lifespan=lifespan,
                  description="Pulsar-shaped admin API for Python functions and their state (PIP-312). "
                              "With tokens configured, send Authorization: Bearer TOKEN.")
    app.state.registry, app.state.service, app.state.metrics, app.state.worker = registry, service, metrics, worker
    errors.install(app)
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    # registered first: the hottest route is matched first; it reads its path parameters itself
    # (documented through openapi_extra), skipping FastAPI's per-parameter resolution
    @app.get(FN + "/state/{key:path}", responses=schemas.ERRORS, response_model=schemas.FunctionState,
             openapi_extra=schemas.STATE_PATH, summary="Query a state key (Pulsar: querystate)")
    async def query_state(request: Request) -> Response:
        p = request.path_params
        auth.check(request.headers.get("authorization"), p["tenant"])
        metrics.state_op("get")
        body = await call(service.query_state, p["tenant"], p["namespace"], p["name"], p["key"], read=True)
        return JSONResponse(body, headers={"ETag": f'"{body["version"]}"'})

    async def upload(request: Request, tenant: str, namespace: str, name: str,
                     need_code: bool) -> tuple[dict[str, Any], bytes | None]:
        if not request.headers.get("content-type", "").startswith("multipart/form-data"):
            raise InvalidArgumentError("send multipart/form-data with a functionConfig part (JSON) and a data "
                                       "part (the Python file)")
        _check_length(request, cfg.max_request_bytes)
        form = await request.form(max_files=4, max_fields=16)
        raw = await _part(form.get("functionConfig"), cfg.max_request_bytes)
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
        code = await _part(form.get("data"), cfg.max_request_bytes)
        if need_code and code is None:
            raise InvalidArgumentError("the data part (the function's Python file) is missing")
        return function_config, code

    @app.post(FN, responses=schemas.ERRORS, openapi_extra=schemas.FUNCTION_BODY,
              response_model=schemas.FunctionConfig, summary="Create a function")
    async def create_function(tenant: str, namespace: str, name: str, request: Request) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        function_config, code = await upload(request, tenant, namespace, name, need_code=True)
        created = await call(registry.create, function_config, code)
        return JSONResponse(created.to_json())

    @app.put(FN, responses=schemas.ERRORS, openapi_extra=schemas.FUNCTION_BODY,
             response_model=schemas.FunctionConfig, summary="Update a function")
    async def update_function(tenant: str, namespace: str, name: str, request: Request) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        function_config, code = await upload(request, tenant, namespace, name, need_code=False)
        updated = await call(registry.update, tenant, namespace, name, function_config, code)
        return JSONResponse(updated.to_json())

    @app.get(FN, responses=schemas.ERRORS, response_model=schemas.FunctionConfig, summary="Get a function")
    async def get_function(tenant: str, namespace: str, name: str, request: Request) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        return JSONResponse((await call(registry.get, tenant, namespace, name, read=True)).to_json())

    @app.get(FN + "/status", responses=schemas.ERRORS, summary="A function's status, with the worker running it")
    async def function_status(tenant: str, namespace: str, name: str, request: Request) -> Response:
        auth.check(request.headers.get("authorization"), tenant)

        def status() -> dict[str, Any]:
            registry.get(tenant, namespace, name)  # 404 for an unknown function
            return pulsar_function_status(read_function_status(store, tenant, namespace, name))

        return JSONResponse(await call(status, read=True))

    @app.delete(FN, status_code=204, responses=schemas.ERRORS, summary="Delete a function and its state")
    async def delete_function(tenant: str, namespace: str, name: str, request: Request) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        await call(registry.get, tenant, namespace, name, read=True)  # 404 before telling the worker
        if hasattr(worker, "function_deleting"):
            await call(worker.function_deleting, tenant, namespace, name)
        await call(registry.delete, tenant, namespace, name)
        return Response(status_code=204)

    @app.get("/admin/v3/functions/{tenant}/{namespace}", responses=schemas.ERRORS, response_model=list[str],
             summary="List the functions of a namespace")
    async def list_functions(tenant: str, namespace: str, request: Request) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        return JSONResponse(await call(registry.list, tenant, namespace, read=True))

    @app.get(FN + "/state", responses=schemas.ERRORS, response_model=schemas.FunctionStatePage,
             summary="List state keys, one page at a time")
    async def list_state(tenant: str, namespace: str, name: str, request: Request, prefix: str = "",
                         start_after: str | None = Query(None, alias="startAfter"),
                         limit: int = Query(100, ge=1, le=1000)) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        metrics.state_op("list")
        return JSONResponse(await call(service.list_state, tenant, namespace, name, prefix, start_after, limit,
                                       read=True))

    @app.post(FN + "/state/{key:path}", responses=schemas.ERRORS, openapi_extra=schemas.STATE_BODY,
              response_model=schemas.FunctionState, summary="Put a state key (Pulsar: putstate)")
    async def put_state(tenant: str, namespace: str, name: str, key: str, request: Request,
                        if_match: str | None = Header(None), if_none_match: str | None = Header(None)) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        version = expected_version(if_match, if_none_match)
        body = await _state_body(request, cfg.max_request_bytes)
        metrics.state_op("put")
        out = await call(service.put_state, tenant, namespace, name, key, body, version)
        return JSONResponse(out, headers={"ETag": f'"{out["version"]}"'})

    @app.delete(FN + "/state/{key:path}", status_code=204, responses=schemas.ERRORS, summary="Delete a state key")
    async def delete_state(tenant: str, namespace: str, name: str, key: str, request: Request,
                           if_match: str | None = Header(None)) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        version = expected_version(if_match)
        metrics.state_op("delete")
        await call(service.delete_state, tenant, namespace, name, key, version)
        return Response(status_code=204)

    follower_routes.install(app, followers, auth, call)

    @app.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics")
    async def prometheus() -> Response:
        return PlainTextResponse(await run_in_threadpool(metrics.render), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/health", summary="Liveness")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


def _check_length(request: Request, limit: int) -> None:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ValueTooLargeError(f"request body of {length} bytes exceeds the limit of {limit} bytes")


async def _part(part: Any, limit: int) -> bytes | None:
    if part is None:
        return None
    if isinstance(part, UploadFile):
        data = await part.read(limit + 1)
        if len(data) > limit:
            raise ValueTooLargeError(f"upload exceeds the limit of {limit} bytes")
        return data
    return part.encode("utf-8")


async def _state_body(request: Request, limit: int) -> bytes | str:
    """The FunctionState JSON from a multipart ``state`` part or the raw body."""
    _check_length(request, limit)
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        form = await request.form(max_files=2, max_fields=8)
        data = await _part(form.get("state"), limit)
        if data is None:
            raise InvalidArgumentError("the multipart body has no 'state' part")
        return data
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ValueTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
