"""Typed state variables as every reader of a function's state shows them, decoded to JSON (fast tier): the
changelog (the console's tail; its live stream: tests/test_console.py), the console's state page API, followers
(Python, REST, CLI; of partition-owned state too), migrate, and the data source's ``variable`` option with a
prefix. The state is written through a Context as a function's records write it; an entry whose TTL ran out
shows nowhere."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from support.cli import run
from support.typed_state import ANN, FN, commit, write_state
from statekeep.changelog import FollowerStore
from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.sources import StatekeepStateSource
from statekeep.migrate import migrate
from statekeep.migrate.verify import shown_key
from statekeep.server import create_app
from statekeep.server.ui.api import record_json
from statekeep.state import typed
from statekeep.state.partitioned import state_storage
from statekeep.state.keygroups import group_range, key_group, owner
from statekeep.state.timestate import recent_records, visible_records

@pytest.fixture
def leader(tmp_path):
    """The leader's store URL, holding the function and its state (:func:`write_state`)."""
    url = f"local://{tmp_path}/leader"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": FN[0], "namespace": FN[1], "name": FN[2], "inputs": ["x"]},
                                b"def process(input, context):\n    pass\n")
        write_state(service)
    return url


def read_back(url: str, key: str) -> dict:
    with FunctionService.open(url) as service:
        return typed.key_variables(service.registry.state_store(*FN), key)


def test_one_decoder_for_every_reader_and_expired_entries_left_out(leader, capsys):
    with FunctionService.open(leader) as service:
        store = service.registry.state_store(*FN)
        assert typed.key_variables(store, "ann") == ANN
        assert typed.key_variables(store, "bob") == {"count": 1}
        assert typed.key_variables(store, "an") == {}  # "ann"'s entries are not a shorter key's
        assert typed.key_variables(store, "ann", now_ms=0)["old"] == [7]  # before its expiry it is there
        assert [(k, v) for k, v, _ in typed.read_variables(store, prefix="b")] == [("bob", "count")]
    # the data source's variable option with a prefix: the keys starting with it (it found none before)
    options = {"function": "/".join(FN), "store": leader, "variable": "count", "prefix": "b"}
    assert list(StatekeepStateSource(options).reader(None).read(None)) == [("bob", "1")]
    # the CLI, on the store (over a server it prints the REST answer)
    where = ["--fqfn", "/".join(FN), "--store", leader]
    code, out, _ = run(capsys, "functions", "variables", *where, "--key", "ann")
    assert code == 0 and json.loads(out) == {"key": "ann", "variables": ANN}
    assert run(capsys, "functions", "variables", *where, "--key", "plain")[0] == 1  # bytes, no variables


def test_the_changelog_shows_typed_entries_decoded_and_the_console_lists_variables(leader):
    with FunctionService.open(leader) as service:
        store = service.registry.state_store(*FN)
        assert [r.key for r in visible_records(store)] == ["plain"]  # unchanged without asking for variables
        shown = [record_json(r) for _, r in recent_records(store, 100, variables=True)]
    parts = ("key", "variable", "element", "mapKey", "value", "stringValue")
    assert [{k: v for k, v in r.items() if k in parts} for r in shown if r is not None] == [
        {"key": "ann", "variable": "best", "mapKey": "1", "value": 10},
        {"key": "ann", "variable": "best", "mapKey": "2", "value": 5},
        {"key": "ann", "variable": "bids", "element": 0, "value": {"auction": 1, "price": 10}},
        {"key": "ann", "variable": "bids", "element": 1, "value": {"auction": 2, "price": 5}},
        {"key": "ann", "variable": "count", "value": 2},
        {"key": "bob", "variable": "count", "value": 1},
        {"key": "plain", "stringValue": "bytes"},
    ]  # a list's bounds and the expired entries are not shown
    app = create_app({"metadata_url": leader})
    try:
        with TestClient(app) as client:
            ui = "/ui/api/functions/public/default/typed"
            tail = client.get(ui + "/changelog").json()["records"]
            assert [(r["key"], r.get("variable")) for r in tail] == [("ann", "best")] * 2 + [("ann", "bids")] * 2 + [
                ("ann", "count"), ("bob", "count"), ("plain", None)]
            assert client.get(ui + "/variables").json() == {"more": False, "items": [
                {"key": "ann", "variable": name, "value": ANN[name]} for name in ("best", "bids", "count")] + [
                {"key": "bob", "variable": "count", "value": 1}]}
            assert client.get(ui + "/variables?prefix=b").json()["items"] == [
                {"key": "bob", "variable": "count", "value": 1}]
            assert client.get(ui + "/variables?limit=2").json()["more"] is True
            assert client.get(ui + "/variables?limit=0").status_code in (400, 422)
    finally:
        app.state.service.close()


def test_a_follower_reads_a_keys_variables_in_python_over_rest_and_from_the_cli(leader, tmp_path, capsys):
    with FollowerStore.open(leader, *FN) as follower:
        assert follower.wait_until_caught_up(30)
        assert typed.key_variables(follower, "ann") == ANN
        assert typed.key_variables(follower, "bob") == {"count": 1}  # "gone" expired
    spec = {"tenant": FN[0], "namespace": FN[1], "name": FN[2], "leader": leader}
    app = create_app({"metadata_url": f"local://{tmp_path}/server", "followers": [spec]})
    try:
        with TestClient(app) as client:
            base = "/admin/v3/followers/public/default/typed/variables/"
            follower = app.state.ctx.followers.get(*FN)
            assert follower.wait_until_caught_up(30)
            assert client.get(base + "ann").json() == {"key": "ann", "variables": ANN}
            assert client.get(base + "nobody").status_code == 404
            assert client.get(base + "%00x").status_code == 400
            assert client.put(base + "ann", json={}).status_code == 405
    finally:
        app.state.service.close()
    where = ["--tenant", FN[0], "--namespace", FN[1], "--name", FN[2], "--leader-store", leader]
    code, out, _ = run(capsys, "followers", "get", *where, "--key", "ann")
    assert code == 0 and json.loads(out) == {"key": "ann", "variables": ANN}  # a key with variables only
    code, out, _ = run(capsys, "followers", "get", *where, "--key", "plain")
    assert code == 0 and json.loads(out)["stringValue"] == "bytes" and "variables" not in json.loads(out)
    assert run(capsys, "followers", "get", *where, "--key", "nobody")[0] == 1


@pytest.mark.parametrize("target", ["local", "memory"])
def test_migrate_carries_typed_entries_raw_so_the_target_reads_the_same_variables(leader, tmp_path, target):
    url = f"local://{tmp_path}/target" if target == "local" else f"memory://typed-readers-{tmp_path.name}"
    report = migrate(leader, url, progress=False)
    assert report.ok
    (function,) = report.functions
    # all but "plain", raw: expired ones too, and the TTL index entries of the two key groups their TTLs are in
    assert function["variables"] == 10 and function["entries"] == 13
    assert "13 state keys (10 of typed state variables)" in report.text()
    assert read_back(url, "ann") == ANN and read_back(url, "bob") == {"count": 1}
    assert shown_key(typed.element_key(typed.variable_prefix("ann", "bids"), 1)) == "ann (variable bids[1])"
    assert shown_key(typed.variable_prefix("ann", "bids") + "#") == repr(typed.variable_prefix("ann", "bids") + "#")


def test_a_follower_of_partition_owned_state_reads_variables_too(tmp_path, monkeypatch):
    """Each partition's task writes its own keys' variables; the follower applies the partitions' segments."""
    monkeypatch.setenv("STATEKEEP_STATE_CACHE", str(tmp_path / "cache"))
    url = f"local://{tmp_path}/leader"
    with FunctionService.open(url, default_storage=state_storage(str(tmp_path / "shared"))) as service:
        service.registry.create({"tenant": FN[0], "namespace": FN[1], "name": FN[2], "inputs": ["x"]},
                                b"def process(input, context):\n    pass\n")
        state = service.registry.state_store(*FN)
        for p in range(2):
            mine = [k for k in ("ann", "bob", "cy") if owner(key_group(k, 128), 2, 128) == p]
            commit(state.task(0, p, 2), lambda c, mine=mine: [
                c.map_state("best", int, int).of(k).put_all({1: 10, 2: 5}) for k in mine], group_range(p, 2, 128))
        with FollowerStore.open(url, *FN, local_dir=str(tmp_path / "follower")) as follower:
            assert follower.wait_until_caught_up(30)
            assert {k: typed.key_variables(follower, k) for k in ("ann", "bob", "cy")} == dict.fromkeys(
                ("ann", "bob", "cy"), {"best": ANN["best"]})
