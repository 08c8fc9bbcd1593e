"""``process_batch`` functions on Spark: exact, outputs once, and exact after SIGKILL of the driver."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest
from support.spark import (
    EXAMPLE,
    counters,
    expected_counts,
    kill_driver_then_rerun,
    register,
    run_once,
    write_words,
)

from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import read_status

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


@pytest.mark.parametrize("backend", ["etcd"])  # the staged commit path's driver kill (embedded: test_functions_spark)
def test_sigkill_of_the_driver_then_rerun_is_exact(backend, request, tmp_path, spark_env, spark):
    """As tests/test_functions_spark.py's test of the same name, with wordcount_batch.py (on ZooKeeper
    and etcd each (batch, partition) needs several transactions: the staged commit), rerun on the shared
    session (localrun's own rerun is that test's)."""
    url, words, out = kill_driver_then_rerun(backend, request, tmp_path, EXAMPLE / "wordcount_batch.py", spark_env,
                                             spark=spark)
    with FunctionService.open(url) as service:
        assert counters(service, "crash") == Counter(words)
    # each (batch, partition)'s output exists once, so the newest count of each word is its total
    assert output_counts(out) == Counter(words)
