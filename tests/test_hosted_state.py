"""Hosted state (statekeep.server.hosted): the REST surface statekeep's PIP-312 provider for Pulsar's functions worker
(java/pulsar-state-provider) uses, in process. The provider on a real Pulsar worker: tests/test_pulsar.py."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from statekeep.metadata import open_store
from statekeep.server import create_app
from statekeep.state import open_provider
from support.server_process import create_function

FN = "/admin/v3/functions/public/default"
HOSTED = "/admin/v3/hosted-state/public/default"


@pytest.fixture
def served():
    url = f"memory://{uuid.uuid4().hex}"
    store = open_store(url)  # the same in-process store the app opens: its raw entries
    with TestClient(create_app({"metadata_url": url})) as client:
        yield client, open_provider("metadata", {"store": store})
    store.close()


def test_a_hosted_function_has_state_on_the_function_routes_and_counters_in_pulsars_form(served):
    client, provider = served
    assert client.get(FN + "/pf/state/c").status_code == 404  # not registered: no such function
    assert client.put(HOSTED + "/pf").status_code == 201
    assert client.put(HOSTED + "/pf").status_code == 200  # idempotent: the worker's every getStateStore sends it
    assert client.get(HOSTED).json() == ["pf"]

    assert client.post(FN + "/pf/counter/c", json={"amount": 5}).json() == {"key": "c", "numberValue": 5}
    assert client.post(FN + "/pf/counter/c", json={"amount": -7}).json() == {"key": "c", "numberValue": -2}
    assert client.post(FN + "/pf/counter/c", content=b"").json()["numberValue"] == -1  # no body: 1
    entry = provider.get_state_store("public", "default", "pf").get_entry("c")
    assert (entry.kind, entry.value) == ("counter", (-1).to_bytes(8, "big", signed=True))  # 64-bit big-endian
    assert client.get(FN + "/pf/state/c").json() == {"key": "c", "numberValue": -1, "version": 2}

    # Pulsar's REST writes a numberValue as put(key, 8 bytes big-endian): those bytes count on
    client.post(FN + "/pf/state/n", json={"key": "n", "byteValue": "AAAAAAAAACk="})  # 41
    assert client.post(FN + "/pf/counter/n", json={"amount": 1}).json()["numberValue"] == 42
    assert client.get(FN + "/pf/state/n").json()["numberValue"] == 42
    client.post(FN + "/pf/state/s", json={"key": "s", "stringValue": "abc"})
    assert client.get(FN + "/pf/state").json()["items"][-1] == {"key": "s", "stringValue": "abc", "version": 0}

    assert client.delete(HOSTED + "/pf").status_code == 204  # PIP-312's cleanUp: the state, then the name
    assert client.get(HOSTED).json() == []
    assert client.get(FN + "/pf/state/c").status_code == 404
    assert list(provider.get_state_store("public", "default", "pf").scan()) == []
    assert client.delete(HOSTED + "/pf").status_code == 404


def test_bad_increments_and_names_are_refused_and_change_nothing(served):
    client, _ = served
    client.put(HOSTED + "/pf")
    client.post(FN + "/pf/state/s", json={"key": "s", "stringValue": "abc"})
    client.post(FN + "/pf/counter/c", json={"amount": 1})
    for body, reason in [({"amount": "x"}, "amount: Input should be a valid integer"),
                         ({"amount": 2**63}, "amount: Input should be less than or equal to"),
                         ({"amount": 1, "by": 2}, "by: Extra inputs are not permitted")]:
        answer = client.post(FN + "/pf/counter/c", json=body)
        assert (answer.status_code, answer.json()["reason"][:len(reason)]) == (400, reason)
    answer = client.post(FN + "/pf/counter/s", json={"amount": 1})
    assert (answer.status_code, answer.json()) == (400, {"reason": "state key 's' holds 3 bytes, not a counter "
                                                                   "(8 bytes big-endian)"})
    client.post(FN + "/pf/counter/big", json={"amount": 2**63 - 1})
    assert client.post(FN + "/pf/counter/big", json={"amount": 1}).status_code == 400  # past 64 bits
    assert client.get(FN + "/pf/state/big").json()["numberValue"] == 2**63 - 1
    assert client.get(FN + "/pf/state/c").json() == {"key": "c", "numberValue": 1, "version": 0}
    assert client.get(FN + "/pf/state/s").json()["stringValue"] == "abc"
    assert client.post(FN + "/nobody/counter/c", json={"amount": 1}).status_code == 404
    assert client.put(HOSTED + "/bad name!").status_code == 400

    # a statekeep function's name cannot be hosted too (they would share one state); its counters stay strict
    assert create_function(client, "public", "default", "skfn").status_code == 200
    assert client.put(HOSTED + "/skfn").status_code == 409
    assert client.get(HOSTED).json() == ["pf"]
    client.post(FN + "/skfn/state/eight", json={"key": "eight", "byteValue": "AAAAAAAAACk="})
    assert client.post(FN + "/skfn/counter/eight", json={"amount": 1}).status_code == 400
    assert client.post(FN + "/skfn/counter/k", json={"amount": 3}).json() == {"key": "k", "numberValue": 3}


def test_the_console_lists_a_hosted_function_and_reads_its_state_and_changelog(served):
    client, _ = served
    client.put(HOSTED + "/pf")
    client.post(FN + "/pf/counter/c", json={"amount": 4})
    listed = client.get("/ui/api/functions").json()
    assert [(f["name"], f.get("hosted"), f["lifecycle"]) for f in listed] == [("pf", True, False)]
    assert listed[0]["functionStatus"]["numRunning"] == 0
    records = client.get("/ui/api/functions/public/default/pf/changelog").json()["records"]
    assert [(r["key"], r["numberValue"]) for r in records] == [("c", 4)]
    assert client.get(FN + "/pf/state").json()["items"] == [{"key": "c", "numberValue": 4, "version": 0}]
    client.delete(HOSTED + "/pf")
    assert client.get("/ui/api/functions").json() == []
    assert client.get("/ui/api/functions/public/default/pf/changelog").status_code == 404
