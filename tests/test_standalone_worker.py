"""``statekeep standalone`` runs functions created through REST on Spark, stops them on delete, and
starts a function created again under the same name from scratch; its options refuse combinations
that cannot work; a function's lock keeps a localrun from running it beside its worker, and
``functions status`` names the holder. (Several servers on one store: tests/test_cluster.py.)"""

from __future__ import annotations

import json

import httpx
import pytest
from support.server_process import create_function

from statekeep.testing import wait_for

WORDCOUNT = b"def process(input, context):\n    context.incr_counter(input['word'], 1)\n"


def test_created_function_runs_and_its_state_is_served(server_process, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.jsonl").write_text("".join(json.dumps({"word": w}) + "\n" for w in ["a", "b", "a"]))
    server = server_process(tmp_path / "data", worker=True)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            response = create_function(client, "public", "default", "wc", WORDCOUNT, inputs=[str(inputs)],
                                       keyField="word")
            assert response.status_code == 200, response.text

            def count(key: str):
                r = client.get(f"/admin/v3/functions/public/default/wc/state/{key}")
                return r.json().get("numberValue") if r.status_code == 200 else None

            assert wait_for(lambda: count("a") == 2, timeout=240), server.log.name
            assert count("b") == 1
            (inputs / "b.jsonl").write_text(json.dumps({"word": "b"}) + "\n")  # a running query picks it up
            assert wait_for(lambda: count("b") == 2, timeout=120)

            assert client.delete("/admin/v3/functions/public/default/wc").status_code in (200, 204)
            assert client.get("/admin/v3/functions/public/default/wc/state/a").status_code == 404

            # created again under the same name: a new query from its own checkpoint reads every file again
            response = create_function(client, "public", "default", "wc", WORDCOUNT, inputs=[str(inputs)],
                                       keyField="word")
            assert response.status_code == 200, response.text
            assert wait_for(lambda: count("a") == 2 and count("b") == 2, timeout=240), server.log.name
    finally:
        server.stop()


def test_standalone_options_refuse_what_cannot_work(tmp_path, capsys):
    from statekeep.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["standalone", "--data-dir", str(tmp_path), "--store", "zk://127.0.0.1:1/x"])
    assert exit_info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err
    for argv, message in (
            (["--store", "zk://127.0.0.1:1/x"], "--store needs --checkpoint-dir"),
            (["--store", str(tmp_path), "--checkpoint-dir", str(tmp_path)], "--store takes a URL"),
            (["--store", "nope://x", "--checkpoint-dir", str(tmp_path)], "unknown metadata store scheme 'nope'"),
            (["--data-dir", str(tmp_path), "--spark-conf", "cores=2"], "--spark-conf takes spark.KEY=VALUE")):
        assert main(["standalone", *argv, "--port", "0"]) == 2
        assert message in capsys.readouterr().err


def test_localrun_waits_for_the_runner_and_status_names_it(tmp_path, capsys):
    """A function held by a worker is not run by a localrun beside it (it says who holds it), and
    ``functions status`` names the holder; once the holder goes, status says nobody runs it."""
    from statekeep.cli import main
    from statekeep.coordination import CoordinationService
    from statekeep.functions.admin.worker import acquire_function_lock
    from statekeep.metadata import open_store

    data = tmp_path / "data"
    py = tmp_path / "wc.py"
    py.write_bytes(WORDCOUNT)
    where = ["--name", "wc", "--data-dir", str(data)]
    assert main(["functions", "create", *where, "--py", str(py), "--inputs", str(tmp_path / "in")]) == 0
    store = open_store(f"local://{data}")
    try:
        with CoordinationService(store) as coordination:
            lock = acquire_function_lock(coordination, "public", "default", "wc", "elsewhere:8080")
            capsys.readouterr()
            assert main(["functions", "status", *where]) == 0
            status = json.loads(capsys.readouterr().out)
            assert status["workerId"] == "elsewhere:8080" and status["running"] is False  # nothing ran yet
            code = main(["functions", "localrun", *where, "--py", str(py), "--inputs", str(tmp_path / "in"),
                         "--once", "--lock-wait", "0.2"])
            err = capsys.readouterr().err
            assert code == 1 and "runs on worker elsewhere:8080" in err and "waiting for worker elsewhere:8080" in err
            lock.release()
        assert main(["functions", "status", *where]) == 0
        assert json.loads(capsys.readouterr().out)["workerId"] is None
        assert main(["functions", "localrun", *where, "--py", str(py), "--inputs", "x", "--lock-wait", "-1"]) == 2
    finally:
        store.close()
