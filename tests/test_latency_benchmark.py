"""The latency benchmark's arithmetic (benchmarks/latency.py): nearest-rank percentiles, the per-rate summary,
and the consumer that turns ``(key, count)`` output rows into per-message latencies. Pure Python, no Spark.

``benchmarks`` is not an installed package: this module puts the repository root on ``sys.path`` (only if it is
missing) and imports ``benchmarks.latency`` as a module of a namespace package."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import latency  # noqa: E402


def test_percentile_is_nearest_rank():
    values = list(range(100, 0, -1))  # 1..100, unordered
    assert latency.percentile(values, 50) == 50
    assert latency.percentile(values, 90) == 90
    assert latency.percentile(values, 99) == 99
    assert latency.percentile(values, 100) == 100
    assert latency.percentile([0.3, 0.1, 0.2], 50) == 0.2
    assert latency.percentile([0.3, 0.1, 0.2], 99) == 0.3  # few values: p99 is the max, never interpolated
    assert latency.percentile([7.0], 1) == 7.0


@pytest.mark.parametrize("values,q", [([], 50), ([1.0], 0), ([1.0], 101)])
def test_percentile_refuses_no_values_and_q_out_of_range(values, q):
    with pytest.raises(ValueError):
        latency.percentile(values, q)


def test_summary_rate_spans_first_produce_to_last_read():
    row = latency.summarize([0.1, 0.2, 0.4, 0.8], produced=5, first_produced=100.0, last_read=102.0)
    assert (row["produced"], row["read"], row["rate"]) == (5, 4, 2.0)
    assert (row["p50"], row["p90"], row["p99"], row["max"]) == (0.2, 0.8, 0.8, 0.8)
    empty = latency.summarize([], produced=3, first_produced=1.0, last_read=1.0)
    assert empty["rate"] == 0.0 and math.isnan(empty["p99"])


def test_consumer_marks_every_message_up_to_the_count_once():
    produced = {("a", 1): 10.0, ("a", 2): 10.5, ("a", 3): 11.0, ("b", 1): 10.25}
    consumer = latency.Consumer(produced)
    consumer.rows([("a", 2)], now=12.0)  # a's first two messages are readable now
    assert consumer.read == {("a", 1): 2.0, ("a", 2): 1.5}
    consumer.rows([("a", 1), ("a", 2), ("b", 1)], now=13.0)  # a row seen again (a replayed batch) changes nothing
    assert consumer.read == {("a", 1): 2.0, ("a", 2): 1.5, ("b", 1): 2.75}
    consumer.rows([("a", 3)], now=11.25)
    assert consumer.read[("a", 3)] == 0.25


def test_output_rows_of_a_topic_message_and_of_a_plain_row():
    message = {"value": json.dumps({"k": "k1", "n": 3}), "key": "k1", "publishTime": 1}
    assert latency.output_rows(json.dumps(message)) == ("k1", 3)
    assert latency.output_rows(json.dumps({"value": {"k": "k2", "n": 4}})) == ("k2", 4)
    assert latency.output_rows('{"k": "k3", "n": 5}') == ("k3", 5)


def test_rounds_pool_every_messages_latency_and_keep_the_lowest_rate():
    def report(latencies, rate, first):
        row = {**latency.summarize(latencies, len(latencies) + 1, 0.0, len(latencies) / rate), "latencies": latencies}
        return {"first_output": first, "rates": {10.0: row}}

    one = latency.pooled([report([0.1, 0.2, 0.9], 3.0, 1.0), report([0.3, 0.4], 2.0, 3.0)])
    row = one["rates"][10.0]
    assert (row["produced"], row["read"], row["rate"]) == (7, 5, 2.0)  # produced and read add up; the lowest rate
    assert (row["p50"], row["max"]) == (0.3, 0.9)  # over the five messages, not an average of two rounds' values
    assert one["first_output"] == 2.0


def test_rounds_profile_is_each_steps_median_over_rounds():
    rounds = [[("latestOffset", 10.0), ("addBatch", 50.0)], [("latestOffset", 30.0), ("addBatch", 70.0)],
              [("addBatch", 60.0), ("latestOffset", 20.0)]]
    assert latency.median_rows(rounds) == [("latestOffset", 20.0), ("addBatch", 60.0)]
