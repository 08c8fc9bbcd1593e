"""The REST API in a real ``statekeep standalone`` process, with the request shapes pulsar-admin sends."""

from __future__ import annotations

import base64
import itertools
import json
import struct
from pathlib import Path

import httpx
import pytest
from conftest import need

from support.server_process import FUNCTION, create_function

need("fastapi")

_names = itertools.count()


@pytest.fixture(scope="module")
def server(server_process, tmp_path_factory):
    srv = server_process(tmp_path_factory.mktemp("rest") / "data")
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=30) as c:
        yield c


@pytest.fixture
def fn(client):
    """A fresh function; returns its URL path."""
    name = f"f{next(_names)}"
    assert create_function(client, "acme", "prod", name).status_code == 200
    return f"/admin/v3/functions/acme/prod/{name}"


def state_multipart(state: dict) -> dict:
    return {"state": (None, json.dumps(state), "application/json")}


def test_standalone_without_a_worker_loads_no_spark_arrow_or_pandas(server):
    """What kept a server's start short (it answered in about a second) is that a server without a
    worker loads none of the heavy parts: no JVM among its processes, no native library of PySpark's
    Python side (pyarrow, pandas, numpy, py4j) in its memory. Checked by what it loaded, not by a clock."""
    maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    loaded = {line.split("site-packages/")[1].split("/")[0] for line in maps.splitlines() if "site-packages/" in line}
    assert not loaded & {"pyarrow", "pandas", "numpy", "py4j", "pyspark"}, loaded
    children = Path(f"/proc/{server.process.pid}/task/{server.process.pid}/children").read_text().split()
    assert children == [], children  # no JVM, no other process


def test_create_get_list_update_delete(client):
    r = create_function(client, "acme", "crud", "wc", userConfig={"greeting": "hi"}, parallelism=2)
    assert r.status_code == 200, r.text
    assert r.json()["name"] == "wc" and r.json()["userConfig"] == {"greeting": "hi"}
    got = client.get("/admin/v3/functions/acme/crud/wc").json()
    assert got["inputs"] == ["in.jsonl"] and got["parallelism"] == 2 and got["className"] == "process"
    assert "autoAck" not in got  # unknown pulsar-admin fields are accepted and ignored
    assert client.get("/admin/v3/functions/acme/crud").json() == ["wc"]
    # again: 409
    r = create_function(client, "acme", "crud", "wc")
    assert r.status_code == 409 and "already exists" in r.json()["reason"]
    # update: only the fields given change; the code part is optional
    r = client.put("/admin/v3/functions/acme/crud/wc", files={
        "functionConfig": (None, json.dumps({"parallelism": 3}), "application/json")})
    assert r.status_code == 200, r.text
    got = client.get("/admin/v3/functions/acme/crud/wc").json()
    assert got["parallelism"] == 3 and got["userConfig"] == {"greeting": "hi"}
    assert client.delete("/admin/v3/functions/acme/crud/wc").status_code == 204
    assert client.get("/admin/v3/functions/acme/crud/wc").status_code == 404
    assert client.delete("/admin/v3/functions/acme/crud/wc").status_code == 404
    assert client.get("/admin/v3/functions/acme/crud").json() == []
    r = client.put("/admin/v3/functions/acme/crud/wc", files={
        "functionConfig": (None, json.dumps({"parallelism": 3}), "application/json")})
    assert r.status_code == 404


@pytest.mark.parametrize("code, message", [
    (b"def process(input, context):\n    return (\n", "f.py:2"),
    (b"def handle(input, context):\n    pass\n", "def process(input, context)"),
    # (a one-argument def process(input) is Pulsar's native function: accepted since issue 14)
    (b"def process(input, context, extra):\n    pass\n", "process(input, context)"),
    (b"class F:\n    def process(self, input, context):\n        pass\n", "top-level"),
    (b"\xff\xfe", "UTF-8"),
])
def test_bad_function_code_refused_with_a_clear_reason(client, code, message):
    r = create_function(client, "acme", "bad", "f", code=code)
    assert r.status_code == 400 and message in r.json()["reason"]
    assert client.get("/admin/v3/functions/acme/bad/f").status_code == 404


@pytest.mark.parametrize("files, message", [
    ({"data": ("f.py", FUNCTION)}, "functionConfig"),
    ({"functionConfig": (None, "{not json", "application/json"), "data": ("f.py", FUNCTION)}, "JSON"),
    ({"functionConfig": (None, json.dumps({"inputs": ["x"]}), "application/json")}, "data part"),
    ({"functionConfig": (None, json.dumps({"inputs": []}), "application/json"), "data": ("f.py", FUNCTION)}, "inputs"),
    ({"functionConfig": (None, json.dumps({"inputs": ["x"], "name": "other"})), "data": ("f.py", FUNCTION)}, "differs"),
    ({"functionConfig": (None, json.dumps({"inputs": ["x"], "parallelism": "2"})), "data": ("f.py", FUNCTION)},
     "parallelism"),
    ({"functionConfig": (None, json.dumps({"inputs": ["x"], "runtime": "JAVA"})), "data": ("f.py", FUNCTION)},
     "PYTHON"),
    ({"functionConfig": (None, json.dumps({"inputs": ["x"], "stateStorage": {"provider": "metadata", "config": {
        "metadata_url": "local:///tmp/evil"}}})), "data": ("f.py", FUNCTION)}, "stateStorage"),
])
def test_malformed_function_uploads_are_400(client, files, message):
    r = client.post("/admin/v3/functions/acme/malformed/f", files=files)
    assert r.status_code == 400 and message in r.json()["reason"], r.text
    assert client.get("/admin/v3/functions/acme/malformed").json() == []


def test_non_multipart_create_is_400(client):
    r = client.post("/admin/v3/functions/acme/x/f", json={"inputs": ["x"]})
    assert r.status_code == 400 and "multipart" in r.json()["reason"]


@pytest.mark.parametrize("path", ["/admin/v3/functions/bad name/ns/f", "/admin/v3/functions/t/../f",
                                  "/admin/v3/functions/t/ns/" + "x" * 65])
def test_bad_identifiers(client, path):
    r = client.get(path)
    assert r.status_code in (400, 404) and "reason" in r.json()


def test_state_put_and_query_in_every_form(client, fn):
    # pulsar-admin putstate: multipart part "state" with FunctionState JSON
    r = client.post(fn + "/state/greeting", files=state_multipart({"key": "greeting", "stringValue": "héllo"}))
    assert r.status_code == 200, r.text
    assert client.get(fn + "/state/greeting").json() == {"key": "greeting", "stringValue": "héllo", "version": 0}
    # plain JSON body
    r = client.post(fn + "/state/count", json={"key": "count", "numberValue": -7})
    assert r.json() == {"key": "count", "numberValue": -7, "version": 0}
    assert client.get(fn + "/state/count").json() == {"key": "count", "numberValue": -7, "version": 0}
    # bytes that are not UTF-8 come back as base64 byteValue
    raw = b"\xff\x00\x10"
    client.post(fn + "/state/blob", json={"byteValue": base64.b64encode(raw).decode()})
    assert client.get(fn + "/state/blob").json() == {"key": "blob", "byteValue": "/wAQ", "version": 0}
    # pulsar-admin's Gson writes byte[] as an array of signed bytes
    client.post(fn + "/state/blob", files=state_multipart({"key": "blob", "byteValue": [-1, 0, 16]}))
    assert client.get(fn + "/state/blob").json() == {"key": "blob", "byteValue": "/wAQ", "version": 1}
    # keys with '/', '.', spaces and unicode travel percent-encoded
    for key in ["a/b/c", "x.y", "with space", "ключ", "%2F", "..", "."]:
        path = fn + "/state/" + httpx.URL("/" + key.replace("%", "%25").replace(".", "%2E")).raw_path.decode()[1:]
        r = client.post(path, json={"key": key, "stringValue": key})
        assert r.status_code == 200, (key, r.text)
        assert client.get(path).json() == {"key": key, "stringValue": key, "version": 0}


def test_counter_is_8_byte_big_endian_for_functions(client, fn, server):
    client.post(fn + "/state/n", json={"numberValue": 2 ** 40 + 5})
    from statekeep.functions.config.service import FunctionService

    # read the same key through the registry's provider, as the Spark runtime does (another process)
    with FunctionService.open(f"local://{server.data_dir}") as service:
        state = service.registry.state_store("acme", "prod", fn.rsplit("/", 1)[1])
        assert state.get("n") == struct.pack(">q", 2 ** 40 + 5) and state.get_counter("n") == 2 ** 40 + 5
        state.incr("n", 1)
    assert client.get(fn + "/state/n").json()["numberValue"] == 2 ** 40 + 6


@pytest.mark.parametrize("body, status, message", [
    ({"stringValue": "a", "numberValue": 1}, 400, "exactly one"),
    ({}, 400, "exactly one"),
    ({"key": "other", "stringValue": "a"}, 400, "differs"),
    ({"numberValue": 2 ** 63}, 400, "64-bit"),
    ({"numberValue": 1.5}, 400, "integer"),
    ({"numberValue": True}, 400, "integer"),
    ({"byteValue": "not base64!"}, 400, "base64"),
    ({"byteValue": [256]}, 400, "byte"),
    ({"stringValue": 5}, 400, "string"),
    ([1, 2], 400, "JSON object"),
])
def test_bad_state_bodies_are_rejected_and_change_nothing(client, fn, body, status, message):
    client.post(fn + "/state/k", json={"stringValue": "before"})
    for r in (client.post(fn + "/state/k", json=body), client.post(fn + "/state/k", files=state_multipart(body))):
        assert r.status_code == status and message in r.json()["reason"], r.text
    assert client.get(fn + "/state/k").json() == {"key": "k", "stringValue": "before", "version": 0}


def test_malformed_state_requests(client, fn):
    r = client.post(fn + "/state/k", content=b"{oops", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["reason"]
    r = client.post(fn + "/state/k", files={"other": (None, "{}")})
    assert r.status_code == 400 and "'state' part" in r.json()["reason"]
    r = client.post(fn + "/state/k", content=b"--x\r\nbroken",
                    headers={"content-type": "multipart/form-data; boundary=x"})
    assert r.status_code == 400
    assert client.get(fn + "/state/k").status_code == 404


def test_too_large_is_413_and_changes_nothing(client, fn):
    big = "x" * (2 << 20)  # above every provider's value limit, below the request limit
    r = client.post(fn + "/state/big", json={"stringValue": big})
    assert r.status_code == 413, r.text
    r = client.post(fn + "/state/big", content=b"x" * (9 << 20), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert client.get(fn + "/state/big").status_code == 404


def test_unknown_function_and_key_are_404(client, fn):
    assert client.get(fn + "/state/absent").status_code == 404
    assert client.delete(fn + "/state/absent").status_code == 404
    for r in (client.get("/admin/v3/functions/acme/prod/nosuch/state/k"),
              client.post("/admin/v3/functions/acme/prod/nosuch/state/k", json={"stringValue": "v"}),
              client.get("/admin/v3/functions/acme/prod/nosuch/state")):
        assert r.status_code == 404 and "does not exist" in r.json()["reason"]


def test_if_match_versions(client, fn):
    assert client.post(fn + "/state/k", json={"stringValue": "a"}, headers={"If-None-Match": "*"}).status_code == 200
    r = client.post(fn + "/state/k", json={"stringValue": "b"}, headers={"If-None-Match": "*"})
    assert r.status_code == 409
    r = client.get(fn + "/state/k")
    assert r.headers["etag"] == '"0"'
    r = client.post(fn + "/state/k", json={"stringValue": "b"}, headers={"If-Match": '"3"'})
    assert r.status_code == 409 and "version 0" in r.json()["reason"]
    r = client.post(fn + "/state/k", json={"stringValue": "b"}, headers={"If-Match": '"0"'})
    assert r.status_code == 200 and r.json()["version"] == 1
    assert client.delete(fn + "/state/k", headers={"If-Match": "0"}).status_code == 409
    assert client.post(fn + "/state/k", json={"stringValue": "c"}, headers={"If-Match": "soon"}).status_code == 400
    assert client.get(fn + "/state/k").json()["stringValue"] == "b"
    assert client.delete(fn + "/state/k", headers={"If-Match": "1"}).status_code == 204
    assert client.get(fn + "/state/k").status_code == 404


def test_paged_state_listing(client, fn):
    keys = [f"user/{i:02d}" for i in range(12)] + ["other"]
    for key in keys:
        client.post(fn + "/state/" + key, json={"numberValue": 1})
    seen, after = [], None
    while True:
        params = {"prefix": "user/", "limit": 5, **({"startAfter": after} if after else {})}
        page = client.get(fn + "/state", params=params).json()
        seen += [item["key"] for item in page["items"]]
        assert all(item == {"key": item["key"], "numberValue": 1, "version": 0} for item in page["items"])
        after = page["nextStartAfter"]
        if after is None:
            break
    assert seen == keys[:12]
    assert client.get(fn + "/state", params={"limit": 0}).status_code == 400
    assert client.get(fn + "/state", params={"limit": "many"}).status_code == 400


def test_delete_then_recreate_has_no_old_state(client):
    path = "/admin/v3/functions/acme/life/wc"
    assert create_function(client, "acme", "life", "wc").status_code == 200
    client.post(path + "/state/count", json={"numberValue": 41})
    client.post(path + "/state/name", json={"stringValue": "old"})
    assert client.delete(path).status_code == 204
    assert client.get(path + "/state/count").status_code == 404  # function gone
    assert create_function(client, "acme", "life", "wc").status_code == 200
    assert client.get(path + "/state/count").status_code == 404
    assert client.get(path + "/state").json() == {"items": [], "nextStartAfter": None}


def test_errors_are_json_with_reason(client):
    for r in (client.get("/nope"), client.patch("/admin/v3/functions/a/b/c"), client.get("/admin/v3/functions/a/b/c")):
        assert r.status_code in (404, 405) and isinstance(r.json()["reason"], str)


def test_metrics(client, fn):
    client.get(fn + "/state/absent")
    client.post(fn + "/state/k", json={"numberValue": 1})
    text = client.get("/metrics").text
    assert 'statekeep_http_requests_total{method="GET",route="/admin/v3/functions/{tenant}/{namespace}/{name}' \
           '/state/{key:path}",status="404"}' in text
    assert "statekeep_http_request_duration_seconds_bucket{" in text and 'le="+Inf"' in text
    assert 'statekeep_state_operations_total{op="put"}' in text
    assert "# TYPE statekeep_http_request_duration_seconds histogram" in text


def test_openapi_and_docs(client):
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    assert "/admin/v3/functions/{tenant}/{namespace}/{name}/state/{key}" in paths
    post = paths["/admin/v3/functions/{tenant}/{namespace}/{name}/state/{key}"]["post"]
    assert {"application/json", "multipart/form-data"} <= set(post["requestBody"]["content"])
    assert client.get("/docs").status_code == 200


HONOURED = {"userConfig": {"k": [1, "v"]}, "secrets": {"TOKEN": "ENV_TOKEN"}, "processingGuarantees": "ATLEAST_ONCE",
            "timeoutMs": 2500, "maxMessageRetries": 3, "deadLetterTopic": "dead.jsonl", "className": "f.process",
            "keyField": "user", "output": "out.jsonl", "parallelism": 4,
            "logTopic": "persistent://public/default/log", "customSerdeInputs": {"in2": "serde.PickleSerDe"},
            "inputSpecs": {"in3": {"serdeClassName": "serde.PickleSerDe"}}, "outputSerdeClassName": "serde.PickleSerDe",
            "triggerIntervalMs": 250}


def test_honoured_config_is_stored_and_returned_as_sent(client):
    r = create_function(client, "acme", "cfg", "full", **HONOURED)
    assert r.status_code == 200, r.text
    got = client.get("/admin/v3/functions/acme/cfg/full").json()
    assert {k: got[k] for k in HONOURED} == HONOURED
    # an update changes only what it names, and GET returns the merge
    r = client.put("/admin/v3/functions/acme/cfg/full", files={
        "functionConfig": (None, json.dumps({"processingGuarantees": "EFFECTIVELY_ONCE", "timeoutMs": 10}))})
    assert r.status_code == 200, r.text
    got = client.get("/admin/v3/functions/acme/cfg/full").json()
    assert got["processingGuarantees"] == "EFFECTIVELY_ONCE" and got["timeoutMs"] == 10
    assert got["secrets"] == HONOURED["secrets"] and got["maxMessageRetries"] == 3


@pytest.mark.parametrize("field, value", [
    ("topicsPattern", "in-.*"), ("subName", "sub"), ("subscriptionPosition", "Latest"), ("producerConfig", {}),
    ("customSerdeInputs", {"a": "NoModule"}), ("customSchemaInputs", {"a": "b"}),
    ("inputSpecs", {"a": {"receiverQueueSize": 5}}), ("outputSerdeClassName", "NoModule"), ("outputSchemaType", "avro"),
    ("forwardSourceMessageProperty", False), ("batchBuilder", "KEY_BASED"), ("maxPendingAsyncRequests", 10),
    ("jar", "f.jar"), ("go", "f"), ("packageUrl", "function://a/b/c"), ("runtimeFlags", "-x"),
    ("resources", {"cpu": 1}), ("windowConfig", {"windowLengthCount": 10, "windowLengthDurationMs": 5}),
    ("windowConfig", {"maxLagMs": -1}), ("stateTtlSeconds", 0), ("logLevel", "DEBUG"),
    ("triggerIntervalMs", -1), ("triggerIntervalMs", "1s"), ("triggerIntervalMs", 1.5),
    ("autoAck", False), ("retainOrdering", True), ("retainKeyOrdering", True), ("skipToLatest", True),
    ("exposePulsarAdminClientEnabled", True), ("cleanupSubscription", False),
    ("processingGuarantees", "MANUAL"), ("timeoutMs", 0), ("maxMessageRetries", -1), ("secrets", ["a"]),
    ("fqfn", "acme/other/f"), ("noSuchField", 1),
])
def test_config_fields_statekeep_does_not_honour_are_refused_by_name(client, field, value):
    r = create_function(client, "acme", "refused", "f", **{field: value})
    assert r.status_code == 400 and field in r.json()["reason"], r.text
    assert client.get("/admin/v3/functions/acme/refused").json() == []
    # the same on an update: 400, and the stored config is unchanged
    assert create_function(client, "acme", "refused", "g").status_code == 200
    before = client.get("/admin/v3/functions/acme/refused/g").json()
    r = client.put("/admin/v3/functions/acme/refused/g", files={
        "functionConfig": (None, json.dumps({field: value, "parallelism": 7}))})
    assert r.status_code == 400 and field in r.json()["reason"], r.text
    assert client.get("/admin/v3/functions/acme/refused/g").json() == before
    assert client.delete("/admin/v3/functions/acme/refused/g").status_code == 204


def test_url_and_unknown_parts_are_refused_by_name(client):
    config = json.dumps({"inputs": ["in.jsonl"]})
    r = client.post("/admin/v3/functions/acme/url/f", files={
        "functionConfig": (None, config), "url": (None, "http://example.invalid/f.py")})
    assert r.status_code == 400 and "url" in r.json()["reason"]
    assert create_function(client, "acme", "url", "g").status_code == 200
    before = client.get("/admin/v3/functions/acme/url/g").json()
    for part in ("url", "updateOptions"):
        r = client.put("/admin/v3/functions/acme/url/g", files={
            "functionConfig": (None, json.dumps({"parallelism": 9})), part: (None, "x")})
        assert r.status_code == 400 and part in r.json()["reason"], r.text
    assert client.get("/admin/v3/functions/acme/url").json() == ["g"]
    assert client.get("/admin/v3/functions/acme/url/g").json() == before


def test_reads_on_the_event_loop_follow_the_backends_declared_capability(store_url):
    """The server asks the store's capabilities, not its URL scheme: stores that declare
    nonblocking_reads (memory, local) are read on the event loop, network stores in the thread pool."""
    from statekeep.server import create_app

    app = create_app({"metadata_url": store_url})
    try:
        ctx = app.state.ctx
        assert ("nonblocking_reads" in ctx.store.capabilities) == (ctx.store.scheme in ("memory", "local"))
        assert ctx.inline_reads == (ctx.store.scheme in ("memory", "local"))
    finally:
        app.state.service.close()
    custom = create_app({"metadata_url": "memory://", "allow_custom_state_providers": True})
    try:  # a function may name any provider then: none is assumed not to block
        assert custom.state.ctx.inline_reads is False
    finally:
        custom.state.service.close()


def test_an_oversized_value_is_413_as_json_or_multipart(client, fn):
    big = "x" * (2 << 20)  # above every provider's value limit and Starlette's 1 MiB default part size
    assert client.post(fn + "/state/big", json={"stringValue": big}).status_code == 413
    r = client.post(fn + "/state/big", files=state_multipart({"stringValue": big}))
    assert r.status_code == 413, r.text
    r = client.post(fn + "/state/big", files={"state": ("state.json", b"x" * (9 << 20), "application/json")})
    assert r.status_code == 413, r.text
    assert client.get(fn + "/state/big").status_code == 404


def test_405_carries_allow_with_every_method_of_the_resource(client, fn):
    r = client.patch(fn + "/state/k", json={"stringValue": "x"})
    assert r.status_code == 405 and "reason" in r.json()
    assert set(r.headers["allow"].split(", ")) >= {"GET", "POST", "DELETE"}
    assert "PATCH" not in r.headers["allow"]
    r = client.patch(fn)
    assert r.status_code == 405 and set(r.headers["allow"].split(", ")) >= {"GET", "POST", "PUT", "DELETE"}
    assert client.get(fn + "/state/k").status_code == 404  # nothing was written


def test_openapi_tells_the_truth(client):
    spec = client.get("/openapi.json").json()
    fn = spec["paths"]["/admin/v3/functions/{tenant}/{namespace}/{name}"]
    key = spec["paths"]["/admin/v3/functions/{tenant}/{namespace}/{name}/state/{key}"]
    # names and keys: the patterns and limits the server enforces
    params = {p["name"]: p for p in key["post"]["parameters"]}
    assert params["tenant"]["schema"]["pattern"] == "^(?!\\.\\.?$)[A-Za-z0-9_.-]{1,64}$"
    assert params["key"]["schema"]["maxLength"] == 240
    assert params["if-match"]["schema"]["type"] == "string" and "pattern" in params["if-match"]["schema"]
    # the exactly-one-value rule and the FunctionConfig fields are in the body schemas
    body = key["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert [sorted(b["required"]) for b in body["oneOf"]] == [["stringValue"], ["byteValue"], ["numberValue"]]
    config = fn["post"]["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]["functionConfig"]
    assert config["additionalProperties"] is False and "processingGuarantees" in config["properties"]
    assert "required" not in fn["put"]["requestBody"]["content"]["multipart/form-data"]["schema"][
        "properties"]["functionConfig"]  # an update names only what changes
    # only statuses that are sent: no 422, and no 401/403 on a server without tokens
    assert set(key["get"]["responses"]) == {"200", "404"}  # a name or key that cannot exist is not found
    assert set(key["post"]["responses"]) == {"200", "400", "404", "409", "413"}
    assert set(fn["post"]["responses"]) == {"200", "400", "409", "413"}
    assert "securitySchemes" not in spec.get("components", {})
    for item in spec["paths"].values():
        for operation in item.values():
            assert "422" not in operation["responses"] and "401" not in operation["responses"]
    for a_name in ("ok", "a.b-c_1", "..."):
        assert client.get(f"/admin/v3/functions/{a_name}/ns").status_code == 200
    for bad in (".", "..", "x" * 65, "a b"):
        assert client.get(f"/admin/v3/functions/{bad}/ns").status_code in (400, 404)
