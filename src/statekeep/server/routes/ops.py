"""Operations, open without a token: ``GET /metrics`` (Prometheus) and ``GET /health``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from statekeep.server.metrics import CONTENT_TYPE

router = APIRouter(tags=["ops"])


@router.get("/metrics", response_class=PlainTextResponse, summary="Prometheus metrics")
async def prometheus(request: Request) -> Response:
    text = await run_in_threadpool(request.app.state.ctx.metrics.render)
    return PlainTextResponse(text, media_type=CONTENT_TYPE)


@router.get("/health", summary="Liveness")
async def health() -> dict[str, str]:
    return {"status": "ok"}
