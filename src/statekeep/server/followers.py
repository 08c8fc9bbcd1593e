"""Read-only followers over REST (KIP-813), and their lag in ``/metrics``.

Followers are configured with the server (``ServerConfig.followers``: a list of
``{"tenant", "namespace", "name", "leader": URL}``, optionally ``"local_dir"`` (else a temporary copy,
removed at stop), ``"provider"``, ``"blobs"``, ``"functions_root"`` (where the leader's registry keeps
functions; default: the server's own ``functions_root``) and ``"key_prefix"`` (follow only the keys
starting with it: reads of other keys find nothing)); each tails its leader from the server's start
to its stop. Routes (``FOL`` =
``/admin/v3/followers/{tenant}/{namespace}/{name}``):

- ``GET /admin/v3/followers``: every follower's status with its ``lag``;
- ``GET FOL/state/{key}``: a key as FunctionState JSON, from the follower's local copy;
- ``GET FOL/state?prefix=&startAfter=&limit=``: a page of keys;
- any write (``POST``, ``PUT``, ``PATCH``, ``DELETE``) on ``FOL/state...``: 405 with a JSON ``reason``
  and ``Allow: GET``; nothing is written.

``/metrics`` gains ``statekeep_follower_lag_records{function="T/N/F"}``: changelog records not yet
applied (-1 when unknown, e.g. the leader is unreachable or the function was deleted).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, Response

from statekeep.errors import InvalidArgumentError, NotFoundError, StatekeepError
from statekeep.server import schemas
from statekeep.state.catalog import DEFAULT_ROOT
from statekeep.state.shape import function_state_json

log = logging.getLogger(__name__)

FOL = "/admin/v3/followers/{tenant}/{namespace}/{name}"
_SPEC_KEYS = {"tenant", "namespace", "name", "leader", "local_dir", "provider", "blobs", "functions_root",
              "key_prefix"}


class Followers:
    """The followers a server serves, by ``T/N/F``."""

    def __init__(self, specs: list[Mapping[str, Any]] | None, *, functions_root: str = DEFAULT_ROOT) -> None:
        from statekeep.changelog import FollowerStore

        self.by_name: dict[str, Any] = {}
        try:
            for spec in specs or []:
                if not isinstance(spec, Mapping) or set(spec) - _SPEC_KEYS or \
                        not {"tenant", "namespace", "name", "leader"} <= set(spec):
                    raise InvalidArgumentError(f"a follower is {{tenant, namespace, name, leader [, local_dir, "
                                               f"provider, blobs, functions_root, key_prefix]}}, not {spec!r}")
                fqfn = f"{spec['tenant']}/{spec['namespace']}/{spec['name']}"
                self.by_name[fqfn] = FollowerStore.open(
                    spec["leader"], spec["tenant"], spec["namespace"], spec["name"], local_dir=spec.get("local_dir"),
                    provider=spec.get("provider"), blobs=spec.get("blobs"),
                    functions_root=spec.get("functions_root") or functions_root,
                    key_prefix="" if spec.get("key_prefix") is None else spec["key_prefix"])
        except BaseException:
            self.close()
            raise

    def get(self, tenant: str, namespace: str, name: str):
        follower = self.by_name.get(f"{tenant}/{namespace}/{name}")
        if follower is None:
            raise NotFoundError(f"this server follows no function {tenant}/{namespace}/{name}")
        return follower

    def lags(self) -> dict[str, int]:
        out = {}
        for fqfn, follower in self.by_name.items():
            try:
                out[fqfn] = follower.lag
            except StatekeepError:
                out[fqfn] = -1
        return out

    def metrics_lines(self) -> list[str]:
        lines = ["# HELP statekeep_follower_lag_records Changelog records a follower has not applied yet (-1: unknown).",
                 "# TYPE statekeep_follower_lag_records gauge"]
        for fqfn, lag in sorted(self.lags().items()):
            lines.append(f'statekeep_follower_lag_records{{function="{fqfn}"}} {lag}')
        return lines if self.by_name else []

    def close(self) -> None:
        followers, self.by_name = list(self.by_name.values()), {}
        for follower in followers:
            follower.close()


def _read_only(tenant: str, namespace: str, name: str) -> Response:
    return JSONResponse({"reason": f"{tenant}/{namespace}/{name} is a read-only follower here: write to its "
                                   "leader (/admin/v3/functions/...)"}, status_code=405, headers={"Allow": "GET"})


def install(app: FastAPI, followers: Followers, auth, call: Callable[..., Any]) -> None:
    """Add the follower routes to ``app`` (see the module docstring)."""

    @app.get("/admin/v3/followers", summary="Followers served here, with their lag")
    async def list_followers(request: Request) -> Response:
        out = []
        for fqfn, follower in sorted(followers.by_name.items()):
            auth.check(request.headers.get("authorization"), follower.tenant)
            status = follower.status()
            try:
                status["lag"] = await call(lambda f=follower: f.lag)
            except StatekeepError as e:
                status["lag"], status["error"] = None, str(e)
            out.append(status)
        return JSONResponse(out)

    @app.get(FOL + "/state", responses=schemas.ERRORS, response_model=schemas.FunctionStatePage,
             summary="List a follower's state keys, one page at a time")
    async def list_follower_state(tenant: str, namespace: str, name: str, request: Request, prefix: str = "",
                                  start_after: str | None = Query(None, alias="startAfter"),
                                  limit: int = Query(100, ge=1, le=1000)) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        follower = followers.get(tenant, namespace, name)
        found = list(follower.scan_entries(prefix, start_after or None, limit + 1))
        items = [function_state_json(e) for e in found[:limit]]
        return JSONResponse({"items": items, "nextStartAfter": items[-1]["key"] if len(found) > limit else None})

    @app.get(FOL + "/state/{key:path}", responses=schemas.ERRORS, response_model=schemas.FunctionState,
             summary="Query a state key of a follower (read-only)")
    async def query_follower_state(tenant: str, namespace: str, name: str, key: str, request: Request) -> Response:
        auth.check(request.headers.get("authorization"), tenant)
        entry = followers.get(tenant, namespace, name).get_entry(key)
        if entry is None:
            raise NotFoundError(f"key {key!r} not found in follower {tenant}/{namespace}/{name}")
        return JSONResponse(function_state_json(entry), headers={"ETag": f'"{entry.version}"'})

    for path in (FOL + "/state", FOL + "/state/{key:path}"):
        @app.api_route(path, methods=["POST", "PUT", "PATCH", "DELETE"], status_code=405, include_in_schema=False)
        async def refuse_write(tenant: str, namespace: str, name: str) -> Response:
            return _read_only(tenant, namespace, name)
