"""The console's own JSON endpoints under ``/ui/api`` (everything else it shows comes from the REST API).

Every route here needs a valid token when auth is on (:data:`statekeep.server.auth.authorize`).

- ``GET /ui/api/functions``: every function the token may see, with its status (running, worker, error,
  records processed, batches), the same as Pulsar's FunctionStatus (``functionStatus``), whether it was
  stopped, and ``lifecycle``: true (the console's start/stop buttons; every server has the lifecycle routes).
- ``GET /ui/api/functions/T/N/F/batches``: the records-per-micro-batch history (:mod:`.batches`).
- ``GET /ui/api/functions/T/N/F/changelog?limit=``: the changelog position (compaction point), the
  newest records (typed variables' entries decoded: :func:`record_json`) and the snapshots.
- ``GET /ui/api/functions/T/N/F/variables?prefix=&limit=``: the typed state variables of the keys starting
  with ``prefix``, decoded to JSON (:func:`statekeep.state.typed.read_variables`): ``{"items": [{"key",
  "variable", "value"}...], "more": bool}``, at most ``limit`` variables.
- ``GET /ui/api/tree?path=``: a node's children (names, sorted); ``GET|PUT|DELETE /ui/api/node?path=``:
  a node's value and Stat (GET of a missing node: ``{"exists": false}``, with its children count);
  PUT takes ``{"stringValue"|"byteValue", "version"}`` (``version`` -1: create,
  N: only if the node is at version N, absent: unconditional), DELETE takes ``?version=N``.
- ``GET /ui/api/handles?root=&blobs=&grace=``: the state handles under ``root`` with their blobs, sizes
  and checksums, and the orphan blobs a garbage-collection dry run finds (nothing is deleted);
  ``GET /ui/api/handle-roots``: the snapshot handle roots found in the store.

Tree, node and handles span every tenant: superuser only. Errors are ``{"reason"}`` with the REST API's
statuses (404, 409 on a version conflict, 401/403).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from statekeep.changelog.snapshots import DEFAULT_ROOT as SNAPSHOT_ROOT
from statekeep.changelog.snapshots import SnapshotStore, default_blobs
from statekeep.errors import InvalidArgumentError, NotFoundError, StatekeepError
from statekeep.functions.admin.lifecycle import is_stopped
from statekeep.functions.admin.worker import function_status
from statekeep.functions.driver import stats
from statekeep.handles.gc import collect_garbage, list_handles
from statekeep.metadata.types import GetResult, validate_path
from statekeep.server.auth import authorize
from statekeep.server.ui import access
from statekeep.server.ui.batches import batch_history
from statekeep.state.base import Capability, StateEntry
from statekeep.state.records import ChangelogRecord
from statekeep.state.shape import function_state_json
from statekeep.state import typed
from statekeep.state.timestate import is_internal, recent_records, wall_clock_ms
from statekeep.validate import check_int

if TYPE_CHECKING:
    from statekeep.functions.config.registry import FunctionRegistry
    from statekeep.state import StateStore
    from statekeep.metadata.base import MetadataStore
    from statekeep.server.context import ServerContext

FN = "/ui/api/functions/{tenant}/{namespace}/{name}"


def node_json(path: str, result: GetResult | None) -> dict[str, Any]:
    if result is None:
        return {"path": path, "exists": False}
    st = result.stat
    return {"path": path, "exists": True, **access.value_json(result.value), "size": len(result.value),
            "stat": {"version": st.version, "createdMs": st.created_ms, "modifiedMs": st.modified_ms,
                     "ephemeral": st.ephemeral,
                     # the store API exposes only whether this server's own session owns it
                     "ephemeralOwner": (None if not st.ephemeral else
                                        "this server's session" if st.created_by_self else "another session")}}


def store_registry(request: Request) -> tuple[MetadataStore, FunctionRegistry]:
    """The app's metadata store and function registry (the console's and its event streams')."""
    ctx: ServerContext = request.app.state.ctx
    return ctx.store, ctx.registry


def state_of(request: Request, tenant: str, namespace: str, name: str) -> StateStore:
    """The state of a statekeep function or of a hosted one (a Pulsar worker's, :mod:`statekeep.server.hosted`);
    NotFoundError if neither."""
    ctx: ServerContext = request.app.state.ctx
    return ctx.hosted.state_store(tenant, namespace, name)[0]


router = APIRouter(include_in_schema=False, dependencies=[Depends(authorize)])


@router.get("/ui/api/functions")
async def functions(request: Request) -> Response:
    store, registry = store_registry(request)
    access.whoami(request)  # 401 before listing anything

    def listing() -> list[dict[str, Any]]:
        out = []
        for tenant in store.get_children(registry.root):
            if not access.may_see(request, tenant):
                continue
            for namespace in store.get_children(f"{registry.root}/{tenant}"):
                for name in registry.list(tenant, namespace):
                    try:
                        cfg = registry.get(tenant, namespace, name).to_json()
                    except NotFoundError:
                        continue  # deleted meanwhile
                    status = function_status(store, tenant, namespace, name)
                    out.append({"tenant": tenant, "namespace": namespace, "name": name,
                                "inputs": cfg.get("inputs"), "output": cfg.get("output"), "status": status,
                                "functionStatus": stats.function_status(status, 1), "lifecycle": True,
                                "stopped": is_stopped(registry, tenant, namespace, name)})
        hosted = request.app.state.ctx.hosted
        for tenant in store.get_children(hosted.catalog.root):  # state kept for functions running elsewhere
            if not access.may_see(request, tenant):
                continue
            for namespace in store.get_children(f"{hosted.catalog.root}/{tenant}"):
                for name in hosted.list(tenant, namespace):
                    out.append({"tenant": tenant, "namespace": namespace, "name": name, "inputs": None,
                                "output": None, "status": {}, "functionStatus": stats.function_status({}, 1),
                                "lifecycle": False, "stopped": False, "hosted": True})
        return out

    return JSONResponse(await run_in_threadpool(listing))


@router.get(FN + "/batches")
async def batches(tenant: str, namespace: str, name: str, request: Request) -> Response:
    return JSONResponse(batch_history(request).history(f"{tenant}/{namespace}/{name}"))


@router.get(FN + "/changelog")
async def changelog(tenant: str, namespace: str, name: str, request: Request,
                    limit: int = Query(50, ge=1, le=1000)) -> Response:
    store, _ = store_registry(request)

    def read() -> dict[str, Any]:
        state = state_of(request, tenant, namespace, name)
        out: dict[str, Any] = {"records": [], "snapshots": []}
        if Capability.CHANGELOG_READ in state.capabilities:
            pos = state.changelog_position()
            out["position"] = {"epoch": pos.epoch, "lastOffset": pos.last_offset,
                               "compactedOffset": pos.compacted_offset, "purgedOffset": pos.purged_offset}
            # per partition (one but for partition-owned state); typed variables decoded, never statekeep's time state
            out["records"] = [{**shown, "partition": p} for p, r in recent_records(state, limit, variables=True)
                              if (shown := record_json(r)) is not None]
        else:
            out["position"], out["reason"] = None, f"the {state.provider_name!r} provider keeps no readable changelog"
        try:
            out["snapshots"] = [s.to_json() for s in SnapshotStore(store).list(tenant, namespace, name)]
        except StatekeepError as e:
            out["snapshotsReason"] = str(e)
        return out

    return JSONResponse(await run_in_threadpool(read))


@router.get(FN + "/variables")
async def variables(tenant: str, namespace: str, name: str, request: Request, prefix: str = "",
                    limit: int = Query(100, ge=1, le=1000)) -> Response:
    def read() -> dict[str, Any]:
        state = state_of(request, tenant, namespace, name)
        found = list(itertools.islice(typed.read_variables(state, prefix=prefix), limit + 1))
        return {"items": [{"key": key, "variable": variable, "value": value}
                          for key, variable, value in found[:limit]], "more": len(found) > limit}

    return JSONResponse(await run_in_threadpool(read))


@router.get("/ui/api/tree")
async def tree(request: Request, path: str = "/") -> Response:
    store = access.check_superuser(request)
    validate_path(path)
    children = await run_in_threadpool(store.get_children, path)
    base = path.rstrip("/")
    return JSONResponse({"path": path, "children": [{"name": c, "path": f"{base}/{c}"} for c in children]})


@router.get("/ui/api/node")
async def get_node(request: Request, path: str) -> Response:
    store = access.check_superuser(request)
    validate_path(path)
    result = await run_in_threadpool(store.get, path)
    out = node_json(path, result)  # a missing node (e.g. the root on most backends) is {"exists": false}
    out["children"] = len(await run_in_threadpool(store.get_children, path))
    return JSONResponse(out)


@router.put("/ui/api/node")
async def put_node(request: Request, path: str) -> Response:
    store = access.check_superuser(request)
    validate_path(path, allow_root=False)
    try:
        body = await request.json()
        value = access.value_from_json(body)
    except ValueError as e:
        raise InvalidArgumentError(f"bad node body: {e}") from None
    version = body.get("version")
    check_int(version, "version (-1: create)", minimum=-1, optional=True)
    await run_in_threadpool(lambda: store.put(path, value, expected_version=version))
    return JSONResponse(node_json(path, await run_in_threadpool(store.get, path)))


@router.delete("/ui/api/node")
async def delete_node(request: Request, path: str, version: int | None = Query(None, ge=0)) -> Response:
    store = access.check_superuser(request)
    validate_path(path, allow_root=False)
    await run_in_threadpool(lambda: store.delete(path, expected_version=version))
    return Response(status_code=204)


@router.get("/ui/api/handle-roots")
async def handle_roots(request: Request) -> Response:
    store = access.check_superuser(request)

    def roots() -> list[str]:
        return [f"{SNAPSHOT_ROOT}/{tenant}/{namespace}/{name}" for tenant in store.get_children(SNAPSHOT_ROOT)
                for namespace in store.get_children(f"{SNAPSHOT_ROOT}/{tenant}")
                for name in store.get_children(f"{SNAPSHOT_ROOT}/{tenant}/{namespace}")]

    return JSONResponse(await run_in_threadpool(roots))


@router.get("/ui/api/handles")
async def handles(request: Request, root: str, blobs: str | None = None,
                  grace: float = Query(3600.0, ge=0)) -> Response:
    store = access.check_superuser(request)
    validate_path(root)
    return JSONResponse(await run_in_threadpool(handles_json, store, root, blobs, grace))


def handles_json(store: MetadataStore, root: str, blobs: str | None, grace: float) -> dict[str, Any]:
    out: dict[str, Any] = {"root": root, "handles": list_handles(store, root)}
    blobs = blobs or default_blobs(store)
    out["blobs"] = blobs
    if blobs is None:
        out["gcReason"] = "give the blob storage URL (blobs=...) to look for orphan blobs"
        return out
    try:
        out["gc"] = collect_garbage(store, root, blobs, grace_seconds=grace, delete=False).to_json()
    except StatekeepError as e:
        out["gcReason"] = str(e)
    return out


def record_json(r: ChangelogRecord, now_ms: int | None = None) -> dict[str, Any] | None:
    """A changelog record as the console shows it; a typed variable's entry as its record key, ``variable``,
    ``element`` or ``mapKey`` and its ``value`` decoded to JSON (:func:`statekeep.state.typed.decoded_entry`).
    None for a record not shown (a list's bounds, an entry expired at ``now_ms``, default now)."""
    out: dict[str, Any] = {"offset": r.offset, "key": r.key, "version": r.version, "tombstone": r.tombstone}
    if is_internal(r.key):
        entry = typed.decoded_entry(r.key, r.value, wall_clock_ms() if now_ms is None else now_ms)
        if entry is None:
            return None
        out.update(entry)
    elif r.value is not None:  # the value fields of FunctionState JSON (numberValue, stringValue or byteValue)
        assert r.kind is not None  # a record with a value has its kind
        value = function_state_json(StateEntry(r.key, r.value, r.kind, r.version))
        out.update({k: v for k, v in value.items() if k not in ("key", "version")})
    if r.deleted_ms is not None:
        out["deletedMs"] = r.deleted_ms
    return out
