"""``statekeep functions`` with pulsar-admin's habits, run for real against ``statekeep standalone``:
a server by default (client.conf, environment), one plain line when none answers, ``--fqfn``,
``-i/-o/-k/-s``, ``--function-config-file`` (YAML), ``querystate --watch`` and ``status`` over a server."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from support.server_process import FUNCTION
from support.cli import run, no_client_settings  # noqa: F401 - a fixture, used below
from statekeep.cli import build_parser, main
from statekeep.cli.client import DEFAULT_URL, resolve_target
from statekeep.errors import InvalidArgumentError
from statekeep.testing.servers import free_port

pytestmark = pytest.mark.usefixtures("no_client_settings")  # no client settings of this machine


def write_conf(path: Path, **values: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# like Pulsar's client.conf\n" + "".join(f"{k}={v}\n" for k, v in values.items())
                    + "brokerServiceUrl=pulsar://localhost:6650/\n")
    return path


@pytest.fixture
def py(tmp_path):
    path = tmp_path / "wordcount.py"
    path.write_bytes(FUNCTION)
    return str(path)


def test_where_a_command_goes(tmp_path, monkeypatch):
    def target(*argv: str):
        return resolve_target(build_parser().parse_args(["functions", "get", "--name", "f", *argv]))

    assert (target().url, target().token, target().source) == (DEFAULT_URL, None, "the default")
    conf = write_conf(tmp_path / "xdg" / "statekeep" / "client.conf", webServiceUrl="http://conf:1",
                      authParams="token:from-conf")
    assert (target().url, target().token) == ("http://conf:1", "from-conf") and str(conf) in target().source
    (tmp_path / "token").write_text("from-file\n")
    write_conf(conf, webServiceUrl="http://conf:1", authParams=f"file://{tmp_path / 'token'}")
    assert target().token == "from-file"
    monkeypatch.setenv("STATEKEEP_TOKEN", "from-env")
    assert target().token == "from-env" and target("--token", "flag").token == "flag"
    monkeypatch.setenv("STATEKEEP_STORE", "local:///somewhere")
    assert (target().url, target().store) == (None, "local:///somewhere")
    monkeypatch.setenv("STATEKEEP_URL", "http://env:2")
    assert target().url == "http://env:2" and target().source == "$STATEKEEP_URL"
    assert target("--url", "http://flag:3").url == "http://flag:3"
    assert target("--data-dir", "d").store == f"local://{os.path.abspath('d')}"
    assert target("--store", "zk://h/x").store == "zk://h/x"

    monkeypatch.delenv("STATEKEEP_URL")
    monkeypatch.delenv("STATEKEEP_STORE")
    monkeypatch.delenv("STATEKEEP_TOKEN")
    explicit = tmp_path / "elsewhere.conf"
    monkeypatch.setenv("STATEKEEP_CLIENT_CONF", str(explicit))
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        target()
    write_conf(explicit, webServiceUrl="http://explicit:4", authParams="basic:x")
    with pytest.raises(InvalidArgumentError, match="token:TOKEN or file:"):
        target()


def test_no_server_answering_is_one_plain_line(tmp_path, capsys, monkeypatch):
    port = free_port()
    conf = write_conf(tmp_path / "client.conf", webServiceUrl=f"http://127.0.0.1:{port}")
    monkeypatch.setenv("STATEKEEP_CLIENT_CONF", str(conf))
    code, out, err = run(capsys, "functions", "get", "--name", "wc")
    assert code == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"statekeep: cannot reach a statekeep server at http://127.0.0.1:{port} "
                          f"(webServiceUrl in {conf}): connection refused.")
    assert "statekeep standalone" in err and "--data-dir" in err and "--store" in err
    # direct access needs no server
    code, out, err = run(capsys, "functions", "list", "--data-dir", str(tmp_path / "data"))
    assert code == 0 and out == "", err


def test_a_server_by_default_with_the_token_of_client_conf(server_process, tmp_path, capsys, monkeypatch, py):
    server = server_process(tmp_path / "data", tokens={"secret-token": {"superuser": True}})
    try:
        conf = write_conf(tmp_path / "client.conf", webServiceUrl=server.url)
        monkeypatch.setenv("STATEKEEP_CLIENT_CONF", str(conf))
        code, _, err = run(capsys, "functions", "create", "--name", "wc", "--py", py, "-i", "in")
        assert code == 1 and "HTTP 401" in err
        # the file's token goes to whichever server: here one named by --url
        conf.write_text("authParams=token:secret-token\n")
        code, out, err = run(capsys, "functions", "create", "--name", "wc", "--py", py, "-i", "in", "--url", server.url)
        assert (code, out) == (0, "Created successfully\n"), err
        write_conf(conf, webServiceUrl=server.url, authParams="token:secret-token")
        code, out, err = run(capsys, "functions", "get", "--name", "wc")
        assert code == 0 and json.loads(out)["name"] == "wc", err
        got = httpx.get(server.url + "/admin/v3/functions/public/default/wc",
                        headers={"Authorization": "Bearer secret-token"}).json()
        assert got["inputs"] == ["in"]
        # status over the server: Pulsar's FunctionStatus, the same one the REST API gives
        code, out, err = run(capsys, "functions", "status", "--fqfn", "public/default/wc")
        rest = httpx.get(server.url + "/admin/v3/functions/public/default/wc/status",
                         headers={"Authorization": "Bearer secret-token"}).json()
        assert code == 0 and json.loads(out) == rest and rest["numInstances"] >= 1, err
        # directly on the data directory: statekeep's own record of the same function
        code, out, err = run(capsys, "functions", "status", "--name", "wc", "--data-dir", str(server.data_dir))
        assert code == 0 and json.loads(out)["workerId"] is None and json.loads(out)["processed"] == 0, err
        code, out, err = run(capsys, "functions", "stats", "--name", "wc", "--data-dir", str(server.data_dir))
        rest = httpx.get(server.url + "/admin/v3/functions/public/default/wc/stats",
                         headers={"Authorization": "Bearer secret-token"}).json()
        assert code == 0 and json.loads(out) == rest, err  # the same FunctionStats, composed from the store
    finally:
        server.stop()


def test_pulsar_admin_flags_and_the_yaml_config_file(server_process, tmp_path, capsys, py):
    server = server_process(tmp_path / "data")
    try:
        url = ["--url", server.url]
        config_file = tmp_path / "wc.yaml"
        config_file.write_text(f"tenant: acme\nnamespace: prod\nname: wc\npy: {py}\ninputs: [a.jsonl, b.jsonl]\n"
                               "output: out\nparallelism: 2\nuserConfig:\n  greeting: hello\n  n: 3\n")
        code, out, err = run(capsys, "functions", "create", "--function-config-file", str(config_file),
                             "--parallelism", "3", *url)
        assert code == 0, err
        fn = "acme/prod/wc"
        config = json.loads(run(capsys, "functions", "get", "--fqfn", fn, *url)[1])
        assert (config["tenant"], config["namespace"], config["name"]) == ("acme", "prod", "wc")
        assert config["inputs"] == ["a.jsonl", "b.jsonl"] and config["output"] == "out"
        assert config["userConfig"] == {"greeting": "hello", "n": 3} and config["py"] == "wordcount.py"
        assert config["parallelism"] == 3  # the flag overrides the file
        assert run(capsys, "functions", "update", "--fqfn", fn, "-i", "c.jsonl", "-o", "out2", *url)[0] == 0
        config = json.loads(run(capsys, "functions", "get", "--fqfn", fn, *url)[1])
        assert config["inputs"] == ["c.jsonl"] and config["output"] == "out2"

        # config pulsar-admin sends is honoured (stored, GET returns it) or refused naming the field, never dropped
        secrets = {"password": "PASSWORD"}
        for flag, value, field, stored in (
                ("--processing-guarantees", "EFFECTIVELY_ONCE", "processingGuarantees", "EFFECTIVELY_ONCE"),
                ("--secrets", json.dumps(secrets), "secrets", secrets)):
            code, _, err = run(capsys, "functions", "update", "--fqfn", fn, flag, value, *url)
            if code == 0:
                assert json.loads(run(capsys, "functions", "get", "--fqfn", fn, *url)[1])[field] == stored
            else:
                assert code == 2 and field in err, err
        config = json.loads(run(capsys, "functions", "get", "--fqfn", fn, *url)[1])

        code, out, err = run(capsys, "functions", "putstate", "--fqfn", fn, "-k", "k", "-s", '{"numberValue": 7}', *url)
        assert code == 0 and json.loads(out)["numberValue"] == 7, err
        code, out, _ = run(capsys, "functions", "querystate", "--fqfn", fn, "-k", "k", *url)
        assert json.loads(out) == {"key": "k", "numberValue": 7, "version": 0}

        # bad input: a precise message, exit 2, nothing changed
        for argv, message in (
                (["get", "--fqfn", fn, "--name", "wc"], "either --fqfn or --tenant/--namespace/--name"),
                (["get", "--fqfn", "acme/wc"], "tenant/namespace/name"),
                (["get"], "--name NAME or --fqfn"),
                (["update", "--fqfn", fn, "--secrets", "[1]"], "--secrets must be a JSON object"),
                (["update", "--fqfn", fn, "--user-config", "{x"], "--user-config is not valid JSON")):
            code, _, err = run(capsys, "functions", *argv, *url)
            assert code == 2 and message in err, (argv, err)
        for text, message in (("- a\n- b\n", "must hold a mapping"), ("a: [\n", "not valid YAML")):
            config_file.write_text(text)
            code, _, err = run(capsys, "functions", "update", "--fqfn", fn, "--function-config-file",
                               str(config_file), *url)
            assert code == 2 and message in err, err
        with pytest.raises(SystemExit) as exit_:
            main(["functions", "update", "--fqfn", fn, "--processing-guarantees", "SOMETIMES", *url])
        assert exit_.value.code == 2 and "invalid choice" in capsys.readouterr().err
        assert json.loads(run(capsys, "functions", "get", "--fqfn", fn, *url)[1]) == config
    finally:
        server.stop()


def test_querystate_watch_prints_each_change(server_process, tmp_path, py):
    server = server_process(tmp_path / "data")
    watcher = None
    try:
        client = httpx.Client(base_url=server.url)
        fn = "/admin/v3/functions/public/default/wc"
        assert main(["functions", "create", "--name", "wc", "--py", py, "-i", "in", "--url", server.url]) == 0

        def put(value: int) -> None:
            response = client.post(fn + "/state/k", files={"state": (None, json.dumps({"numberValue": value}),
                                                                     "application/json")})
            assert response.status_code == 200, response.text

        put(1)
        env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEP_")}
        watcher = subprocess.Popen([sys.executable, "-m", "statekeep.cli", "functions", "querystate", "--name", "wc",
                                    "-k", "k", "--watch", "--url", server.url], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, env=env)
        lines: queue.Queue = queue.Queue()
        for stream, tag in ((watcher.stdout, "out"), (watcher.stderr, "err")):
            threading.Thread(target=lambda s=stream, t=tag: [lines.put((t, line)) for line in s], daemon=True).start()

        def next_line() -> tuple[str, str]:
            return lines.get(timeout=60)

        assert next_line() == ("out", json.dumps({"key": "k", "numberValue": 1, "version": 0}) + "\n")
        put(2)
        assert next_line() == ("out", json.dumps({"key": "k", "numberValue": 2, "version": 1}) + "\n")
        assert client.delete(fn + "/state/k").status_code == 204
        tag, line = next_line()
        assert tag == "err" and "not found" in line and "'k'" in line
        put(3)  # it watches on: the key's new incarnation is printed
        tag, line = next_line()
        assert tag == "out" and json.loads(line)["numberValue"] == 3
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=60) == 130
    finally:
        if watcher is not None and watcher.poll() is None:
            watcher.kill()
            watcher.wait()
        server.stop()


BLOCK = "import sys; sys.modules['httpx'] = None; sys.modules['yaml'] = None\n" \
        "from statekeep.cli import main; sys.exit(main(sys.argv[1:]))"


def test_without_the_client_extra_direct_access_works_and_a_server_needs_it(tmp_path, py):
    """As on the core install (httpx and PyYAML unimportable): the CLI imports, works on a data
    directory, and a command for a server or a YAML config says which extra it needs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEKEEP_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", BLOCK, "functions", *argv], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=120, check=False)

    where = ["--data-dir", str(tmp_path / "data")]
    created = cli("create", "--fqfn", "public/default/wc", "--py", py, "-i", "in", *where)
    assert created.returncode == 0 and created.stdout == "Created successfully\n", created.stderr
    assert cli("list", *where).stdout == "wc\n"
    for argv, what in ((["get", "--name", "wc"], "talking to a statekeep server"),
                       (["update", "--name", "wc", "--function-config-file", py, *where], "--function-config-file")):
        result = cli(*argv)
        assert result.returncode == 1 and what in result.stderr and "statekeep[client]" in result.stderr, \
            result.stderr
