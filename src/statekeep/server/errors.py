"""Errors as HTTP answers: every error body is ``{"reason": ...}``, its status the one of
:data:`statekeep.errors.HTTP_STATUS` (shared with the CLI's client, which maps statuses back)."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from statekeep import errors as e

log = logging.getLogger(__name__)

_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """The methods some route of the app serves at this request's path (each method is tried
    against every route through the routes' public ``matches``, included routers too)."""
    scope = dict(request.scope)
    return [method for method in _METHODS
            if any(route.matches({**scope, "method": method})[0] == Match.FULL for route in request.app.router.routes)]


def reason(status: int, text: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"reason": text}, status_code=status, headers=headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(e.StatekeepError)
    async def statekeep_error(request: Request, error: e.StatekeepError) -> JSONResponse:
        status = e.http_status(error)
        if status >= 500:
            log.error("%s %s failed", request.method, request.url.path, exc_info=error)
        return reason(status, str(error) or type(error).__name__)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return reason(400, f"{where}: {first.get('msg', 'invalid request')}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        response = reason(error.status_code, str(error.detail))
        if error.status_code == 405:  # RFC 9110: Allow lists every method of the resource, across routes
            response.headers["Allow"] = ", ".join(allowed_methods(request))
        elif error.headers:
            response.headers.update(error.headers)
        return response

    @app.exception_handler(Exception)
    async def internal_error(request: Request, error: Exception) -> JSONResponse:
        log.exception("%s %s failed", request.method, request.url.path)
        return reason(500, "internal server error")
