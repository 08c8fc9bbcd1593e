"""``process_batch`` functions on Spark: exact, outputs once, and exact after SIGKILL of the driver."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from test_functions_spark import (
    EXAMPLE,
    KEYS_PER_FILE,
    backend_store,
    counters,
    expected_counts,
    register,
    run_once,
    write_words,
)

from statekeep.functions.service import FunctionService
from statekeep.functions.spark import read_status
from statekeep.testing import wait_for

WORDCOUNT_BATCH = (EXAMPLE / "wordcount_batch.py").read_bytes()


def output_counts(out) -> dict[str, int]:
    """The last count output for each word (outputs are per (batch, partition): later batches last)."""
    last: dict[str, int] = {}
    for path in sorted(out.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            last[row["word"]] = row["count"]
    return last


def test_vectorized_word_count_exact_and_restart_continues(spark, tmp_path):
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    for part in EXAMPLE.glob("input/*.jsonl"):
        shutil.copy(part, inputs / part.name)
    with FunctionService.open(f"local://{tmp_path / 'data'}") as service:
        register(service, "wcb", inputs, out, code=WORDCOUNT_BATCH,
                 userConfig={"inputOptions": {"maxFilesPerTrigger": "1"}})
        query = run_once(service, spark, tmp_path, "wcb")
        assert counters(service, "wcb") == expected_counts(inputs)
        status = read_status(service.registry.store, "public", "default", "wcb")
        assert status["processed"] == 1200 and status["batches"] == 3 and status["error"] is None
        assert query.totals["outputs"] == sum(1 for p in out.glob("*.jsonl") for _ in p.read_text().splitlines())
        write_words(inputs, "more.jsonl", ["state"] * 7 + ["brand-new"] * 3)
        run_once(service, spark, tmp_path, "wcb")  # only the new file
        assert counters(service, "wcb") == expected_counts(inputs)
        assert output_counts(out) == expected_counts(inputs)


@pytest.mark.parametrize("backend", ["local", "zk", "etcd"])
def test_sigkill_of_the_driver_then_rerun_is_exact(backend, request, tmp_path):
    """As tests/test_functions_spark.py's test of the same name, with wordcount_batch.py (on ZooKeeper
    and etcd each (batch, partition) needs several transactions: the staged commit)."""
    inputs, out = tmp_path / "in", tmp_path / "out"
    url, where = backend_store(backend, request, tmp_path)
    per = KEYS_PER_FILE[backend]
    words = [f"w{i % (per + 3)}" for i in range(6 * per)]
    for part in range(6):
        write_words(inputs, f"part-{part}.jsonl", words[part * per:(part + 1) * per])
    command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", "crash",
               "--py", str(EXAMPLE / "wordcount_batch.py"), "--inputs", str(inputs), "--key-field", "word",
               "--parallelism", "2", "--output", str(out), *where, "--once",
               "--user-config", json.dumps({"inputOptions": {"maxFilesPerTrigger": "1"}})]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    with FunctionService.open(url) as service:
        assert wait_for(lambda: (read_status(service.registry.store, "public", "default", "crash") or {})
                        .get("batches", 0) >= 2 or first.poll() is not None, timeout=300)
    os.killpg(first.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers
    first.wait()
    time.sleep(1)
    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    with FunctionService.open(url) as service:
        assert counters(service, "crash") == Counter(words)
    # each (batch, partition)'s output exists once, so the newest count of each word is its total
    assert output_counts(out) == Counter(words)
