"""Fuzz the REST API with schemathesis (its CLI, every check: server errors, status codes, content
types, response schema and headers conformance, positive data accepted, negative data rejected,
missing headers, unsupported methods with ``Allow``, auth, use after free...) from the server's own
OpenAPI document, against a real server process, in every phase (examples, coverage, fuzzing,
stateful) with zero failures. Bounded (a few examples per operation) so it stays fast.

One exception is configured, and only for creating and updating a function: a schema-valid upload
may still get 400, because what makes it valid goes beyond JSON Schema: the ``data`` part must be
Python source defining the entry point, and a name repeated in ``functionConfig`` must equal the
URL's."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from support.server_process import ServerProcess, create_function

pytest.importorskip("schemathesis")
pytest.importorskip("fastapi")

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


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("fuzz") / "data")
    with httpx.Client(base_url=srv.url) as client:
        create_function(client, "fuzz", "ns", "fn")
        client.post("/admin/v3/functions/fuzz/ns/fn/state/k", json={"numberValue": 1})
    yield srv
    srv.stop()


def run_schemathesis(url: str, spec: str, config: Path, *extra: str) -> subprocess.CompletedProcess:
    st = Path(sys.executable).with_name("st")
    argv = [str(st), "--config-file", str(config), "run", spec, "--url", url, "--checks", "all", "--mode", "all",
            "--max-examples", "3", "--workers", "2", "--generation-deterministic", "--continue-on-failure",
            "--no-color", "--request-timeout", "30", *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=300)


def test_schemathesis_all_checks_zero_failures(fuzz_server, tmp_path):
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    result = run_schemathesis(fuzz_server.url, fuzz_server.url + "/openapi.json", config)
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr[-5000:]
    tested = re.search(r"Tested: (\d+)", result.stdout)
    assert tested and int(tested.group(1)) >= 20, result.stdout[-5000:]  # every operation of the spec


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
