"""Who may see what in the console, and how stored bytes are shown.

The console's JSON and SSE endpoints authorize exactly as the REST API does (:class:`Authorizer`): a
function's data needs a token granting its tenant; the metadata tree and state handles span every
tenant, so they need a superuser token. The JSON endpoints take the token from ``Authorization: Bearer
TOKEN`` only (the server's :data:`~statekeep.server.auth.authorize` dependency); the event streams and
``whoami``, all GET, also from the ``statekeep_token`` cookie the console's token prompt sets
(``EventSource`` cannot send headers). Nothing that writes accepts the cookie, so a cross-site form
cannot write.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from fastapi import Request

from statekeep.errors import ForbiddenError

if TYPE_CHECKING:
    from statekeep.metadata.base import MetadataStore

COOKIE = "statekeep_token"
# no grant lists this tenant (tenant names are validated path segments; NUL is not allowed in one),
# so only a superuser token passes a check for it
_SUPERUSER_ONLY = "\x00superuser"


def authorization(request: Request) -> str | None:
    """The request's credentials: the Authorization header, else (GET only) the console's cookie."""
    header = request.headers.get("authorization")
    if header is None and request.method == "GET":
        token = unquote(request.cookies.get(COOKIE, ""))  # the console writes it URL-encoded
        if token:
            header = f"Bearer {token}"
    return header


def check_tenant(request: Request, tenant: str | None) -> None:
    """Raise :class:`UnauthorizedError` / :class:`ForbiddenError` unless the token may see ``tenant``
    (None: any valid token)."""
    request.app.state.ctx.authorizer.check(authorization(request), tenant)


def check_superuser(request: Request) -> MetadataStore:
    """The app's metadata store, whole: raises unless auth is off or the token is a superuser's."""
    try:
        check_tenant(request, _SUPERUSER_ONLY)
    except ForbiddenError:
        raise ForbiddenError("only a superuser token may browse the whole store") from None
    store: MetadataStore = request.app.state.ctx.store
    return store


def may_see(request: Request, tenant: str) -> bool:
    """True if the token may see ``tenant``; raises :class:`UnauthorizedError` for a missing/bad token."""
    try:
        check_tenant(request, tenant)
        return True
    except ForbiddenError:
        return False


def whoami(request: Request) -> dict[str, Any]:
    """``{"auth": on?, "superuser": bool}`` (a tenant's token is not a superuser's);
    :class:`UnauthorizedError` when auth is on and the token is missing or unknown."""
    if not request.app.state.ctx.authorizer.enabled:
        return {"auth": False, "superuser": True}
    return {"auth": True, "superuser": may_see(request, _SUPERUSER_ONLY)}


def value_json(value: bytes) -> dict[str, Any]:
    """Bytes as FunctionState-style JSON: ``stringValue`` if UTF-8, else ``byteValue`` (base64); the
    console decodes either for display (JSON pretty-printed, text, hex)."""
    try:
        return {"stringValue": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"byteValue": base64.b64encode(value).decode("ascii")}


def value_from_json(body: Any) -> bytes:
    """The bytes of a ``{"stringValue"}`` or ``{"byteValue": base64}`` body; :class:`ValueError` otherwise."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object with stringValue or byteValue")
    text = body.get("stringValue")
    if isinstance(text, str):
        return text.encode("utf-8")
    if isinstance(body.get("byteValue"), str):
        return base64.b64decode(body["byteValue"], validate=True)
    raise ValueError("the body must have stringValue (text) or byteValue (base64)")


__all__ = ["COOKIE", "authorization", "check_superuser", "check_tenant", "may_see",
           "value_from_json", "value_json", "whoami"]
