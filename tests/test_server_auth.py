"""Bearer-token auth of the REST API (a real server process): off by default, 401 without a valid
token, 403 on another tenant's function; metrics and docs stay open."""

from __future__ import annotations

import httpx
import pytest
from conftest import need

from support.server_process import create_function

need("fastapi")

TOKENS = {"root-token": {"superuser": True}, "acme-token": {"tenants": ["acme"]}}


@pytest.fixture(scope="module")
def server(server_process, tmp_path_factory):
    srv = server_process(tmp_path_factory.mktemp("auth") / "data", tokens=TOKENS)
    yield srv
    srv.stop()


def client(server, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=30)


def test_auth_on(server):
    with client(server, "root-token") as root, client(server, "acme-token") as acme, \
            client(server, None) as anonymous, client(server, "wrong") as wrong:
        assert create_function(root, "other", "ns", "f").status_code == 200
        assert create_function(acme, "acme", "ns", "f").status_code == 200
        for c in (anonymous, wrong):
            r = c.get("/admin/v3/functions/acme/ns/f")
            assert r.status_code == 401 and "token" in r.json()["reason"]
            assert r.headers["www-authenticate"] == "Bearer"
            assert create_function(c, "acme", "ns", "g").status_code == 401
            assert c.post("/admin/v3/functions/acme/ns/f/state/k", json={"stringValue": "x"}).status_code == 401
        # a tenant's token: its own tenant only
        assert acme.post("/admin/v3/functions/acme/ns/f/state/k", json={"stringValue": "x"}).status_code == 200
        assert acme.get("/admin/v3/functions/acme/ns/f/state/k").json()["stringValue"] == "x"
        for r in (acme.get("/admin/v3/functions/other/ns/f"),
                  acme.get("/admin/v3/functions/other/ns/f/state/k"),
                  acme.post("/admin/v3/functions/other/ns/f/state/k", json={"stringValue": "x"}),
                  acme.delete("/admin/v3/functions/other/ns/f"),
                  acme.get("/admin/v3/functions/other/ns"),
                  create_function(acme, "other", "ns", "g")):
            assert r.status_code == 403 and "tenant 'other'" in r.json()["reason"]
        assert root.get("/admin/v3/functions/other/ns/f/state/k").status_code == 404  # nothing was written
        assert root.get("/admin/v3/functions/other/ns").json() == ["f"]
        assert root.get("/admin/v3/functions/acme/ns/f/state/k").status_code == 200
        # scheme must be Bearer
        r = httpx.get(server.url + "/admin/v3/functions/acme/ns/f", headers={"Authorization": "Basic root-token"})
        assert r.status_code == 401
        # open endpoints
        assert anonymous.get("/metrics").status_code == 200
        assert anonymous.get("/openapi.json").status_code == 200
        # the bearer scheme is in the spec, on every guarded operation and not on the open ones
        spec = anonymous.get("/openapi.json").json()
        assert spec["components"]["securitySchemes"]["bearer"] == {
            "type": "http", "scheme": "bearer", "description": spec["components"]["securitySchemes"]["bearer"][
                "description"]}
        assert spec["paths"]["/admin/v3/functions/{tenant}/{namespace}/{name}"]["post"]["security"] == [{"bearer": []}]
        assert spec["paths"]["/admin/v3/functions/{tenant}/{namespace}/{name}/state/{key}"]["get"]["security"] == \
            [{"bearer": []}]
        assert "security" not in spec["paths"]["/metrics"]["get"]
        # with tokens, guarded operations list 401 and 403; open ones do not
        assert {"401", "403"} <= set(spec["paths"]["/admin/v3/functions/{tenant}/{namespace}/{name}"]["get"][
            "responses"])
        assert "401" not in spec["paths"]["/metrics"]["get"]["responses"]


def test_auth_off_by_default(server_process, tmp_path):
    srv = server_process(tmp_path / "data")
    try:
        with client(srv, None) as anonymous, client(srv, "anything") as any_token:
            assert create_function(anonymous, "acme", "ns", "f").status_code == 200
            assert any_token.get("/admin/v3/functions/acme/ns/f").status_code == 200
    finally:
        srv.stop()


def test_bad_tokens_file_refuses_to_start(tmp_path):
    from statekeep.errors import InvalidArgumentError
    from statekeep.server import create_app

    path = tmp_path / "tokens.json"
    path.write_text('{"t": {"tenants": "acme"}}')
    with pytest.raises(InvalidArgumentError):
        create_app({"metadata_url": "memory://", "tokens_file": str(path)})
    path.write_text("{not json")
    with pytest.raises(InvalidArgumentError):
        create_app({"metadata_url": "memory://", "tokens_file": str(path)})
