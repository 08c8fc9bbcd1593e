"""The one mapping from the statekeep error tree to HTTP statuses; every error body is ``{"reason": ...}``.

A client error never becomes a 5xx: malformed input is 400, too large 413, unknown function or key
404, a version conflict or existing function 409, missing or bad credentials 401, another tenant's
function 403. Only an unreachable store (503) or a bug (500) is a server error.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from statekeep import errors as e

log = logging.getLogger(__name__)

STATUS: dict[type[BaseException], int] = {
    e.InvalidArgumentError: 400, e.InvalidPathError: 400,
    e.UnauthorizedError: 401, e.ForbiddenError: 403, e.NotFoundError: 404,
    e.BadVersionError: 409, e.AlreadyExistsError: 409, e.NotEmptyError: 409, e.LockBusyError: 409,
    e.ReadOnlyStoreError: 409,
    e.ValueTooLargeError: 413,
    e.StoreUnavailableError: 503, e.StoreClosedError: 503,
    e.StatekeepError: 500,
}


def status_of(error: BaseException) -> int:
    """The HTTP status of a statekeep error: its most specific class in :data:`STATUS`."""
    for cls in type(error).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


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
        status = status_of(error)
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
