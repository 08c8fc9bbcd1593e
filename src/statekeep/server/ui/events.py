"""Server-sent event streams of the console (``text/event-stream``; each event's data is JSON).

- ``GET /ui/api/events/functions/T/N/F/state?after=OFFSET``: the function's changelog, tailed: one
  ``record`` event per change (key, FunctionState value or tombstone, version, offset; a typed variable's
  entry with its ``variable``, ``element`` or ``mapKey`` and ``value`` decoded to JSON), from after
  ``after`` (default: from now). The tail wakes on the store's notifications and otherwise reads the
  changelog again every ``IDLE_S`` (embedded state on ``local://`` notifies nothing); it never reads keys.
  A ``reset`` event says the changelog was compacted past the reader (reload the page of keys).
- ``GET /ui/api/events/functions``: ``batch`` events (records per micro-batch, :mod:`.batches`) and
  ``changed`` events (a function was created, deleted, or its status changed) for the tenants the
  token may see.
- ``GET /ui/api/whoami``: ``{"auth", "signedIn", "superuser"}`` for the token (header or cookie).
- ``GET /ui/api/events/tree``: every store notification as ``{"type", "path"}`` (superuser only).

Each stream sends a comment every ``HEARTBEAT_S`` and ends when the client goes away, or after
``STREAM_S``: uvicorn waits for open responses before it stops, so an endless stream would hold up the
server's shutdown for as long as a console tab stays open. ``EventSource`` reconnects by itself (after
``retry``) and sends the ``id`` of the last event it got (``Last-Event-ID``): the state stream resumes
from that changelog offset, losing nothing; the other streams say ``hello`` again, and the console then
re-reads what it shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from statekeep.errors import UnauthorizedError
from statekeep.functions.driver.spark import STATUS_ROOT
from statekeep.server.ui import access
from statekeep.server.ui.api import record_json, state_of, store_registry
from statekeep.server.ui.batches import batch_history
from statekeep.state.base import ChangelogPosition
from statekeep.state.timestate import visible_page

if TYPE_CHECKING:
    from statekeep.metadata.types import Notification

T = TypeVar("T")

IDLE_S = 0.5
HEARTBEAT_S = 1.0
STREAM_S = 5.0
RETRY_MS = 500
PAGE = 500
HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse(event: str, data: object, event_id: int | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def hello(data: object) -> bytes:
    return f"retry: {RETRY_MS}\n".encode() + sse("hello", data)


async def live(request: Request, started: float) -> bool:
    """True while the stream should go on (the client is there and the stream is not ``STREAM_S`` old)."""
    return asyncio.get_running_loop().time() - started < STREAM_S and not await request.is_disconnected()


class _Wakeup(Generic[T]):
    """An asyncio queue of ``T`` fed from another thread (store listeners, the batch history)."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[T] = asyncio.Queue(maxsize=10_000)

    def put(self, item: T) -> None:
        def add() -> None:
            if not self.queue.full():  # a slow client loses wakeups, not memory
                self.queue.put_nowait(item)
        with contextlib.suppress(RuntimeError):  # the loop is closed: the stream is over
            self.loop.call_soon_threadsafe(add)

    async def get(self, timeout: float) -> T | None:
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def items(self, request: Request) -> AsyncIterator[T | None]:
        """Each item as it comes while the stream is :func:`live`, None after ``HEARTBEAT_S`` without one."""
        started = asyncio.get_running_loop().time()
        while await live(request, started):
            yield await self.get(HEARTBEAT_S)


def stream(body: Callable[[], AsyncIterator[bytes]]) -> StreamingResponse:
    return StreamingResponse(body(), media_type="text/event-stream", headers=HEADERS)


router = APIRouter(include_in_schema=False)  # EventSource sends no header: access checks the cookie too


@router.get("/ui/api/whoami")
async def whoami(request: Request) -> JSONResponse:
    """``{"auth", "signedIn", "superuser"}``: always 200, so the console's sign-in check logs no error."""
    try:
        return JSONResponse({"signedIn": True, **access.whoami(request)})
    except UnauthorizedError as e:
        return JSONResponse({"auth": True, "signedIn": False, "superuser": False, "reason": str(e)})


@router.get("/ui/api/events/functions/{tenant}/{namespace}/{name}/state")
async def state_events(tenant: str, namespace: str, name: str, request: Request,
                       after: int | None = Query(None, ge=-1)) -> StreamingResponse:
    store, _ = store_registry(request)
    access.check_tenant(request, tenant)
    state = await run_in_threadpool(state_of, request, tenant, namespace, name)  # 404 for no function
    last_id = request.headers.get("last-event-id", "").strip()  # a reconnect: on from the last record it got
    resume = int(last_id) if last_id.lstrip("-").isdigit() and len(last_id) <= 19 else None
    start = max(resume, -1) if resume is not None else after

    def positions() -> list[ChangelogPosition]:
        """Each changelog partition's position now (one partition but for partition-owned state)."""
        count = state.changelog_partitions()
        return [state.changelog_position()] if count == 1 else [state.partition_position(p) for p in range(count)]

    async def body() -> AsyncIterator[bytes]:
        wake: _Wakeup[Notification] = _Wakeup()
        with store.add_listener(wake.put):
            now = await run_in_threadpool(positions)
            # one partition: from where the client asked (its offsets are the event ids); several (partition-owned
            # state): each partition live from its position now, records tagged with their partition
            single = len(now) == 1
            offsets = [start if single and start is not None else p.last_offset for p in now]
            idle, started = 0.0, asyncio.get_running_loop().time()
            yield hello({"after": offsets[0] if single else None, "partitions": len(offsets)})
            while await live(request, started):
                moved = False
                for p, offset in enumerate(offsets):  # statekeep's time state (timers, windows, TTL) is not shown
                    shown, offsets[p] = await run_in_threadpool(visible_page, state, offset, PAGE, partition=p,
                                                                variables=True)
                    moved = moved or offsets[p] != offset
                    for r in shown:
                        if (data := record_json(r)) is not None:
                            yield sse("record", {**data, "partition": p}, r.offset if single else None)
                if moved:
                    idle = 0.0
                    continue
                now = await run_in_threadpool(positions)
                if len(now) != len(offsets):  # rescaled: the new partitions, live from now
                    offsets = [p.last_offset for p in now]
                    yield sse("reset", {"after": None, "partitions": len(offsets)})
                for p, position in enumerate(now):
                    if position.purged_offset > offsets[p]:  # compaction dropped tombstones this reader never saw
                        offsets[p] = position.last_offset
                        yield sse("reset", {"after": offsets[p], "partition": p}, offsets[p] if single else None)
                if await wake.get(IDLE_S) is None:
                    idle += IDLE_S
                    if idle >= HEARTBEAT_S:
                        idle = 0.0
                        yield b": heartbeat\n\n"
                while not wake.queue.empty():  # one read serves every notification queued so far
                    wake.queue.get_nowait()

    return stream(body)


@router.get("/ui/api/events/functions")
async def function_events(request: Request) -> StreamingResponse:
    store, registry = store_registry(request)
    access.whoami(request)  # 401 for a missing or unknown token
    visible: dict[str, bool] = {}

    def may_see(fqfn: str) -> bool:
        tenant = fqfn.split("/", 1)[0]
        if tenant not in visible:
            visible[tenant] = access.may_see(request, tenant)
        return visible[tenant]

    async def body() -> AsyncIterator[bytes]:
        # ("batch", fqfn, entry) from the batch history, ("changed", path, None) from the store
        wake: _Wakeup[tuple[str, str, dict[str, Any] | None]] = _Wakeup()
        remove = batch_history(request).watch(lambda fqfn, entry: wake.put(("batch", fqfn, entry)))
        roots = (registry.root + "/", STATUS_ROOT + "/")
        subscription = store.add_listener(
            lambda n: wake.put(("changed", n.path, None)) if n.path.startswith(roots) else None)
        try:
            yield hello({})
            async for item in wake.items(request):
                if item is None:
                    yield b": heartbeat\n\n"
                    continue
                kind, what, entry = item
                if kind == "batch":
                    assert entry is not None  # a batch wakeup carries its entry
                    if may_see(what):
                        yield sse("batch", {"function": what, **entry})
                    continue
                rest = what.split("/")[len((registry.root if what.startswith(roots[0]) else STATUS_ROOT)
                                            .split("/")):]
                if len(rest) >= 3 and may_see("/".join(rest[:3])):
                    yield sse("changed", {"function": "/".join(rest[:3])})
        finally:
            subscription.close()
            remove()

    return stream(body)


@router.get("/ui/api/events/tree")
async def tree_events(request: Request) -> StreamingResponse:
    store = access.check_superuser(request)

    async def body() -> AsyncIterator[bytes]:
        wake: _Wakeup[tuple[str, str]] = _Wakeup()
        with store.add_listener(lambda n: wake.put((n.type.value, n.path))):
            yield hello({})
            async for item in wake.items(request):
                yield b": heartbeat\n\n" if item is None else sse("change", {"type": item[0], "path": item[1]})

    return stream(body)
