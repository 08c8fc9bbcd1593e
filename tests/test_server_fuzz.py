"""Fuzz the REST API with schemathesis, from the server's own OpenAPI document, against a real
server process: whatever is sent (valid or not), no response is a 5xx. Bounded: a few examples
per operation, so the suite stays fast."""

from __future__ import annotations

import itertools

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from support.server_process import ServerProcess, create_function  # noqa: E402

pytest.importorskip("fastapi")
_turn = itertools.count()


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("fuzz") / "data")
    with httpx.Client(base_url=srv.url) as client:
        create_function(client, "fuzz", "ns", "fn")
        client.post("/admin/v3/functions/fuzz/ns/fn/state/k", json={"numberValue": 1})
    yield srv
    srv.stop()


def _openapi() -> dict:
    """The server's own OpenAPI document (the same create_app the server process runs)."""
    from statekeep.server import create_app

    app = create_app({"metadata_url": "memory://"})
    try:
        return app.openapi()
    finally:
        app.state.service.close()


schema = schemathesis.openapi.from_dict(_openapi())
schema.config.generation.update(max_examples=12)


@schema.parametrize()
@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case, fuzz_server):
    # half the cases address the existing function, so the fuzzer reaches past the 404s
    if next(_turn) % 2 and case.path_parameters and "name" in case.path_parameters:
        case.path_parameters.update(tenant="fuzz", namespace="ns", name="fn")
    case.call_and_validate(base_url=fuzz_server.url, checks=[not_a_server_error], timeout=30)


def test_server_survives_fuzzing(fuzz_server):
    assert httpx.get(fuzz_server.url + "/health").status_code == 200


def test_fuzzer_reached_the_api(fuzz_server):
    text = httpx.get(fuzz_server.url + "/metrics").text
    lines = [line for line in text.splitlines() if line.startswith("statekeep_http_requests_total")]
    total = sum(float(line.rsplit(" ", 1)[1]) for line in lines)  # prometheus_client writes 3.0
    assert total > 100, text
    assert not any('status="5' in line for line in lines), text
    # the existing function was reached, with success and with client errors
    assert any("/state/{key:path}" in line and 'status="200"' in line for line in lines), text
