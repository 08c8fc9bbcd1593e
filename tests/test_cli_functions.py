"""``statekeep functions``: against a running server (--url) and directly on a data directory
(--data-dir), with the same JSON either way."""

from __future__ import annotations

import json

import httpx
import pytest

from support.server_process import FUNCTION
from support.cli import run


@pytest.fixture
def py(tmp_path):
    path = tmp_path / "wordcount.py"
    path.write_bytes(FUNCTION)
    return str(path)


def test_direct_on_data_dir(tmp_path, capsys, py):
    where = ["--data-dir", str(tmp_path / "data")]
    ident = ["--tenant", "acme", "--namespace", "prod", "--name", "wc"]
    code, out, err = run(capsys, "functions", "create", *ident, "--py", py, "--inputs", "a.jsonl,b.jsonl",
                         "--user-config", '{"x": 1}', "--key-field", "word", *where)
    assert code == 0 and out == "Created successfully\n", err
    code, out, _ = run(capsys, "functions", "get", *ident, *where)
    config = json.loads(out)
    assert config["inputs"] == ["a.jsonl", "b.jsonl"] and config["userConfig"] == {"x": 1}
    assert config["keyField"] == "word" and config["py"] == "wordcount.py"
    assert run(capsys, "functions", "list", "--tenant", "acme", "--namespace", "prod", *where)[1] == "wc\n"
    assert run(capsys, "functions", "update", *ident, "--parallelism", "4", *where)[0] == 0
    assert json.loads(run(capsys, "functions", "get", *ident, *where)[1])["parallelism"] == 4
    code, out, _ = run(capsys, "functions", "putstate", *ident, "--key", "a/b", "--state", '{"numberValue": 3}', *where)
    assert code == 0 and json.loads(out) == {"key": "a/b", "numberValue": 3, "version": 0}
    code, out, _ = run(capsys, "functions", "querystate", *ident, "--key", "a/b", *where)
    assert json.loads(out) == {"key": "a/b", "numberValue": 3, "version": 0}
    code, _, err = run(capsys, "functions", "querystate", *ident, "--key", "missing", *where)
    assert code == 1 and "not found" in err
    assert run(capsys, "functions", "delete", *ident, *where)[1] == "Deleted successfully\n"
    code, _, err = run(capsys, "functions", "get", *ident, *where)
    assert code == 1 and "does not exist" in err


def test_bad_input_gives_clear_errors(tmp_path, capsys, py):
    where = ["--data-dir", str(tmp_path / "data")]
    bad = tmp_path / "bad.py"
    bad.write_text("def process(input, context):\n    x = = 1\n")
    code, _, err = run(capsys, "functions", "create", "--name", "f", "--py", str(bad), "--inputs", "x", *where)
    assert code == 2 and "bad.py:2" in err and "syntax error" in err
    code, _, err = run(capsys, "functions", "create", "--name", "f", "--inputs", "x", *where)
    assert code == 2 and "--py" in err
    code, _, err = run(capsys, "functions", "create", "--name", "../x", "--py", py, "--inputs", "x", *where)
    assert code == 2 and "function name" in err
    assert run(capsys, "functions", "create", "--name", "f", "--py", py, "--inputs", "x", *where)[0] == 0
    code, _, err = run(capsys, "functions", "putstate", "--name", "f", "--key", "k", "--state", "{bad", *where)
    assert code == 2 and "JSON" in err
    code, _, err = run(capsys, "functions", "putstate", "--name", "f", "--key", "k", "--state",
                       '{"key": "other", "stringValue": "v"}', *where)
    assert code == 2 and "differs" in err
    code, _, err = run(capsys, "functions", "create", "--name", "f", "--py", py, "--inputs", "x", *where)
    assert code == 1 and "already exists" in err


def test_trigger_interval_flag_sets_trigger_interval_ms(tmp_path, capsys, py):
    where = ["--data-dir", str(tmp_path / "data"), "--name", "f"]
    assert run(capsys, "functions", "create", "--py", py, "--inputs", "x", "--trigger-interval", "1.5s", *where)[0] == 0
    assert json.loads(run(capsys, "functions", "get", *where)[1])["triggerIntervalMs"] == 1500
    for text, ms in (("250ms", 250), ("0", 0), (" 2 s ", 2000)):
        assert run(capsys, "functions", "update", "--trigger-interval", text, *where)[0] == 0
        assert json.loads(run(capsys, "functions", "get", *where)[1])["triggerIntervalMs"] == ms
    for bad in ("5", "-1s", "1m", "fast", ""):  # a bare number other than 0 has no unit: 5 ms or 5 s?
        with pytest.raises(SystemExit) as exit:
            run(capsys, "functions", "update", f"--trigger-interval={bad}", *where)
        assert exit.value.code == 2 and "250ms or 2s" in capsys.readouterr().err
    code, _, err = run(capsys, "functions", "update", "--trigger-interval", "99999999999s", *where)
    assert code == 2 and "triggerIntervalMs" in err
    assert json.loads(run(capsys, "functions", "get", *where)[1])["triggerIntervalMs"] == 2000  # unchanged


def test_against_a_server_prints_the_rest_json(server_process, tmp_path, capsys, py):
    server = server_process(tmp_path / "data")
    try:
        url = ["--url", server.url]
        ident = ["--tenant", "acme", "--namespace", "prod", "--name", "wc"]
        assert run(capsys, "functions", "create", *ident, "--py", py, "--inputs", "in", *url)[0] == 0
        code, out, err = run(capsys, "functions", "putstate", *ident, "--state",
                             '{"key": "k/é", "stringValue": "héllo"}', *url)
        assert code == 0, err
        code, out, _ = run(capsys, "functions", "querystate", *ident, "--key", "k/é", *url)
        rest = httpx.get(server.url + "/admin/v3/functions/acme/prod/wc/state/k%2F%C3%A9").json()
        assert json.loads(out) == rest == {"key": "k/é", "stringValue": "héllo", "version": 0}
        # the same answer directly on the data directory (local:// is multi-process)
        code, direct, _ = run(capsys, "functions", "querystate", *ident, "--key", "k/é",
                              "--data-dir", str(server.data_dir))
        assert direct == out
        for key in (".", "..", "a?b#c"):
            run(capsys, "functions", "putstate", *ident, "--key", key, "--state", '{"numberValue": 1}', *url)
            assert json.loads(run(capsys, "functions", "querystate", *ident, "--key", key, *url)[1])["key"] == key
        assert run(capsys, "functions", "list", "--tenant", "acme", "--namespace", "prod", "--json", *url)[1] \
            == '[\n  "wc"\n]\n'
        code, _, err = run(capsys, "functions", "querystate", *ident, "--key", "nope", *url)
        assert code == 1 and "HTTP 404" in err
        assert run(capsys, "functions", "delete", *ident, *url)[0] == 0
        code, _, err = run(capsys, "functions", "get", *ident, *url)
        assert code == 1 and "does not exist" in err
    finally:
        server.stop()
    code, _, err = run(capsys, "functions", "get", "--name", "x", "--url", server.url)
    assert code == 1 and "cannot reach" in err
