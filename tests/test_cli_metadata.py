"""``statekeep metadata``: readable output, JSON with --json, clear errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

from support.cli import run
from statekeep.metadata import open_store


def test_put_get_ls_rm(tmp_path, capsys):
    url = f"local://{tmp_path}"
    assert run(capsys, "metadata", "put", "/cfg/a", "hello", "--store", url)[0] == 0
    code, out, err = run(capsys, "metadata", "get", "/cfg/a", "--store", url)
    assert code == 0 and out == "hello\n" and "version 0" in err
    code, out, _ = run(capsys, "metadata", "get", "/cfg/a", "--store", url, "--json")
    data = json.loads(out)
    assert data["value"] == "hello" and data["version"] == 0 and data["path"] == "/cfg/a"
    run(capsys, "metadata", "put", "/cfg/b", "x", "--store", url)
    assert run(capsys, "metadata", "ls", "/cfg", "--store", url)[1] == "a\nb\n"
    assert json.loads(run(capsys, "metadata", "ls", "/cfg", "--store", url, "--json")[1]) == ["a", "b"]
    assert run(capsys, "metadata", "rm", "/cfg/a", "--store", url)[0] == 0
    assert json.loads(run(capsys, "metadata", "ls", "/cfg", "--store", url, "--json")[1]) == ["b"]
    assert run(capsys, "metadata", "rm", "/cfg", "-r", "--store", url)[0] == 0
    with open_store(url) as store:
        assert not store.exists("/cfg") and not store.exists("/cfg/b")


def test_binary_value_shown_as_base64(tmp_path, capsys, monkeypatch):
    url = f"local://{tmp_path}"
    with open_store(url) as store:
        store.put("/bin", b"\xff\x00")
    data = json.loads(run(capsys, "metadata", "get", "/bin", "--store", url, "--json")[1])
    assert data["valueBase64"] == "/wA="


def test_errors_are_one_line_with_exit_codes(tmp_path, capsys):
    url = f"local://{tmp_path}"
    code, out, err = run(capsys, "metadata", "get", "/missing", "--store", url)
    assert code == 1 and out == "" and "not found" in err
    code, _, err = run(capsys, "metadata", "put", "relative", "x", "--store", url)
    assert code == 2 and "absolute" in err
    run(capsys, "metadata", "put", "/v", "1", "--store", url)
    code, _, err = run(capsys, "metadata", "put", "/v", "2", "--version", "7", "--store", url)
    assert code == 1 and "BadVersionError" in err
    with open_store(url) as store:
        assert store.get("/v").value == b"1"
    code, _, err = run(capsys, "metadata", "get", "/x", "--store", "nosuch://x")
    assert code == 2 and "unknown metadata store scheme" in err


def test_watch_prints_changes_from_another_process(tmp_path):
    url = f"local://{tmp_path}"
    with open_store(url) as store:
        store.put("/w", b"")
    watcher = subprocess.Popen(
        [sys.executable, "-m", "statekeep.cli", "metadata", "watch", "/w", "--store", url, "--count", "3", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "watching" in watcher.stderr.readline()
    with open_store(url) as store:
        store.put("/w/a", b"1")
        store.put("/w/a", b"2")
        store.put("/elsewhere", b"ignored")
    out, _ = watcher.communicate(timeout=60)
    lines = out.splitlines()
    assert len(lines) == 3  # JSON Lines: one object per line
    events = [json.loads(line) for line in lines]
    assert [(e["type"], e["path"]) for e in events] == [
        ("Created", "/w/a"), ("ChildrenChanged", "/w"), ("Modified", "/w/a")]
