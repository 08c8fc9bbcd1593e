"""``statekeep functions status|stats|start|stop|restart|trigger`` against a real ``statekeep standalone``:
each prints what Pulsar's REST path answers (the same JSON a REST client gets), per function and per
instance, and the lifecycle calls say what pulsar-admin says."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from support.server_process import FUNCTION
from support.cli import run, no_client_settings  # noqa: F401 - a fixture, used below
from statekeep.cli import main

pytestmark = pytest.mark.usefixtures("no_client_settings")  # no client settings of this machine

FN = "/admin/v3/functions/public/default/wc"


@pytest.fixture
def server(server_process, tmp_path):
    server = server_process(tmp_path / "data")
    py = tmp_path / "wc.py"
    py.write_bytes(FUNCTION)
    assert main(["functions", "create", "--name", "wc", "--py", str(py), "-i", "in", "--input-format", "text",
                 "--url", server.url]) == 0
    yield server
    server.stop()


def test_status_and_stats_print_the_rest_answers(server, capsys):
    url = ["--url", server.url]
    for command in ("status", "stats"):
        code, out, err = run(capsys, "functions", command, "--name", "wc", *url)
        assert code == 0, err
        assert json.loads(out) == httpx.get(f"{server.url}{FN}/{command}").json()
        code, out, err = run(capsys, "functions", command, "--fqfn", "public/default/wc", "--instance-id", "0", *url)
        assert code == 0, err
        assert json.loads(out) == httpx.get(f"{server.url}{FN}/0/{command}").json()
    status = json.loads(run(capsys, "functions", "status", "--name", "wc", *url)[1])
    assert {"numInstances", "numRunning", "instances"} <= status.keys()
    stats = json.loads(run(capsys, "functions", "stats", "--name", "wc", *url)[1])
    assert {"receivedTotal", "processedSuccessfullyTotal", "instances"} <= stats.keys()
    code, _, err = run(capsys, "functions", "status", "--name", "nope", *url)
    assert code == 1 and "HTTP 404" in err


def test_stop_start_restart(server, capsys):
    from statekeep.functions.admin import lifecycle
    from statekeep.functions.config.service import FunctionService

    url = ["--url", server.url]

    def stopped() -> bool:  # what the server persisted, read directly (local:// is multi-process)
        with FunctionService.open(f"local://{server.data_dir}") as service:
            return lifecycle.is_stopped(service.registry, "public", "default", "wc")

    def restarts() -> int:
        status = json.loads(run(capsys, "functions", "status", "--name", "wc", *url)[1])
        return status["instances"][0]["status"]["numRestarts"]

    assert run(capsys, "functions", "stop", "--name", "wc", *url)[1] == "Stopped successfully\n"
    assert stopped()
    status = json.loads(run(capsys, "functions", "status", "--name", "wc", *url)[1])
    assert status["numRunning"] == 0 and not any(i["status"]["running"] for i in status["instances"])
    assert run(capsys, "functions", "start", "--name", "wc", *url)[1] == "Started successfully\n"
    assert not stopped()
    before = restarts()
    assert run(capsys, "functions", "restart", "--name", "wc", *url)[1] == "Restarted successfully\n"
    assert restarts() == before + 1
    # per instance (POST .../0/restart): an instance is a partition of the function's one Spark query, so
    # the server restarts the query for it and refuses to stop or start one partition alone
    code, out, err = run(capsys, "functions", "restart", "--name", "wc", "--instance-id", "0", *url)
    assert (code, out) == (0, "Restarted successfully\n") and restarts() == before + 2, err
    for command in ("stop", "start"):
        code, out, err = run(capsys, "functions", command, "--name", "wc", "--instance-id", "0", *url)
        assert (code, out) == (2, "") and "HTTP 400" in err and "as a whole" in err, err
    code, _, err = run(capsys, "functions", "restart", "--name", "wc", "--instance-id", "7", *url)
    assert code == 1 and "HTTP 404" in err and "no instance 7" in err, err
    code, _, err = run(capsys, "functions", "stop", "--name", "nope", *url)
    assert code == 1 and "HTTP 404" in err
    with pytest.raises(SystemExit):
        main(["functions", "stop", "--name", "wc", "--instance-id", "x", *url])
    assert "instance-id must be a number" in capsys.readouterr().err


def test_trigger_runs_the_function_through_its_state(server, capsys, tmp_path):
    url = ["--url", server.url]
    code, out, err = run(capsys, "functions", "trigger", "--name", "wc", "--trigger-value", "hello", *url)
    assert (code, out) == (0, "hello\n"), err
    value = tmp_path / "value.txt"
    value.write_text("hello")
    code, out, err = run(capsys, "functions", "trigger", "--name", "wc", "--trigger-file", str(value), *url)
    assert (code, out) == (0, "hello\n"), err
    code, out, _ = run(capsys, "functions", "querystate", "--name", "wc", "-k", "hello", *url)
    assert json.loads(out)["numberValue"] == 2  # both triggers went through the function's real state
    code, out, err = run(capsys, "functions", "trigger", "--name", "wc", "--trigger-value", "hello", "--topic", "in",
                         *url)
    assert (code, out) == (0, "hello\n"), err
    code, _, err = run(capsys, "functions", "trigger", "--name", "wc", "--trigger-value", "hello", "--topic", "other",
                       *url)
    assert code == 2 and "HTTP 400" in err and "topic" in err
    out = run(capsys, "functions", "querystate", "--name", "wc", "-k", "hello", *url)[1]
    assert json.loads(out)["numberValue"] == 3  # the refused trigger wrote nothing
    code, _, err = run(capsys, "functions", "trigger", "--name", "wc", "--trigger-file", str(tmp_path / "no"), *url)
    assert code == 2 and "cannot read --trigger-file" in err
    code, _, err = run(capsys, "functions", "trigger", "--name", "wc", "--trigger-value", "x",
                       "--data-dir", os.fspath(server.data_dir))
    assert code == 2 and "through a server" in err
