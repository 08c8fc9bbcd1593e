"""What a new user gets, checked in fresh copies of the repository (its tracked files), so that CI,
which installs every extra, cannot hide a missing dependency:

- the core package alone (``pip install .``, no extras) in a new venv: every module imports, except
  optional integrations, which may only raise MissingDependencyError naming their extra; the core
  commands work; a feature of an extra fails, when used, with MissingDependencyError naming it;
- each of the README's set-up commands on its own: ``scripts/run`` end to end in a fresh copy (it installs
  what it needs and prints the counts, and a second run counts nothing twice), then ``scripts/test --fast`` in
  that copy (it installs what the tests need, a superset of scripts/run's extras, so its venv is the one it
  would make alone; then ruff, mypy and pytest pass, pytest on a sample of the fast tier, which the suite
  itself runs whole); ``scripts/docs`` in a copy of its own (the docs extra alone, without PySpark, builds
  the whole site, its Spark-only reference included).

All install from PyPI (the core install through pip, the scripts through uv, as scripts/setup-venv does; their
caches are reused). None of them is in the fast tier (``fresh_copy`` puts them in ``venv``), so
``scripts/test --fast`` never runs them again inside its own test."""

from __future__ import annotations

import ast
import collections
import html
import json
import os
import re
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
            "statekeep.metadata.kubernetes": "kubernetes",
            "statekeep.server": "server", "statekeep.functions.driver.sources": "spark",
            # the Spark plan of a function, and the DataFrame operator on it
            "statekeep.functions.driver.plan": "spark", "statekeep.spark.operator": "spark",
            "statekeep.functions.driver.kafka_sink": "spark",  # a PySpark data source
            "statekeep.functions.driver.pulsar_source": "spark", "statekeep.functions.driver.pulsar_sink": "spark",
            "statekeep.spark": "spark",
            "statekeep.testing.contract": "test", "statekeep.testing.pulsar": "test",
            "statekeep.pulsar": "spark"}  # a Pulsar topic as a PySpark data source


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
    """This environment without the test run's own venv, Spark settings and pytest(-xdist) variables."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYSPARK_PYTHON", "STATEKEEP_STORE")
           and not k.startswith("PYTEST_")}
    return {**env, **extra}


def run_script(repo: Path, *argv: str, timeout: float = 1800) -> str:
    """``argv`` (a script of the copy and its arguments) run in the copy ``repo``; its stdout, after it
    succeeded."""
    result = subprocess.run(list(argv), cwd=repo, capture_output=True, text=True, env=clean_env(),
                            timeout=timeout, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


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


def _signature_and_docstring(path: Path, function: str) -> tuple[list[str], str]:
    """The parameter names of ``function`` in the source file ``path`` and its docstring as Sphinx renders
    it as text (reST's double backquotes and roles gone, ``~`` roles shortened), read without importing it."""
    tree = ast.parse(path.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    params = [a.arg for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)]
    doc = ast.get_docstring(node) or ""
    doc = re.sub(r":\w+:`(~?)([^`]+)`", lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], doc)
    doc = " ".join(re.sub(r"^- ", "", line.strip()) for line in doc.replace("``", "").splitlines())
    return params, doc


def _rendered_text(fragment: str) -> str:
    """An HTML fragment's text, without whitespace and with Sphinx's typographic quotes made plain."""
    text = html.unescape(re.sub(r"<[^>]+>", "", fragment))
    text = text.translate(str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
                                         "\u2026": "..."}))
    return "".join(text.split())


def test_scripts_docs_in_a_fresh_copy_builds_the_spark_reference_without_pyspark(fresh_copy, tmp_path):
    repo = fresh_copy(tmp_path / "repo")
    out = run_script(repo, "scripts/docs", timeout=1200)  # strict: any warning (an import failing) fails it
    assert "docs: built docs/_build/html/index.html" in out
    found = subprocess.run([str(repo / ".venv/bin/python"), "-c", "import importlib.util as u; "
                            "print(u.find_spec('pyspark') is None, u.find_spec('sphinx') is None)"],
                           capture_output=True, text=True, env=clean_env(), check=True).stdout.split()
    assert found == ["True", "False"], "scripts/docs installs the docs extra, which has no PySpark"

    # the Spark-only reference page: apply_function's own signature and docstring, read over autodoc's
    # stand-in for PySpark, not an empty entry
    page = (repo / "docs/_build/html/reference/python-api.html").read_text()
    params, doc = _signature_and_docstring(repo / "src/statekeep/spark/operator.py", "apply_function")
    start = page.index('id="statekeep.spark.apply_function"')
    signature, body = page[start:page.index("</dt>", start)], page[page.index("</dt>", start):]
    assert re.findall(r'class="sig-param"><span class="n"><span class="pre">(\w+)<', signature) == params
    assert len(params) > 5 and len(doc) > 500
    assert "".join(doc.split()) in _rendered_text(body)


#: the fast tier's tests that scripts/test --fast runs in its fresh copy: the suite itself runs the whole
#: tier; these show the copy's venv runs the package's code, its commands and the test modules' imports
FAST_SAMPLE = ("test_no_import_cycles", "test_every_command_answers_help")


def _extras(script: Path) -> set[str]:
    """The extras ``script`` installs: its one ``scripts/setup-venv "EXTRAS"`` line's."""
    found = re.findall(r'scripts/setup-venv "([^"]*)"', script.read_text())
    assert len(found) == 1, f"{script}: one setup-venv line, found {found}"
    return set(found[0].split(","))


def test_scripts_run_twice_then_scripts_test_fast_in_a_fresh_copy(fresh_copy, tmp_path):
    """``scripts/run`` in a fresh copy: it installs what it needs and prints the counts, and run again counts
    nothing twice. Then, in the same copy, ``scripts/test --fast``: ruff, mypy, and pytest on a sample of the fast
    tier. scripts/test installs every extra scripts/run does (checked first), so the venv it runs in is the one it
    would make alone: each README command is shown on its own, for one install of PySpark."""
    repo = fresh_copy(tmp_path / "repo")
    assert _extras(repo / "scripts/run") <= _extras(repo / "scripts/test")
    inputs = sorted((repo / "examples/wordcount/input").iterdir())
    words = collections.Counter(json.loads(line)["word"] for part in inputs
                                for line in part.read_text().splitlines() if line.strip())

    first = run_script(repo, "scripts/run")
    assert f"processed {sum(words.values())} records" in first
    assert f'"numberValue": {words["spark"]}' in first  # the CLI's answer
    for word in ("spark", "state", "kafka"):  # the REST API's answers
        assert f"{word} = {words[word]}" in first
    assert ", ".join(f"{w} {n}" for w, n in sorted(words.items(), key=lambda i: (-i[1], i[0]))) in first
    assert "Look next" in first
    again = run_script(repo, "scripts/run")  # resumes from its checkpoint: nothing is counted twice
    assert "processed 0 records" in again and f"spark = {words['spark']}" in again

    out = run_script(repo, "scripts/test", "--fast", "-k", " or ".join(FAST_SAMPLE))
    assert "All checks passed!" in out  # ruff
    assert re.search(r"^Success: no issues found in \d+ source files$", out, re.M), out  # mypy
    # pytest collected every module (its imports work in the copy's venv) and ran the sample, fast tier only
    assert re.search(rf"^{len(FAST_SAMPLE)} passed\b", out, re.M), out
    for name in FAST_SAMPLE:
        assert f"::{name}" in out  # the --durations list names each test that ran
