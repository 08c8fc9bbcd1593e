"""Bearer-token authorization. Off unless tokens are configured.

Tokens map to grants: ``{"TOKEN": {"superuser": true}, "OTHER": {"tenants": ["acme"]}}`` (a JSON file
or a dict). With tokens configured, a request to ``/admin/`` without a known token raises
:class:`UnauthorizedError` (401) and one for a tenant its token does not grant
:class:`ForbiddenError` (403). ``/docs``, ``/openapi.json``, ``/metrics`` and ``/health`` stay open.

Routes are guarded by the FastAPI dependency :data:`authorize` (``dependencies=[Depends(authorize)]``
on a router or route): it checks the token against the route's ``{tenant}`` path parameter (or, on a
route without one, only that the token is known) with the :class:`Authorizer` the app keeps in
``app.state.ctx.authorizer``, and, being a security scheme, puts ``bearer`` in the OpenAPI spec.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from fastapi import Request
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.security.base import SecurityBase

from statekeep.errors import ForbiddenError, InvalidArgumentError, UnauthorizedError


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Authorizer:
    """The configured tokens and their grants; ``enabled`` is False when none are configured."""

    def __init__(self, tokens: Mapping[str, Mapping[str, object]] | None) -> None:
        self.enabled = tokens is not None
        self._grants: dict[bytes, tuple[bool, frozenset[str]]] = {}
        for token, grant in (tokens or {}).items():
            if not isinstance(token, str) or not token or not isinstance(grant, Mapping):
                raise InvalidArgumentError("tokens map each token string to {\"superuser\": true} or "
                                           "{\"tenants\": [...]}")
            tenants = grant.get("tenants", [])
            if not isinstance(tenants, list) or not all(isinstance(t, str) for t in tenants):
                raise InvalidArgumentError(f"grant 'tenants' must be a list of tenant names: {grant!r}")
            # keyed by digest: lookups do not compare secret strings character by character
            self._grants[_digest(token)] = (grant.get("superuser") is True, frozenset(tenants))

    @classmethod
    def from_file(cls, path: str | Path) -> Authorizer:
        try:
            return cls(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as e:
            raise InvalidArgumentError(f"cannot read tokens file {path}: {e}") from e

    def check(self, authorization: str | None, tenant: str | None) -> None:
        """Allow the request or raise :class:`UnauthorizedError` / :class:`ForbiddenError`.
        ``tenant`` None: any known token is allowed (the caller checks tenants itself)."""
        if not self.enabled:
            return
        scheme, _, token = (authorization or "").partition(" ")
        grant = self._grants.get(_digest(token.strip())) if scheme.lower() == "bearer" else None
        if grant is None:
            raise UnauthorizedError("a valid bearer token is required (Authorization: Bearer TOKEN)")
        superuser, tenants = grant
        if tenant is not None and not superuser and tenant not in tenants:
            raise ForbiddenError(f"this token does not grant access to tenant {tenant!r}")


class BearerAuth(SecurityBase):
    """The authorization dependency (see the module docstring); an OpenAPI ``http``/``bearer`` scheme."""

    def __init__(self) -> None:
        self.model = HTTPBearerModel(description="Authorization: Bearer TOKEN (only when the server has tokens)")
        self.scheme_name = "bearer"

    async def __call__(self, request: Request) -> None:
        authorizer: Authorizer = request.app.state.ctx.authorizer
        if authorizer.enabled:
            authorizer.check(request.headers.get("authorization"), request.path_params.get("tenant"))


#: ``Depends(authorize)`` guards a route or router.
authorize = BearerAuth()
