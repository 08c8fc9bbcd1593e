"""The console's Topics page: statekeep's Pulsar topics (see :mod:`statekeep.functions.messaging.topics`) under the
server's topics root, each with its file and message counts, and a topic's newest messages with their
key, properties and event time. A token sees the topics of its tenants (``persistent://TENANT/...``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from statekeep.functions.messaging import topics
from statekeep.server.ui import access
from statekeep.server.ui.pages import render

router = APIRouter(include_in_schema=False)
MAX_MESSAGES = 1000


def _tenant(name: str) -> str:
    return name.partition("://")[2].split("/")[0]


@router.get("/ui/topics")
async def topics_page(topic: str = "") -> Response:
    return render("topics", f"{topic} · topic" if topic else "Topics", topic=topic)


@router.get("/ui/api/topics")
async def list_topics(request: Request) -> Response:
    """``[{name, files, messages}]`` of the topics this token may see, sorted by name."""
    root = topics.default_root()

    def listing() -> list[dict[str, Any]]:
        return [{"name": name, "files": len(topics.files(root, name)),
                 "messages": sum(1 for _ in topics.read(root, name))}
                for name in topics.list_topics(root) if access.may_see(request, _tenant(name))]

    return JSONResponse(await run_in_threadpool(listing))


@router.get("/ui/api/topic")
async def topic_messages(request: Request, name: str, limit: int = Query(100, ge=1, le=MAX_MESSAGES)) -> Response:
    """The topic's newest ``limit`` messages (oldest first) and its total; 400 for a bad name, 403 for
    another tenant's topic."""
    full = topics.complete(name)
    access.check_tenant(request, _tenant(full))
    root = topics.default_root()

    def newest() -> dict[str, Any]:
        records = list(topics.read(root, full))
        return {"name": full, "total": len(records), "messages": records[-limit:]}

    return JSONResponse(await run_in_threadpool(newest))
