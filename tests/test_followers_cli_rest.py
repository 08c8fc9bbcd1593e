"""Snapshots and followers through the CLI, and read-only followers over REST against a leader that is a
real ``statekeep standalone`` process."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from conftest import need

from support.server_process import create_function
from support.cli import run
from statekeep.cli.standalone import follower_specs

CODE = "def process(input, context):\n    return input\n"


def test_snapshot_restore_compact_and_follow_from_the_cli(capsys, tmp_path):
    data = str(tmp_path / "data")
    py = tmp_path / "f.py"
    py.write_text(CODE)
    fn = ["--tenant", "t", "--namespace", "n", "--name", "f", "--data-dir", data]
    assert run(capsys, "functions", "create", *fn, "--py", str(py), "--inputs", "x")[0] == 0
    for i in range(5):
        state = json.dumps({"numberValue": i})
        assert run(capsys, "functions", "putstate", *fn, "--key", "k", "--state", state)[0] == 0
    assert run(capsys, "functions", "putstate", *fn, "--key", "s", "--state", '{"stringValue": "one"}')[0] == 0
    code, out, _ = run(capsys, "functions", "snapshot", *fn)
    snap = json.loads(out)
    assert code == 0 and snap["snapshot"] == 1 and snap["blob"].startswith(f"file://{data}/blobs/")
    run(capsys, "functions", "putstate", *fn, "--key", "s", "--state", '{"stringValue": "two"}')
    run(capsys, "functions", "putstate", *fn, "--key", "extra", "--state", '{"stringValue": "x"}')
    code, out, _ = run(capsys, "functions", "snapshots", *fn, "--json")
    assert code == 0 and [s["snapshot"] for s in json.loads(out)] == [1] and json.loads(out)[0]["current"]
    code, out, _ = run(capsys, "functions", "snapshots", *fn)
    assert code == 0 and "offset" in out

    leader = ["--tenant", "t", "--namespace", "n", "--name", "f", "--leader-store", f"local://{data}",
              "--local-dir", str(tmp_path / "fol")]
    code, out, _ = run(capsys, "followers", "get", *leader, "--key", "s")
    assert code == 0 and json.loads(out)["stringValue"] == "two"

    code, out, _ = run(capsys, "functions", "restore", *fn)
    assert code == 0 and json.loads(out) == {"restored": 1, "offset": snap["offset"], "changedKeys": 2}
    assert json.loads(run(capsys, "functions", "querystate", *fn, "--key", "s")[1])["stringValue"] == "one"
    assert run(capsys, "functions", "querystate", *fn, "--key", "extra")[0] == 1
    code, out, _ = run(capsys, "followers", "get", *leader, "--key", "s")  # the follower saw the restore
    assert code == 0 and json.loads(out)["stringValue"] == "one"
    assert run(capsys, "followers", "get", *leader, "--key", "extra")[0] == 1

    code, out, _ = run(capsys, "functions", "compact", *fn, "--tombstone-retention", "0")
    result = json.loads(out)
    assert code == 0 and result["recordsAfter"] < result["recordsBefore"]
    code, out, _ = run(capsys, "followers", "status", "--local-dir", str(tmp_path / "fol"),
                       "--leader-store", f"local://{data}", "--json")
    (row,) = json.loads(out)
    assert code == 0 and (row["name"], row["lag"]) == ("f", 0)
    assert run(capsys, "functions", "restore", *fn, "--snapshot", "9")[0] == 1
    assert run(capsys, "functions", "snapshot", *fn[:-2], "--url", "http://127.0.0.1:1")[0] == 2


def test_standalone_follow_option():
    (spec,) = follower_specs(["a/b/c@zk://h:2181/x"], "/data")
    assert spec == {"tenant": "a", "namespace": "b", "name": "c", "leader": "zk://h:2181/x",
                    "local_dir": "/data/followers/a.b.c"}
    assert follower_specs(["a/b/c"], "/data")[0]["leader"] == "local:///data"
    with pytest.raises(Exception, match="TENANT/NAMESPACE/NAME"):
        follower_specs(["a/b"], "/data")


def test_follower_over_rest_is_read_only_and_reports_lag(server_process, tmp_path):
    need("fastapi")
    from fastapi.testclient import TestClient

    from statekeep.server import ServerConfig, create_app

    leader = server_process(tmp_path / "leader")
    try:
        with httpx.Client(base_url=leader.url, timeout=30) as client:
            assert create_function(client, "acme", "prod", "f").status_code == 200
            base = "/admin/v3/functions/acme/prod/f/state"
            for key, body in (("a", {"stringValue": "x"}), ("n", {"numberValue": 7})):
                assert client.post(f"{base}/{key}", json=body).status_code == 200
            spec = {"tenant": "acme", "namespace": "prod", "name": "f", "leader": f"local://{tmp_path / 'leader'}",
                    "local_dir": str(tmp_path / "follower")}
            app = create_app(ServerConfig(metadata_url="memory://", followers=[spec]))
            with TestClient(app) as follower:
                fol = "/admin/v3/followers/acme/prod/f/state"
                deadline = time.monotonic() + 30
                while follower.get(f"{fol}/n").status_code != 200 and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert follower.get(f"{fol}/n").json() == {"key": "n", "numberValue": 7, "version": 0}
                assert [i["key"] for i in follower.get(fol).json()["items"]] == ["a", "n"]
                assert follower.get(f"{fol}/missing").status_code == 404
                assert follower.get("/admin/v3/followers/acme/prod/other/state/a").status_code == 404
                for method in ("POST", "PUT", "DELETE", "PATCH"):
                    r = follower.request(method, f"{fol}/a", json={"stringValue": "y"})
                    assert r.status_code == 405 and "read-only" in r.json()["reason"] and r.headers["allow"] == "GET"
                assert follower.post(fol, json={}).status_code == 405
                assert client.get(f"{base}/a").json()["stringValue"] == "x"  # nothing written on the leader
                (status,) = follower.get("/admin/v3/followers").json()
                assert status["name"] == "f" and status["lag"] == 0
                assert 'statekeep_follower_lag_records{function="acme/prod/f"} 0' in follower.get("/metrics").text
                assert client.post(f"{base}/a", json={"stringValue": "z"}).status_code == 200
                deadline = time.monotonic() + 30
                while follower.get(f"{fol}/a").json().get("stringValue") != "z" and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert follower.get(f"{fol}/a").json() == {"key": "a", "stringValue": "z", "version": 1}
    finally:
        leader.stop()
