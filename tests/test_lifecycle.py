"""Lifecycle and observability endpoints in Pulsar's paths and JSON shapes, on real server processes:
status, stats (whole and per instance), start/stop/restart (persisted: a stopped function stays
stopped across a server restart), trigger (data or dataStream, through the function's real state)."""

from __future__ import annotations

import itertools
import json

import httpx
import pytest
from conftest import need

from support.server_process import create_function
from statekeep.testing import wait_for

need("fastapi")

_names = itertools.count()
INSTANCE_STATUS = {"running", "error", "numRestarts", "numReceived", "numSuccessfullyProcessed",
                   "numUserExceptions", "latestUserExceptions", "numSystemExceptions", "latestSystemExceptions",
                   "averageLatency", "lastInvocationTime", "workerId"}
STATS = {"receivedTotal", "processedSuccessfullyTotal", "systemExceptionsTotal", "userExceptionsTotal",
         "avgProcessLatency", "1min", "lastInvocation"}
COUNTER = b'''
from pulsar import Function

class Counter(Function):
    def process(self, input, context):
        n = context.incr_counter(input["word"], 1)
        context.record_metric("seen", 1)
        return {"word": input["word"], "n": n}
'''


@pytest.fixture(scope="module")
def server(server_process, tmp_path_factory):
    srv = server_process(tmp_path_factory.mktemp("lifecycle") / "data", tokens={"root": {"superuser": True}})
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=30, headers={"Authorization": "Bearer root"}) as c:
        yield c


@pytest.fixture
def fn(client):
    name = f"f{next(_names)}"
    r = create_function(client, "acme", "ops", name, COUNTER, className="counter.Counter", keyField="word",
                        parallelism=3)
    assert r.status_code == 200, r.text
    return f"/admin/v3/functions/acme/ops/{name}"


def test_status_and_stats_in_pulsars_shapes(client, fn):
    status = client.get(fn + "/status").json()
    assert status["numInstances"] == 3 and status["numRunning"] == 0
    assert [i["instanceId"] for i in status["instances"]] == [0, 1, 2]
    assert all(set(i["status"]) == INSTANCE_STATUS for i in status["instances"])
    assert status["instances"][0]["status"]["running"] is False and status["instances"][0]["status"]["workerId"] == ""
    stats = client.get(fn + "/stats").json()
    assert set(stats) == STATS | {"instances"} and set(stats["1min"]) == STATS - {"1min", "lastInvocation"}
    assert stats["receivedTotal"] == 0 and stats["lastInvocation"] is None
    assert [i["instanceId"] for i in stats["instances"]] == [0, 1, 2]
    assert set(stats["instances"][2]["metrics"]) >= STATS | {"userMetrics"}
    assert set(client.get(fn + "/2/status").json()) == INSTANCE_STATUS
    assert client.get(fn + "/1/stats").json()["userMetrics"] == {}


@pytest.mark.parametrize("path, status", [("/3/status", 404), ("/3/stats", 404), ("/x/status", 400),
                                          ("/-1/stats", 400), ("/99999999/status", 400)])
def test_bad_instance_ids(client, fn, path, status):
    r = client.get(fn + path)
    assert r.status_code == status and "instance" in r.json()["reason"]


def test_unknown_function_and_no_token(client, server):
    for method, path in [("GET", "status"), ("GET", "stats"), ("GET", "0/status"), ("POST", "stop"),
                         ("POST", "start"), ("POST", "restart"), ("POST", "0/restart")]:
        r = client.request(method, f"/admin/v3/functions/acme/ops/absent/{path}")
        assert r.status_code == 404 and "does not exist" in r.json()["reason"], (path, r.text)
        assert httpx.request(method, f"{server.url}/admin/v3/functions/acme/ops/absent/{path}").status_code == 401


def test_stop_start_restart_answer_204(client, fn):
    for action in ("stop", "stop", "start", "start", "restart", "1/restart"):
        r = client.post(f"{fn}/{action}")
        assert r.status_code == 204 and r.content == b"", (action, r.text)
    assert client.get(fn + "/status").json()["instances"][1]["status"]["numRestarts"] == 2
    for action in ("0/stop", "2/start"):
        r = client.post(f"{fn}/{action}")
        assert r.status_code == 400 and "partitions of one Spark query" in r.json()["reason"]
    assert client.post(f"{fn}/3/restart").status_code == 404


def test_trigger_with_data_or_data_stream_through_the_real_state(client, fn):
    r = client.post(fn + "/trigger", files={"data": (None, '{"word": "hi"}')})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert r.json() == {"word": "hi", "n": 1}
    r = client.post(fn + "/trigger", files={"dataStream": ("in.json", b'{"word": "hi"}\n'),
                                            "topic": (None, "in.jsonl")})
    assert r.status_code == 200 and r.json() == {"word": "hi", "n": 2}
    assert client.get(fn + "/state/hi").json()["numberValue"] == 2


@pytest.mark.parametrize("files, reason", [
    ({}, "exactly one of"),
    ({"data": (None, "{}"), "dataStream": ("f", b"{}")}, "exactly one of"),
    ({"data": (None, '{"word": "a"}'), "topic": (None, "other")}, "must be one of the function's inputs"),
    ({"data": (None, "{oops")}, "not a JSON value"),
    ({"data": (None, '{"nope": 1}')}, "raised on the trigger data: KeyError"),
])
def test_trigger_refuses_bad_requests_and_writes_nothing(client, fn, files, reason):
    r = client.post(fn + "/trigger", files=files or {"other": (None, "x")})
    assert r.status_code == 400 and reason in r.json()["reason"], r.text
    assert client.get(fn + "/state").json()["items"] == []


def test_trigger_of_a_native_text_function(client):
    r = create_function(client, "acme", "ops", "rev", b"def process(input):\n    return input[::-1]\n",
                        inputFormat="text")
    assert r.status_code == 200, r.text
    assert client.post("/admin/v3/functions/acme/ops/rev/trigger", files={"data": (None, "abc")}).text == "cba"
    assert client.post("/admin/v3/functions/acme/ops/rev/trigger",
                       headers={"content-type": "application/json"}, content=b"{}").status_code == 400


def write_words(path, words) -> None:
    temp = path.parent / f".{path.name}.tmp"
    temp.write_text("".join(json.dumps({"word": w}) + "\n" for w in words))
    temp.rename(path)


def test_stopped_stays_stopped_across_a_server_restart_then_start_and_restart(server_process, tmp_path):
    """With Spark workers. A probe function created after the restart proves the worker has made its
    passes (it runs the probe) while the stopped function stays stopped."""
    inputs, probe_in = tmp_path / "in", tmp_path / "probe"
    inputs.mkdir()
    probe_in.mkdir()
    write_words(inputs / "1.jsonl", ["a", "b", "a"])
    fn = "/admin/v3/functions/public/default/wc"
    server = server_process(tmp_path / "data", worker=True)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            def status():
                return client.get(fn + "/status").json()

            def processed():
                return sum(i["status"]["numSuccessfullyProcessed"] for i in status()["instances"])

            r = create_function(client, "public", "default", "wc", COUNTER, className="counter.Counter",
                                inputs=[str(inputs)], keyField="word", parallelism=2)
            assert r.status_code == 200, r.text
            assert wait_for(lambda: processed() == 3 and status()["numRunning"] == 2, timeout=240), server.log.name
            stats = client.get(fn + "/stats").json()
            assert stats["receivedTotal"] == 3 and stats["1min"]["receivedTotal"] in (0, 3)
            assert sum(i["metrics"]["userMetricsDetail"]["seen"]["count"] for i in stats["instances"]
                       if i["metrics"]["userMetrics"]) == 3
            metrics = client.get("/metrics").text
            assert 'statekeep_function_user_metric_count{function="public/default/wc",metric="seen"} 3' in metrics
            assert client.post(fn + "/stop").status_code == 204
            assert wait_for(lambda: status()["numRunning"] == 0, timeout=60)
        server.stop()

        server = server_process(tmp_path / "data", worker=True)
        write_words(inputs / "2.jsonl", ["c"])
        write_words(probe_in / "1.jsonl", ["p"])
        with httpx.Client(base_url=server.url, timeout=30) as client:
            r = create_function(client, "public", "default", "probe", COUNTER, className="counter.Counter",
                                inputs=[str(probe_in)], keyField="word")
            assert r.status_code == 200, r.text
            assert wait_for(lambda: client.get("/admin/v3/functions/public/default/probe/state/p").status_code == 200,
                            timeout=240), server.log.name
            assert status()["numRunning"] == 0 and client.get(fn + "/state/c").status_code == 404  # still stopped
            assert client.post(fn + "/start").status_code == 204
            assert wait_for(lambda: client.get(fn + "/state/c").status_code == 200, timeout=240), server.log.name
            assert wait_for(lambda: status()["numRunning"] == 2, timeout=60)
            assert client.post(fn + "/restart").status_code == 204
            assert wait_for(lambda: status()["instances"][0]["status"]["numRestarts"] == 1
                            and status()["numRunning"] == 2, timeout=120)
            write_words(inputs / "3.jsonl", ["a"])  # the restarted query resumes from its checkpoint
            assert wait_for(lambda: client.get(fn + "/state/a").json().get("numberValue") == 3, timeout=120)
            assert client.get(fn + "/state/b").json()["numberValue"] == 1  # nothing read twice
    finally:
        server.stop()
