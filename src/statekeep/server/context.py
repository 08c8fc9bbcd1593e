"""The objects one app shares with its routes: ``request.app.state.ctx`` (a :class:`ServerContext`),
or ``ctx: ServerContext = Depends(get_context)`` in a route."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from statekeep.functions.config.registry import FunctionRegistry
from statekeep.functions.config.service import FunctionService
from statekeep.metadata.base import MetadataStore
from statekeep.server.auth import Authorizer
from statekeep.server.config import ServerConfig
from statekeep.server.followers import Followers
from statekeep.server.hosted import HostedState
from statekeep.server.metrics import Metrics


@dataclass
class ServerContext:
    """``config``: the :class:`ServerConfig`; ``service``: functions and their state
    (:class:`FunctionService`); ``registry``/``store``: its function registry and metadata store;
    ``worker``: what runs functions (see :mod:`statekeep.server.worker`); ``metrics``, ``followers``,
    ``authorizer``; ``hosted``: the state of functions that run elsewhere, e.g. on a Pulsar worker
    (:class:`HostedState`). ``inline_reads``: reads cannot block (see :meth:`call`)."""

    config: ServerConfig
    authorizer: Authorizer
    service: FunctionService
    registry: FunctionRegistry
    store: MetadataStore
    metrics: Metrics
    followers: Followers
    worker: Any
    hosted: HostedState
    inline_reads: bool = False

    async def call(self, fn: Callable[..., Any], *args: Any, read: bool = False) -> Any:
        """Run blocking ``fn(*args)`` in the thread pool; a ``read`` runs on the event loop when the
        store's reads cannot block (``inline_reads``), skipping the thread hop."""
        if read and self.inline_reads:
            return fn(*args)
        return await run_in_threadpool(fn, *args)


def get_context(request: Request) -> ServerContext:
    """FastAPI dependency: the app's :class:`ServerContext`."""
    ctx: ServerContext = request.app.state.ctx
    return ctx
