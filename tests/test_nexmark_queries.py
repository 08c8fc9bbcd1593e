"""The Nexmark queries of examples/nexmark/ run as statekeep functions on Spark (each step once to the end of
its input, as ``localrun --once``) over a small generated stream, each output equal to the plain-Python
reference of benchmarks/nexmark_model/reference.py; the ``process_batch`` and ``windowConfig`` variants too, and
a few queries with partition-owned state (``--state-dir``); and the benchmark's Spark SQL variants adapted
furthest from the reference SQL, and its report of a query Spark refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.nexmark_model import generator, pipelines, reference  # noqa: E402

# 150 s of event time at 20 events/s: 10 s windows and sessions close; three micro-batches of 1000 events
CONFIG = generator.NexmarkConfig(seed=3, num_events=3000, first_event_rate=20)


@pytest.fixture(scope="module")
def stream(tmp_path_factory):
    data = tmp_path_factory.mktemp("nexmark")
    generator.write_jsonl(CONFIG, data, 1000, per_stream=True)
    side = reference.side_input()
    (data / "side.csv").write_text("".join(f"{k},{v}\n" for k, v in side.items()))
    return data, list(generator.events(CONFIG)), side


def check(spark, stream, tmp_path, query, **options):
    data, events, side = stream
    _, outputs = pipelines.run(spark, query, data, tmp_path, side_input=data / "side.csv", **options)
    expected = reference.expected(query, events, side)
    assert expected, f"{query}: the reference is empty on this stream, so the test would prove nothing"
    assert reference.result(query, outputs) == expected


@pytest.mark.parametrize("query", pipelines.QUERIES)
def test_query_equals_the_reference(spark, stream, tmp_path, query):
    check(spark, stream, tmp_path, query)


@pytest.mark.parametrize("query", [q for q, p in pipelines.PIPELINES.items() if p.batch])
def test_process_batch_variant_equals_the_reference(spark, stream, tmp_path, query):
    check(spark, stream, tmp_path, query, batch=True)


@pytest.mark.parametrize("query", [q for q, p in pipelines.PIPELINES.items() if p.windowed])
def test_window_config_variant_equals_the_reference(spark, stream, tmp_path, query):
    check(spark, stream, tmp_path, query, windowed=True)


@pytest.mark.parametrize("query", ["q3", "q11", "q15"])  # a join, session windows, state without a key field
def test_partition_owned_state_equals_the_reference(spark, stream, tmp_path, query):
    check(spark, stream, tmp_path, query, state_dir=True)


@pytest.mark.parametrize("query", ["q5", "q8", "q9", "q15"])  # the Spark SQL variants adapted furthest
def test_spark_sql_variant_equals_the_reference(spark, stream, tmp_path, query):
    from benchmarks import nexmark

    data, events, side = stream
    _, rows = nexmark.run_spark(spark, query, data, tmp_path, data / "side.csv")
    assert reference.result(query, rows) == reference.expected(query, events, side)


def test_spark_sql_refusal_is_reported(spark, stream, tmp_path):
    from benchmarks import nexmark

    data, _, _ = stream
    with pytest.raises(nexmark.SparkRefuses, match="AnalysisException"):
        nexmark.run_spark(spark, "q4", data, tmp_path, data / "side.csv")
