"""Spark function helpers for the tests: the word-count example, input files that appear whole, a
function registered and run once, and a driver killed mid-run then run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import read_status, run_registered
from statekeep.testing import wait_for

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "wordcount"
WORDCOUNT = (EXAMPLE / "wordcount.py").read_bytes()
#: a function mirroring another function's changelog records into its own state
MIRROR = b'''
def process(input, context):
    # input: one changelog record of another function (offset, key, kind, value, number, version, tombstone)
    if input.get("tombstone"):
        context.del_state(input["key"])
    else:
        context.put_state(input["key"], str(input["number"]))
'''


def write_words(directory: Path, name: str, words: list[str]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".{name}.tmp"
    temp.write_text("".join(json.dumps({"word": w}) + "\n" for w in words))
    temp.rename(directory / name)  # appear whole: Spark's file source must not see half a file


def write_word_files(directory: Path, words: list[str], *, first: int = 0, per_file: int = 500) -> None:
    """``words`` as files ``part-{first}.jsonl``, ``part-{first + 1}.jsonl``, ... of ``per_file`` words each
    (one micro-batch each with ``maxFilesPerTrigger`` 1)."""
    for i, start in enumerate(range(0, len(words), per_file)):
        write_words(directory, f"part-{first + i}.jsonl", words[start:start + per_file])


def expected_counts(directory: Path) -> Counter:
    counts: Counter = Counter()
    for path in directory.glob("*.jsonl"):
        counts.update(json.loads(line)["word"] for line in path.read_text().splitlines())
    return counts


def counters(service: FunctionService, name: str) -> dict[str, int]:
    state = service.registry.state_store("public", "default", name)
    return {e.key: e.counter for e in state.scan_entries()}


def register(service, name, inputs, output=None, code=WORDCOUNT, **extra):
    config = {"tenant": "public", "namespace": "default", "name": name, "inputs": [str(inputs)],
              "keyField": "word", "parallelism": 2, **extra}
    if output:
        config["output"] = str(output)
    service.registry.create(config, code)


# Per backend: distinct keys per input file (one file per micro-batch, two partitions), so that on
# ZooKeeper (1000 keys per transaction) and etcd (27) each (batch, partition) needs several
# transactions and goes through the staged commit of statekeep.state.metadata.staged.
KEYS_PER_FILE = {"local": 100, "etcd": 240, "zk": 2_400}


def backend_store(backend: str, request, tmp_path) -> tuple[str, list[str]]:
    """The store URL for ``backend`` and the localrun options that select it."""
    if backend == "local":
        return f"local://{tmp_path / 'data'}", ["--data-dir", str(tmp_path / "data")]
    server = request.getfixturevalue("zk_server" if backend == "zk" else "etcd_server")
    url = f"{backend}://{server.address}/spark{os.urandom(4).hex()}"
    return url, ["--store", url, "--checkpoint-dir", str(tmp_path / "checkpoints")]


def run_once(service, spark, tmp_path, name):
    query = run_registered(service, f"local://{tmp_path / 'data'}", "public", "default", name,
                           checkpoint_root=str(tmp_path / "checkpoints"), once=True, spark=spark)
    query.await_termination()
    return query


def kill_driver_then_rerun(backend: str, request, tmp_path: Path, py: Path, spark_env: dict[str, str],
                           extra: list[str] = (), spark=None) -> tuple[str, list[str], Path]:
    """Run function file ``py`` with localrun on ``backend`` (one input file per micro-batch; ``spark_env``:
    the fixture; ``extra``: more localrun options), SIGKILL the driver and its JVM (PySpark's daemon then
    ends the Python workers) after two micro-batches, run it again to the end; returns (store URL, the input words, the
    output directory). The rerun is localrun's again (it takes the lock the killed driver held), or with ``spark``
    (the shared session) the registered function run on that session from the same checkpoint: one driver fewer."""
    inputs, out = tmp_path / "in", tmp_path / "out"
    url, where = backend_store(backend, request, tmp_path)
    per = KEYS_PER_FILE[backend]
    words = [f"w{i % (per + 3)}" for i in range(6 * per)]
    for part in range(6):
        write_words(inputs, f"part-{part}.jsonl", words[part * per:(part + 1) * per])
    command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", "crash",
               "--py", str(py), "--inputs", str(inputs), "--key-field", "word",
               "--parallelism", "2", "--output", str(out), *where, "--once",
               "--user-config", json.dumps({"inputOptions": {"maxFilesPerTrigger": "1"}}), *extra]
    env = {**os.environ, **spark_env}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    with FunctionService.open(url) as service:
        assert wait_for(lambda: (read_status(service.registry.store, "public", "default", "crash") or {})
                        .get("batches", 0) >= 2 or first.poll() is not None, timeout=300)
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
    first.wait()
    assert first.returncode == -signal.SIGKILL  # killed mid-run, not ended on its own
    if spark is not None:  # localrun's checkpoints: under its data dir, else under --checkpoint-dir
        checkpoints = tmp_path / ("data" if backend == "local" else "") / "checkpoints"
        with FunctionService.open(url) as service:
            run_registered(service, url, "public", "default", "crash", checkpoint_root=str(checkpoints), once=True,
                           spark=spark).await_termination()
        return url, words, out
    time.sleep(1)
    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    return url, words, out
