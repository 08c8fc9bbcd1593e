"""What a new user gets, checked in fresh copies of the repository (its tracked files), so that CI,
which installs every extra, cannot hide a missing dependency:

- the core package alone (``pip install .``, no extras) in a new venv: every module imports, except
  optional integrations, which may only raise MissingDependencyError naming their extra; the core
  commands work; a feature of an extra fails, when used, with MissingDependencyError naming it;
- ``scripts/run``, the README's first command, end to end: it installs what it needs and prints the
  counts, and a second run counts nothing twice.

Both install from PyPI through pip (its cache is reused)."""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import missing

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow

#: modules that are themselves an optional integration -> the extra they need
OPTIONAL = {"statekeep.metadata.zookeeper": "zookeeper", "statekeep.metadata.etcd": "etcd",
            "statekeep.server": "server", "statekeep.functions.driver.sources": "spark",
            # the Spark plan of a function, and the DataFrame operator on it
            "statekeep.functions.driver.plan": "spark", "statekeep.spark.operator": "spark",
            "statekeep.spark": "spark",
            "statekeep.testing.contract": "test"}


@pytest.fixture
def fresh_copy() -> Callable[[Path], Path]:
    """Copies the repository's tracked files, as they are in the working tree, to a directory (in the
    ``venv`` tier: these tests build fresh virtual environments)."""
    return _fresh_copy


def _fresh_copy(destination: Path) -> Path:
    try:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        missing(f"a git checkout ({e})")
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)
    return destination


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the test run's own venv and Spark settings."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYSPARK_PYTHON", "STATEKEEP_STORE")}
    return {**env, **extra}


CHECK_IMPORTS = r'''
import importlib, json, os, sys
import statekeep
from statekeep.errors import MissingDependencyError

root = os.path.dirname(statekeep.__file__)
results = {}
for directory, _, files in os.walk(root):
    for file in sorted(files):
        if not file.endswith(".py") or file == "__main__.py":
            continue
        parts = os.path.relpath(os.path.join(directory, file), os.path.dirname(root))[:-3].split(os.sep)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            importlib.import_module(module)
            results[module] = ["ok", ""]
        except MissingDependencyError as e:
            results[module] = ["missing", str(e)]
        except BaseException as e:
            results[module] = ["error", repr(e)]
optional = {}
for package in ("fsspec", "kazoo", "aetcd", "pyspark", "fastapi", "uvicorn", "pandas", "pyarrow", "confluent_kafka"):
    try:
        importlib.import_module(package)
        optional[package] = True
    except ImportError:
        optional[package] = False
stores = {}
from statekeep.metadata import open_store
for url in ("zk://127.0.0.1:1/x", "etcd://127.0.0.1:1/x"):
    try:
        open_store(url).close()
        stores[url] = "opened"
    except MissingDependencyError as e:
        stores[url] = str(e)
print(json.dumps({"modules": results, "optional": optional, "stores": stores}))
'''


def test_core_install_imports_every_module_and_runs_the_core_commands(fresh_copy, tmp_path):
    repo = fresh_copy(tmp_path / "repo")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env())
    python, statekeep = str(venv / "bin" / "python"), str(venv / "bin" / "statekeep")
    install = subprocess.run([python, "-m", "pip", "install", "-q", str(repo)], capture_output=True, text=True,
                             env=clean_env(), timeout=900, check=False)
    assert install.returncode == 0, install.stdout + install.stderr

    check = subprocess.run([python, "-c", CHECK_IMPORTS], capture_output=True, text=True, cwd=tmp_path,
                           env=clean_env(), timeout=300, check=False)
    assert check.returncode == 0, check.stderr
    found = json.loads(check.stdout)
    assert not any(found["optional"].values()), f"the core install pulled in optional packages: {found['optional']}"
    assert len(found["modules"]) > 40  # it did walk the package
    wrong = {}
    for module, (outcome, message) in found["modules"].items():
        extra = next((x for m, x in OPTIONAL.items() if module == m or module.startswith(m + ".")), None)
        if outcome == "ok" or outcome == "missing" and extra is not None and f"statekeep[{extra}]" in message:
            continue
        wrong[module] = f"{outcome}: {message}"
    assert not wrong, f"modules the core install cannot import: {wrong}"
    assert "statekeep[zookeeper]" in found["stores"]["zk://127.0.0.1:1/x"]
    assert "statekeep[etcd]" in found["stores"]["etcd://127.0.0.1:1/x"]

    work = tmp_path / "work"
    work.mkdir()
    (work / "wc.py").write_text("def process(input, context):\n    context.incr_counter(input['word'], 1)\n")
    store = f"local://{work / 'store'}"

    def sk(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([statekeep, *argv], capture_output=True, text=True, cwd=work, env=clean_env(),
                              timeout=300, check=False)

    assert sk("--help").returncode == 0
    assert sk("metadata", "put", "/config/a", "hello", "--store", store).returncode == 0
    got = sk("metadata", "get", "/config/a", "--store", store)
    assert got.returncode == 0 and "hello" in got.stdout
    listed = sk("metadata", "ls", "/config", "--store", store)
    assert listed.returncode == 0 and listed.stdout.split() == ["a"]
    assert sk("metadata", "rm", "/config", "-r", "--store", store).returncode == 0
    assert sk("metadata", "get", "/config/a", "--store", store).returncode != 0

    fn = ["--tenant", "public", "--namespace", "default", "--name", "wc", "--data-dir", "data"]
    created = sk("functions", "create", *fn, "--py", "wc.py", "--inputs", "words")
    assert created.returncode == 0, created.stderr
    assert sk("functions", "putstate", *fn, "--key", "hello", "--state", '{"numberValue": 3}').returncode == 0
    queried = sk("functions", "querystate", *fn, "--key", "hello")
    assert queried.returncode == 0 and json.loads(queried.stdout)["numberValue"] == 3
    followed = sk("followers", "get", "--name", "wc", "--key", "hello", "--leader-store", f"local://{work / 'data'}")
    assert followed.returncode == 0 and json.loads(followed.stdout)["numberValue"] == 3, followed.stderr

    for argv, extra in ((["functions", "snapshot", *fn], "blobs"),
                        (["standalone", "--data-dir", "data"], "server"),
                        (["functions", "localrun", *fn, "--py", "wc.py", "--inputs", "words", "--once"], "spark")):
        result = sk(*argv)
        assert result.returncode == 1 and "MissingDependencyError" in result.stderr \
            and f"statekeep[{extra}]" in result.stderr, (argv, result.stderr)
    assert json.loads(sk("functions", "querystate", *fn, "--key", "hello").stdout)["numberValue"] == 3


def test_scripts_run_in_a_fresh_copy_prints_the_counts(fresh_copy, tmp_path):
    repo = fresh_copy(tmp_path / "repo")
    inputs = sorted((repo / "examples/wordcount/input").iterdir())
    words = collections.Counter(json.loads(line)["word"] for part in inputs
                                for line in part.read_text().splitlines() if line.strip())

    def run() -> str:
        result = subprocess.run(["scripts/run"], cwd=repo, capture_output=True, text=True, env=clean_env(),
                                timeout=1800, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    first = run()
    assert f"processed {sum(words.values())} records" in first
    assert f'"numberValue": {words["spark"]}' in first  # the CLI's answer
    for word in ("spark", "state", "kafka"):  # the REST API's answers
        assert f"{word} = {words[word]}" in first
    assert ", ".join(f"{w} {n}" for w, n in sorted(words.items(), key=lambda i: (-i[1], i[0]))) in first
    assert "Look next" in first

    again = run()  # resumes from its checkpoint: nothing is counted twice
    assert "processed 0 records" in again and f"spark = {words['spark']}" in again
