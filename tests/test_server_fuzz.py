"""Fuzz the REST API with schemathesis (its CLI, every check: server errors, status codes, content
types, response schema and headers conformance, positive data accepted, negative data rejected,
missing headers, unsupported methods with ``Allow``, auth, use after free...) from the server's own
OpenAPI document, against a real server process, in every phase (examples, coverage, fuzzing,
stateful) with zero failures. Bounded (a few examples per operation) so it stays fast.

One exception is configured, and only for creating and updating a function: a schema-valid upload
may still get 400, because what makes it valid goes beyond JSON Schema: the ``data`` part must be
Python source defining the entry point, and a name repeated in ``functionConfig`` must equal the
URL's.

The same run against the state paths as Pulsar's own functions spec (swagger ``v3/functions``)
describes them (:data:`PULSAR_STATE_SPEC`, written from it here) has two exceptions, each a gap of
that spec rather than of the server: its putstate documents no body (Pulsar itself requires the
``state`` part: a bodiless put is a 400 there too), and statekeep's resource also has DELETE (so
``Allow`` lists a method Pulsar's spec does not: allow_header_conformance is left out of that
run). Its FunctionState documents ``byteValue`` as an array; Pulsar (Jackson) and statekeep send
base64 text: the seeded key holds a number, so that difference is not exercised here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import need

from support.server_process import create_function

need("schemathesis")
need("fastapi")

CONFIG = """
[dictionaries.tenant]
values = ["fuzz"]
[dictionaries.namespace]
values = ["ns"]
[dictionaries.name]
values = ["fn"]
[dictionaries.key]
values = ["k"]

# most cases address the existing function (and key), so the fuzzer reaches past the 404s
[parameters]
"path.tenant" = { dictionary = "tenant", probability = 0.8 }
"path.namespace" = { dictionary = "namespace", probability = 0.8 }
"path.name" = { dictionary = "name", probability = 0.8 }
"path.key" = { dictionary = "key", probability = 0.5 }

[[operations]]
include-path = "/admin/v3/functions/{tenant}/{namespace}/{name}"
include-method = ["POST", "PUT"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]
"""


_PATH = [{"in": "path", "name": name, "required": True, "type": "string"}
         for name in ("tenant", "namespace", "functionName", "key")]
#: Pulsar's state paths as its swagger ``v3/functions`` describes them (Swagger 2.0, base /admin/v3)
PULSAR_STATE_SPEC = {
    "swagger": "2.0", "info": {"title": "Pulsar functions: state", "version": "v3"}, "basePath": "/admin/v3",
    "paths": {"/functions/{tenant}/{namespace}/{functionName}/state/{key}": {
        "get": {"operationId": "getFunctionState", "produces": ["application/json"], "parameters": _PATH,
                "responses": {"200": {"description": "the state", "schema": {"$ref": "#/definitions/FunctionState"}},
                              **{code: {"description": "error"} for code in ("400", "403", "404", "500")}}},
        "post": {"operationId": "putFunctionState", "consumes": ["multipart/form-data"], "parameters": _PATH,
                 "produces": ["application/json"],
                 "responses": {code: {"description": "error"} for code in ("400", "403", "404", "500")}},
    }},
    "definitions": {"FunctionState": {"type": "object", "properties": {
        "key": {"type": "string"}, "stringValue": {"type": "string"},
        "byteValue": {"type": "array", "items": {"type": "string", "format": "byte"}},
        "numberValue": {"type": "integer", "format": "int64"}, "version": {"type": "integer", "format": "int64"}}}},
}

PULSAR_CONFIG = CONFIG.replace('"path.name"', '"path.functionName"').split("[[operations]]")[0] + """
[[operations]]
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409"]
"""


@pytest.fixture(scope="module")
def fuzz_server(server_process, tmp_path_factory):
    srv = server_process(tmp_path_factory.mktemp("fuzz") / "data")
    with httpx.Client(base_url=srv.url) as client:
        create_function(client, "fuzz", "ns", "fn")
        client.post("/admin/v3/functions/fuzz/ns/fn/state/k", json={"numberValue": 1})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def auth_server(server_process, tmp_path_factory):
    """A server with tokens: the spec then declares the bearer scheme, 401 and 403."""
    srv = server_process(tmp_path_factory.mktemp("fuzz-auth") / "data",
                        tokens={"root-token": {"superuser": True}, "other-token": {"tenants": ["other"]}})
    with httpx.Client(base_url=srv.url, headers={"Authorization": "Bearer root-token"}) as client:
        create_function(client, "fuzz", "ns", "fn")
        client.post("/admin/v3/functions/fuzz/ns/fn/state/k", json={"numberValue": 1})
    yield srv
    srv.stop()


def run_schemathesis(url: str, spec: str, config: Path, *extra: str) -> subprocess.CompletedProcess:
    st = Path(sys.executable).with_name("st")
    # one worker: schemathesis' threads parse source concurrently, which CPython 3.11's AST constructor
    # does not survive under load ("SystemError: AST constructor recursion depth mismatch")
    argv = [str(st), "--config-file", str(config), "run", spec, "--url", url, "--checks", "all", "--mode", "all",
            "--max-examples", "15", "--workers", "1", "--generation-deterministic", "--continue-on-failure",
            "--no-color", "--request-timeout", "30", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_schemathesis_all_checks_zero_failures(fuzz_server, tmp_path):
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    result = run_schemathesis(fuzz_server.url, fuzz_server.url + "/openapi.json", config)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    tested = re.search(r"Tested: (\d+)", result.stdout)
    assert tested and int(tested.group(1)) >= 20, result.stdout[-5000:]  # every operation of the spec


def test_schemathesis_against_pulsars_state_paths(fuzz_server, tmp_path):
    config = tmp_path / "schemathesis.toml"
    config.write_text(PULSAR_CONFIG)
    spec = tmp_path / "pulsar-state.json"
    spec.write_text(json.dumps(PULSAR_STATE_SPEC))
    result = run_schemathesis(fuzz_server.url + "/admin/v3", str(spec), config,
                              "--exclude-checks", "allow_header_conformance")
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert re.search(r"Tested: 2\b", result.stdout), result.stdout[-5000:]


def test_schemathesis_all_checks_with_auth_on(auth_server, tmp_path):
    """ignored_auth (a request without the token must get 401) and the rest, with a superuser token."""
    config = tmp_path / "schemathesis.toml"
    config.write_text('headers = { Authorization = "Bearer root-token" }\n' + CONFIG)
    result = run_schemathesis(auth_server.url, auth_server.url + "/openapi.json", config)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    assert re.search(r"Tested: (\d+)", result.stdout), result.stdout[-5000:]
    with httpx.Client(base_url=auth_server.url) as anonymous:  # the fuzzer got in only with the token
        assert anonymous.get("/admin/v3/functions/fuzz/ns/fn").status_code == 401
        lines = [line for line in anonymous.get("/metrics").text.splitlines()
                 if line.startswith("statekeep_http_requests_total")]
    assert any('status="401"' in line for line in lines)  # ignored_auth's requests without the token
    assert any("/state/{key:path}" in line and 'status="200"' in line for line in lines)  # and with it


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
