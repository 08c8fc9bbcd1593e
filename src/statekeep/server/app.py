"""The REST admin API, shaped like Pulsar's ``/admin/v3/functions``: ``create_app(config)``.

Routes (``FN`` = ``/admin/v3/functions/{tenant}/{namespace}/{name}``), one router per resource in
:mod:`statekeep.server.routes`:

- ``routes.functions``: ``POST|PUT FN`` create / update, multipart ``functionConfig`` (JSON) + ``data``
  (the Python file); ``GET FN``: the config; ``DELETE FN``: the function and its state;
  ``GET .../{tenant}/{namespace}``: names.
- :mod:`statekeep.server.lifecycle`: ``FN/status``, ``FN/stats`` (Pulsar's FunctionStatus and
  FunctionStats), ``FN/start|stop|restart|trigger`` and their per-instance forms.
- ``routes.state``: ``GET|POST|DELETE FN/state/{key}``: one key as FunctionState JSON; POST takes a
  multipart ``state`` part or a JSON body; ``If-Match: VERSION`` (or ``If-None-Match: *``) makes POST
  and DELETE conditional. ``GET FN/state?prefix=&startAfter=&limit=``: a page of keys.
- ``routes.state`` also: ``POST FN/counter/{key}`` ``{"amount": N}``: an atomic increment; and
  ``PUT|DELETE /admin/v3/hosted-state/{tenant}/{namespace}/{name}``, ``GET .../{tenant}/{namespace}``: functions
  whose state statekeep keeps while they run elsewhere (a Pulsar worker's state provider,
  :mod:`statekeep.server.hosted`); their state answers on the ``FN/state`` routes.
- ``routes.followers``: ``/admin/v3/followers...``, read-only followers configured with the server
  (:mod:`statekeep.server.followers`).
- ``routes.ops``: ``/metrics`` (Prometheus), ``/health``; FastAPI adds ``/docs`` and ``/openapi.json``
  (made truthful by :mod:`statekeep.server.openapi`).
- :mod:`statekeep.server.ui`: the web console at ``/ui``.

Adding a router: write an ``APIRouter`` guarded by ``dependencies=[Depends(authorize)]``
(:mod:`statekeep.server.auth`: checks the ``{tenant}`` path parameter, documents the bearer scheme)
and add one ``app.include_router`` line below. Routes reach the app's shared objects through
``ctx: ServerContext = Depends(get_context)`` or ``request.app.state.ctx``
(:class:`statekeep.server.context.ServerContext`): ``config``, ``service`` (FunctionService),
``registry`` (FunctionRegistry), ``store`` (the metadata store), ``worker``, ``metrics``, ``followers``,
``authorizer``, and ``await ctx.call(fn, *args)`` to run blocking code off the event loop.

Errors are ``{"reason"}`` with the status :mod:`statekeep.server.errors` maps; a refused request
changes nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from statekeep.functions.config.service import FunctionService
from statekeep.server.hosted import HostedState
from statekeep.server import errors, lifecycle, openapi
from statekeep.server.auth import Authorizer
from statekeep.server.config import ServerConfig
from statekeep.server.context import ServerContext
from statekeep.server.followers import Followers
from statekeep.server.metrics import FollowerLagCollector, Metrics, MetricsMiddleware
from statekeep.server.routes import followers as follower_routes
from statekeep.server.routes import functions, ops, state
from statekeep.server import ui
from statekeep.server.worker import NullWorker
from statekeep.state.partitioned import state_storage

__all__ = ["create_app"]


def _open(cfg: ServerConfig) -> ServerContext:
    """Open the metadata store, the function service and the followers (all closed again on failure)."""
    authorizer = Authorizer.from_file(cfg.tokens_file) if cfg.tokens_file else Authorizer(cfg.tokens)
    service = FunctionService.open(cfg.metadata_url, state_provider=cfg.state_provider,
                                   state_provider_config=cfg.state_provider_config,
                                   allow_custom_providers=cfg.allow_custom_state_providers,
                                   functions_root=cfg.functions_root,
                                   default_storage=state_storage(cfg.state_dir) if cfg.state_dir else None)
    try:
        followers = Followers(cfg.followers, functions_root=cfg.functions_root)
    except BaseException:
        service.close()
        raise
    registry = service.registry
    store = registry.store
    metrics = Metrics()
    metrics.registry.register(FollowerLagCollector(followers.lags))
    # a store that declares "nonblocking_reads" (answers from memory or local pages, never waits on a
    # network) is read on the event loop, skipping a thread hop; anything that may wait runs in the
    # thread pool. Asked of the backend, not its URL scheme, so a third-party backend can opt in.
    inline_reads = ("nonblocking_reads" in store.capabilities and not cfg.allow_custom_state_providers
                    and registry.providers.get().nonblocking_reads)
    return ServerContext(config=cfg, authorizer=authorizer, service=service, registry=registry, store=store,
                         metrics=metrics, followers=followers,
                         worker=cfg.worker if cfg.worker is not None else NullWorker(),
                         hosted=HostedState(store, service), inline_reads=inline_reads)


def create_app(config: ServerConfig | Mapping[str, Any] | None = None) -> FastAPI:
    """The ASGI app. Opens the metadata store now; the lifespan starts the worker and, at shutdown,
    stops it and closes the followers, the providers and the store. Raises
    :class:`~statekeep.errors.InvalidArgumentError` for a bad config or tokens file."""
    ctx = _open(ServerConfig.from_any(config))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ctx.worker.start(ctx.registry)
        try:
            yield
        finally:
            try:
                ctx.worker.stop()
            finally:
                history = getattr(app.state, "ui_batch_history", None)  # the console's, if it was opened
                if history is not None:
                    history.close()
                ctx.followers.close()
                ctx.service.close()

    app = FastAPI(title="statekeep", version="0.1.0", lifespan=lifespan,
                  description="Pulsar-shaped admin API for Python functions and their state (PIP-312). "
                              "With tokens configured, send Authorization: Bearer TOKEN.")
    app.state.ctx = ctx
    app.state.service = ctx.service  # kept for callers of the earlier layout (the rest: app.state.ctx)
    errors.install(app)
    openapi.install(app, auth=ctx.authorizer.enabled)
    app.add_middleware(MetricsMiddleware, metrics=ctx.metrics)

    app.include_router(state.router)  # first: its GET of a key is the hottest route
    app.include_router(functions.router)
    lifecycle.install(app, ctx)  # FN/status|stats|start|stop|restart|trigger
    app.include_router(follower_routes.router)
    app.include_router(ops.router)
    app.include_router(ui.router)  # the web console at /ui
    return app
