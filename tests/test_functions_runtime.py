"""One partition of one micro-batch, without Spark: bad records fail with their position, or are
skipped and counted; either way a failed partition writes nothing and a skipped record changes nothing."""

from __future__ import annotations

import json

import pytest

from statekeep.errors import InvalidArgumentError
from statekeep.functions.executor.errors import FunctionRecordError
from support.specs import run_partition
from statekeep.state import open_provider

COUNT = '''
def process(input, context):
    context.incr_counter(input["word"], 1)
'''
LONG_WORD = "w" * 1000  # longer than a state key may be


@pytest.fixture
def spec(tmp_path):
    return {"tenant": "public", "namespace": "default", "name": "wc", "code": COUNT, "py_name": "wc.py",
            "state_provider": "embedded", "state_config": {"metadata_url": f"local://{tmp_path}"},
            "input_format": "json", "output": None, "user_config": {}}


def state_of(spec):
    store = open_provider(spec["state_provider"], spec["state_config"]).get_state_store("public", "default", "wc")
    return {e.key: e.counter for e in store.scan_entries()}, store


LINES = [json.dumps({"word": "ok"}), '{"word": "cut', json.dumps({"word": LONG_WORD}),
         json.dumps({"word": "blob"}), json.dumps({"word": "ok"})]
KEYS = {"ok", LONG_WORD, "blob"}


def test_bad_records_are_skipped_and_counted_when_configured(spec):
    _, store = state_of(spec)
    store.put("blob", b"not a counter")
    stats = run_partition({**spec, "skip_errors": True}, 0, 0, LINES, KEYS)
    assert (stats.processed, stats.skipped) == (2, 3)
    assert "record 1: JSONDecodeError" in stats.errors[0]
    assert "too long" in stats.errors[1] and "holds bytes" in stats.errors[2]
    counters, store = state_of(spec)
    assert counters == {"ok": 2, "blob": None} and store.get("blob") == b"not a counter"


@pytest.mark.parametrize("bad_line, position, reason", [(1, 1, "JSONDecodeError"), (2, 1, "too long")])
def test_a_bad_record_fails_the_partition_with_its_position(spec, bad_line, position, reason):
    lines = [LINES[0], LINES[bad_line], LINES[4]]
    with pytest.raises(FunctionRecordError, match=f"batch 3, partition 1, record {position}: .*{reason}"):
        run_partition(spec, 3, 1, lines, KEYS)
    assert state_of(spec)[0] == {}  # the failed partition wrote nothing
    assert run_partition(spec, 3, 1, [LINES[0], LINES[4]], {"ok"}).processed == 2  # its replay applies
    assert state_of(spec)[0] == {"ok": 2}


def test_record_keys_not_one_per_record_are_refused_before_anything_runs(spec):
    with pytest.raises(InvalidArgumentError, match="record_keys has 1 keys for 2 records"):
        run_partition(spec, 0, 0, [LINES[0], LINES[4]], record_keys=["ok"])
    assert state_of(spec)[0] == {}


PUT_REPEATED = '''
def process(input, context):
    context.put_state(input["word"], input["word"] * input["n"])
'''


@pytest.mark.parametrize("skip_errors", [True, False])
def test_a_value_over_the_store_limit_fails_its_own_record(spec, skip_errors):
    spec = {**spec, "code": PUT_REPEATED, "skip_errors": skip_errors,
            "state_config": {"metadata_url": spec["state_config"]["metadata_url"] + "?max_value_size=100"}}
    lines = [json.dumps({"word": w, "n": n}) for w, n in [("a", 3), ("b", 101), ("c", 1)]]
    _, store = state_of(spec)
    if skip_errors:
        stats = run_partition(spec, 0, 0, lines, {"a", "b", "c"})
        assert (stats.processed, stats.skipped) == (2, 1) and "record 1: ValueTooLargeError" in stats.errors[0]
        assert {e.key: e.value for e in store.scan_entries()} == {"a": b"aaa", "c": b"c"}
    else:
        with pytest.raises(FunctionRecordError, match="record 1: ValueTooLargeError.*101 bytes"):
            run_partition(spec, 0, 0, lines, {"a", "b", "c"})
        assert list(store.scan_entries()) == []


def test_the_stats_row_holds_every_field_and_imports_no_pandas():
    """A partition's stats row (what the driver collects) carries each field as typed, errors and metrics as
    text; making it does not import pandas, which a per-record function never needs (0.3 s per new worker)."""
    import subprocess
    import sys

    script = '''
import json, sys
from statekeep.functions.executor.path import PartitionStats
from statekeep.functions.executor.task import _stats_batch, STATS_COLUMNS
stats = PartitionStats(3, processed=5, applied=False, errors=["a\\nb", "c"], latency=0.25,
                       metrics={"m": [1.5, 2, 0.5]}, watermark=-7)
batch = _stats_batch(stats)
types = [str(t) for t in batch.schema.types]
print(json.dumps({"row": batch.to_pylist(), "pandas": "pandas" in sys.modules, "types": types}))
'''
    out = json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout)
    assert out["pandas"] is False
    [row] = out["row"]
    assert row["partition"] == 3 and row["processed"] == 5 and row["applied"] is False and row["latency"] == 0.25
    assert row["error"] == "a\nb\nc" and json.loads(row["metrics"]) == {"m": [1.5, 2, 0.5]}
    assert row["watermark"] == -7 and row["next_event"] is None and row["exceptions"] is None
    assert out["types"][:5] == ["int64", "int64", "int64", "int64", "bool"]
