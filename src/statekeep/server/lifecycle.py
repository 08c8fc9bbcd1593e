"""Lifecycle and observability of functions, in Pulsar's paths and JSON shapes
(``FN`` = ``/admin/v3/functions/{tenant}/{namespace}/{name}``):

- ``GET FN/status``: ``FunctionStatus`` (numInstances, numRunning, instances[].status: running, error,
  numRestarts, numReceived, numSuccessfullyProcessed, numUserExceptions, latestUserExceptions,
  numSystemExceptions, latestSystemExceptions, averageLatency, lastInvocationTime, workerId);
  ``GET FN/{instanceId}/status``: one instance's ``status`` object.
- ``GET FN/stats``: ``FunctionStats`` (receivedTotal, processedSuccessfullyTotal,
  systemExceptionsTotal, userExceptionsTotal, avgProcessLatency, 1min, lastInvocation,
  instances[].metrics with userMetrics); ``GET FN/{instanceId}/stats``: one instance's ``metrics``.
- ``POST FN/start|stop|restart`` (204): persisted in the function registry, so a stopped function
  stays stopped across server restarts, and acted on by whichever worker runs it.
  ``POST FN/{instanceId}/restart`` restarts the function's query (its instances are the partitions
  of that one query); ``POST FN/{instanceId}/start|stop`` are refused (400) for that reason.
- ``POST FN/trigger``: multipart ``data`` (a value) or ``dataStream`` (a file), optional ``topic``
  (one of the function's inputs): the function runs on it through its real state; the response
  (text/plain) is its output, as Pulsar's (a function keeping time runs as a one-record micro-batch:
  see :func:`statekeep.functions.admin.lifecycle.trigger`).

An instance is a Spark partition (``instanceId`` from 0 to ``parallelism - 1``). Stats are read
from the metadata store, where the runner of a function saves them once per micro-batch, so any
server of a cluster answers for any function.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from statekeep.errors import InvalidArgumentError, NotFoundError
from statekeep.functions.admin import lifecycle
from statekeep.functions.driver import stats
from statekeep.functions.driver.spark import read_status
from statekeep.functions.admin.worker import function_status as read_function_status
from statekeep.server import schemas
from statekeep.server.auth import authorize
from statekeep.server.bodies import check_length, read_part
from statekeep.server.context import ServerContext, get_context

FN = "/admin/v3/functions/{tenant}/{namespace}/{name}"
router = APIRouter(dependencies=[Depends(authorize)], tags=["functions"])


def install(app: FastAPI, ctx: ServerContext) -> None:
    """Add the routes, and the functions' stats and user metrics to ``/metrics``."""
    app.include_router(router)
    ctx.metrics.add_collector(lambda: stats.metrics_lines(_all_statuses(ctx)))


def _all_statuses(ctx: ServerContext) -> list[tuple[str, dict[str, Any]]]:
    store, root = ctx.store, ctx.registry.root
    out: list[tuple[str, dict[str, Any]]] = []
    for tenant in store.get_children(root):
        for namespace in store.get_children(f"{root}/{tenant}"):
            for name in ctx.registry.list(tenant, namespace):
                status = read_status(store, tenant, namespace, name)
                if status is not None:
                    out.append((f"{tenant}/{namespace}/{name}", status))
    return out


def _instance(raw: str, parallelism: int, fqfn: str) -> int:
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 6):
        raise InvalidArgumentError(f"instanceId must be a number from 0 to {parallelism - 1}, not {raw!r}")
    instance = int(raw)
    if instance >= parallelism:
        raise NotFoundError(f"function {fqfn} has no instance {instance} (parallelism {parallelism})")
    return instance


def _status(ctx: ServerContext, tenant: str, namespace: str, name: str) -> tuple[dict[str, Any], int, int]:
    """(raw status, numInstances, numRestarts); 404 for an unknown function."""
    cfg = ctx.registry.get(tenant, namespace, name)
    raw = read_function_status(ctx.store, tenant, namespace, name)
    if lifecycle.is_stopped(ctx.registry, tenant, namespace, name):
        raw["running"] = False
    return raw, cfg.parallelism, lifecycle.restart_count(ctx.registry, tenant, namespace, name)


def _reader(kind: str, per_instance: bool) -> Callable[..., Awaitable[Response]]:
    """A GET of Pulsar's ``status`` or ``stats`` JSON, of the function or (``per_instance``) one instance."""
    async def read(tenant: str, namespace: str, name: str, request: Request,
                   ctx: ServerContext = Depends(get_context)) -> Response:
        def answer() -> dict[str, Any]:
            raw, instances, restarts = _status(ctx, tenant, namespace, name)
            if not per_instance:
                if kind == "status":
                    return stats.function_status(raw, instances, num_restarts=restarts)
                return stats.function_stats(raw, instances)
            instance = _instance(request.path_params["instanceId"], instances, f"{tenant}/{namespace}/{name}")
            if kind == "status":
                return stats.instance_status(raw, instance, num_restarts=restarts)
            return stats.instance_stats(raw, instance)

        return JSONResponse(await ctx.call(answer, read=True))

    return read


_INSTANCE_ID = {"parameters": [{"name": "instanceId", "in": "path", "required": True, "schema": {"type": "string"}}]}
for _kind, _pulsar in (("status", "FunctionStatus"), ("stats", "FunctionStats")):
    router.add_api_route(FN + "/" + _kind, _reader(_kind, False), methods=["GET"], name=f"function_{_kind}",
                         responses=schemas.ERRORS, summary=f"A function's {_kind} (Pulsar's {_pulsar})")


@router.post(FN + "/trigger", responses=schemas.ERRORS, response_class=PlainTextResponse,
             summary="Run the function on one value (multipart data or dataStream) and return its output")
async def trigger_function(tenant: str, namespace: str, name: str, request: Request,
                           ctx: ServerContext = Depends(get_context)) -> Response:
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise InvalidArgumentError("send multipart/form-data with a data part (a value) or a dataStream part "
                                   "(a file)")
    limit = ctx.config.max_request_bytes
    check_length(request, limit)
    form = await request.form(max_files=2, max_fields=8)
    data = await read_part(form.get("data"), limit)
    stream = await read_part(form.get("dataStream"), limit)
    part = await read_part(form.get("topic"), limit)
    topic = None if part is None else part.decode("utf-8", "replace")
    if (data is None) == (stream is None):
        raise InvalidArgumentError("send exactly one of the parts data (a value) and dataStream (a file)")
    value = data if data is not None else stream
    assert value is not None  # exactly one of the two parts was sent (checked above)

    def run() -> str:
        cfg = ctx.registry.get(tenant, namespace, name)
        if topic is not None and topic not in cfg.inputs:
            raise InvalidArgumentError(f"topic must be one of the function's inputs {cfg.inputs}")
        return lifecycle.output_text(lifecycle.trigger(ctx.registry, tenant, namespace, name, value, topic))

    return PlainTextResponse(await ctx.call(run))


def _action(action: str, per_instance: bool) -> Callable[..., Awaitable[Response]]:
    async def act(tenant: str, namespace: str, name: str, request: Request,
                  ctx: ServerContext = Depends(get_context)) -> Response:
        def run() -> None:
            cfg = ctx.registry.get(tenant, namespace, name)
            if per_instance:
                _instance(request.path_params["instanceId"], cfg.parallelism, cfg.fqfn)
                if action != "restart":
                    raise InvalidArgumentError(
                        f"the instances of {cfg.fqfn} are the partitions of one Spark query: {action} the "
                        f"function as a whole (POST .../{action}), or restart this instance (restarts the query)")
            if action == "restart":
                lifecycle.request_restart(ctx.registry, tenant, namespace, name)
            else:
                lifecycle.set_stopped(ctx.registry, tenant, namespace, name, action == "stop")

        await ctx.call(run)
        return Response(status_code=204)

    return act


for _verb in ("start", "stop", "restart"):
    router.add_api_route(FN + "/" + _verb, _action(_verb, False), methods=["POST"], status_code=204,
                         responses=schemas.ERRORS, summary=f"{_verb.capitalize()} the function (all instances)")
    router.add_api_route(FN + "/{instanceId}/" + _verb, _action(_verb, True), methods=["POST"], status_code=204,
                         responses=schemas.ERRORS, summary=f"{_verb.capitalize()} one instance of the function",
                         openapi_extra={"parameters": [{"name": "instanceId", "in": "path", "required": True,
                                                        "schema": {"type": "integer", "minimum": 0}}]})


for _kind, _pulsar in (("status", "FunctionInstanceStatusData"), ("stats", "FunctionInstanceStatsData")):
    router.add_api_route(FN + "/{instanceId}/" + _kind, _reader(_kind, True), methods=["GET"],
                         name=f"instance_{_kind}", responses=schemas.ERRORS, openapi_extra=_INSTANCE_ID,
                         summary=f"One instance's {_kind} (Pulsar's {_pulsar})")
