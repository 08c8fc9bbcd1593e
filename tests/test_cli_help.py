"""The ``statekeep`` command's help is true and useful, and a normal run prints no traceback.

- ``statekeep --help`` says what statekeep is (not an internal docstring cut mid-sentence);
- every option of every command has a help text, and commands that work on a store only do not offer a
  ``--url`` they would refuse;
- Spark's Python worker daemon, started through ``statekeep-spark-python``, lets a worker whose socket the
  JVM closed (what a stopping SparkContext does to idle workers, at the end of every ``localrun --once``)
  exit without PySpark's ``BrokenPipeError`` traceback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest

from statekeep.cli import DESCRIPTION, build_parser, main
from statekeep.functions.driver import sparkpython

#: the functions commands that work on a store only (no server side)
DIRECT_ONLY = ("localrun", "snapshot", "snapshots", "restore", "compact")


def subparsers(parser: argparse.ArgumentParser,
               prog: str = "statekeep") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (command line, parser) below ``parser``, itself first."""
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from subparsers(sub, f"{prog} {name}")


def test_top_level_help_says_what_statekeep_is(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--help"])
    assert exit.value.code == 0
    out = capsys.readouterr().out
    assert DESCRIPTION in out
    assert "Each command group lives in its own module" not in out  # the old internal docstring
    assert "statekeep functions localrun" in out and "querystate" in out  # first steps


def test_every_option_has_help():
    missing = [f"{prog} {action.option_strings[-1]}"
               for prog, parser in subparsers(build_parser()) for action in parser._actions
               if action.option_strings and action.help is not argparse.SUPPRESS and not (action.help or "").strip()]
    assert missing == []


def test_every_command_answers_help(capsys):
    for prog, _ in subparsers(build_parser()):
        with pytest.raises(SystemExit) as exit:
            main([*prog.split()[1:], "--help"])
        assert exit.value.code == 0, prog
        assert "usage: " + prog in capsys.readouterr().out


def test_output_help_names_every_kind_of_destination():
    (create,) = (p for prog, p in subparsers(build_parser()) if prog == "statekeep functions create")
    help_text = create.format_help()
    for kind in ("persistent://", "directory", "console", "parquet"):
        assert kind in help_text.split("--output OUTPUT", 1)[1].split("--classname")[0], kind


@pytest.mark.parametrize("command", DIRECT_ONLY)
def test_store_only_commands_do_not_offer_url(command, capsys, tmp_path):
    (parser,) = (p for prog, p in subparsers(build_parser()) if prog == f"statekeep functions {command}")
    help_text = parser.format_help()
    assert "--url" not in help_text and "--token" not in help_text and "--data-dir" in help_text
    # given anyway, it is refused saying what to use instead (before anything is opened)
    argv = ["functions", command, "--name", "f", "--url", "http://127.0.0.1:1"]
    if command == "localrun":
        argv += ["--py", str(tmp_path / "f.py"), "--inputs", "x"]
        (tmp_path / "f.py").write_text("def process(input, context):\n    return input\n")
    assert main(argv) == 2
    assert "--data-dir or --store" in capsys.readouterr().err


def test_launcher_runs_pysparks_daemon_through_its_own_entry():
    # Spark's arguments stay visible on the command line (tests find the workers by "pyspark.daemon pyspark.worker")
    assert sparkpython.python_args(["-m", "pyspark.daemon", "pyspark.worker"]) == [
        "-c", sparkpython.DAEMON_CODE, "-m", "pyspark.daemon", "pyspark.worker"]
    assert sparkpython.python_args(["-m", "pyspark.worker"]) == ["-m", "pyspark.worker"]
    assert sparkpython.python_args(["-c", "pass"]) == ["-c", "pass"]


def _stop_idle_worker(python: list[str]) -> tuple[int, str]:
    """Play the JVM's part with PySpark's worker daemon started by ``python``: take one worker over the unix
    socket (as statekeep's sessions do), close its socket as a stopping SparkContext closes an idle worker's,
    then close the daemon's stdin (its signal to exit). The daemon's exit code and stderr."""
    sock_dir = tempfile.mkdtemp(prefix="sk-daemon-")  # short: a unix socket's path has at most 107 bytes
    env = {**os.environ, "PYTHON_UNIX_DOMAIN_ENABLED": "true", "PYTHON_WORKER_FACTORY_SOCK_DIR": sock_dir,
           "PYTHON_DAEMON_KILL_WORKER_ON_FLUSH_FAILURE": "true", "SPARK_REUSE_WORKER": "1"}
    daemon = subprocess.Popen([*python, "-m", "pyspark.daemon"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=env)
    try:
        assert daemon.stdout is not None and daemon.stdin is not None and daemon.stderr is not None
        (length,) = struct.unpack("!i", daemon.stdout.read(4))
        path = daemon.stdout.read(length).decode()
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(60)
            sock.connect(path)
            (pid,) = struct.unpack("!i", sock.recv(4))  # the forked worker's pid: it now waits for a task
            assert pid > 0
        # the worker reads the end of its input and answers into a closed socket; give it time to
        time.sleep(1.5)
        daemon.stdin.close()
        err = daemon.stderr.read().decode()
        return daemon.wait(timeout=60), err
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        shutil.rmtree(sock_dir, ignore_errors=True)


def test_daemon_worker_closed_by_spark_exits_without_traceback(spark_env):
    launcher = spark_env["PYSPARK_PYTHON"]
    if not launcher.endswith("statekeep-spark-python"):
        pytest.skip("statekeep-spark-python is not installed beside this interpreter")
    # PySpark's own daemon prints the BrokenPipeError (the failure this guards against)...
    _, err = _stop_idle_worker([sys.executable])
    assert "BrokenPipeError" in err
    # ...the one statekeep's sessions start does not
    _, err = _stop_idle_worker([launcher])
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path):
    """``statekeep ... | head``: the reader closes the pipe before the command writes; the command ends quietly
    (exit 141, as a shell tool killed by SIGPIPE), with nothing on stderr."""
    url = f"local://{tmp_path}"
    assert main(["metadata", "put", "/a", "x", "--store", url]) == 0
    reader, writer = os.pipe()
    os.close(reader)  # nobody reads: the command's first write fails
    done = subprocess.run([sys.executable, "-m", "statekeep.cli", "metadata", "ls", "/", "--store", url],
                          stdout=writer, stderr=subprocess.PIPE, text=True, timeout=60)
    os.close(writer)
    assert (done.returncode, done.stderr) == (141, "")
