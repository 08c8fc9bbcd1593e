"""``process_batch(records, context)`` and the context's bulk state operations, without Spark:
one partition of one micro-batch through the same runtime path (applied marker + apply_batch)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from statekeep.errors import InvalidArgumentError
from statekeep.functions.executor.context import Context
from statekeep.state.buffer import BufferedState
from statekeep.functions.executor.errors import FunctionRecordError
from statekeep.functions.config.spec import RecordFormat
from statekeep.functions.executor.tables import records_table
from support.specs import run_partition
from statekeep.state import open_provider

WORDCOUNT_BATCH = (Path(__file__).parent.parent / "examples" / "wordcount" / "wordcount_batch.py").read_text()


@pytest.fixture
def spec(tmp_path):
    return {"tenant": "public", "namespace": "default", "name": "wc", "code": WORDCOUNT_BATCH,
            "py_name": "wordcount_batch.py", "state_provider": "embedded",
            "state_config": {"metadata_url": f"local://{tmp_path}/data"}, "input_format": "json",
            "output": None, "user_config": {}}


def state_store(spec):
    return open_provider(spec["state_provider"], spec["state_config"]).get_state_store("public", "default", "wc")


def counters(spec) -> dict:
    return {e.key: e.counter for e in state_store(spec).scan_entries()}


def lines(words):
    return [json.dumps({"word": w, "n": i}) for i, w in enumerate(words)]


def test_vectorized_word_count_is_exact_and_a_replay_is_skipped(spec):
    words = ["a", "b", "a", "c", "a", "b"]
    stats = run_partition(spec, 0, 0, lines(words))
    assert (stats.processed, stats.applied) == (6, True)
    assert counters(spec) == {"a": 3, "b": 2, "c": 1}
    assert run_partition(spec, 0, 0, lines(words)).applied is False  # the same (batch, partition) again
    assert run_partition(spec, 1, 0, pa.array(lines(["a", "d"]))).processed == 2
    assert counters(spec) == {"a": 4, "b": 2, "c": 1, "d": 1}
    # the changelog has a record per change, as for process()
    assert [r.key for r in state_store(spec).read_changelog()][-2:] in (["a", "d"], ["d", "a"])


def test_outputs_written_once_per_batch_and_partition(spec, tmp_path):
    code = '''
import pyarrow.compute as pc
def process_batch(records, context):
    return records.filter(pc.greater(records["n"], 0)).select(["word"])
'''
    spec = {**spec, "code": code, "output": str(tmp_path / "out")}
    run_partition(spec, 7, 1, lines(["x", "y", "z"]))
    run_partition({**spec, "code": code + "\n"}, 7, 1, lines(["x", "y", "z"]))  # a replay (skipped)
    files = list((tmp_path / "out").iterdir())
    assert [re.sub(r"@\d{13}\.", "@MS.", f.name) for f in files] == [
        "batch-000000000007-part-00001-out-public.default.wc@MS.jsonl"]
    assert [json.loads(x) for x in files[0].read_text().splitlines()] == [{"word": "y"}, {"word": "z"}]


@pytest.mark.parametrize("result, ok", [("pa.table({'a': [1]})", True), ("pa.record_batch({'a': [1]})", True),
                                        ("[{'a': 1}]", True), ("None", True), ("{'a': 1}", False),
                                        ("[1, 2]", False), ("'text'", False)])
def test_return_types(spec, result, ok):
    code = f"import pyarrow as pa\ndef process_batch(records, context):\n    return {result}\n"
    spec = {**spec, "code": code}
    if ok:
        assert run_partition(spec, 0, 0, lines(["a"])).outputs == (0 if result == "None" else 1)
    else:
        with pytest.raises(FunctionRecordError, match=r"public/default/wc process_batch failed on batch 4, "
                                                      r"partition 2 \(1 records\): TypeError: process_batch returned"):
            run_partition(spec, 4, 2, lines(["a"]))


def test_mismatched_lengths_fail_the_batch_naming_it_and_write_nothing(spec):
    code = "def process_batch(records, context):\n    context.incr_counters(['a', 'b'], [1])\n"
    with pytest.raises(FunctionRecordError, match=r"wc process_batch failed on batch 3, partition 1 .*"
                                                  r"incr_counters: 2 keys but 1 amounts"):
        run_partition({**spec, "code": code}, 3, 1, lines(["a"]))
    assert counters(spec) == {}
    stats = run_partition({**spec, "code": code, "skip_errors": True}, 3, 1, lines(["a", "b"]))
    assert (stats.processed, stats.skipped, stats.applied) == (0, 2, True) and "2 keys but 1 amounts" in stats.errors[0]
    assert counters(spec) == {}


def test_malformed_json_names_the_record(spec):
    with pytest.raises(FunctionRecordError, match="batch 0, partition 0, record 1: JSONDecodeError"):
        run_partition(spec, 0, 0, [json.dumps({"word": "a"}), '{"word": "cut'])


def test_records_table_shapes():
    assert records_table(["hello world", "x"], RecordFormat("text")).to_pydict() == {"value": ["hello world", "x"]}
    table = records_table(['{"word": "a", "n": 1}', '{"word": "b"}'], RecordFormat("json"))
    assert table.to_pylist() == [{"word": "a", "n": 1}, {"word": "b", "n": None}]
    assert records_table(['{"a": 1}', "5"], RecordFormat("json")).to_pylist() == [{"a": 1, "value": None},
                                                                                 {"a": None, "value": 5}]
    assert records_table(pa.chunked_array([pa.array(['{"a": 1}']), pa.array(['{"a": 2}'])]),
                         RecordFormat("json")).num_rows == 2
    assert records_table([], RecordFormat("json")).num_rows == 0


@pytest.fixture
def context(tmp_path):
    store = open_provider("embedded", {"metadata_url": f"local://{tmp_path}/ctx"}).get_state_store("t", "n", "f")
    store.incr("seen", 10)
    store.put("blob", b"bytes")
    state = BufferedState(store.fetch_many, 100)
    return Context("t", "n", "f", state), store, state


def test_bulk_ops(context):
    ctx, store, _ = context
    assert ctx.incr_counters(pa.array(["a", "b", "a", "seen"]), 2) is None
    assert ctx.get_counters(["a", "b", "seen"]) == [4, 2, 12]
    ctx.incr_counters(["a", "c"], pa.array([5, -1], pa.int64()))
    assert ctx.get_counters(pa.chunked_array([["a", "b"], ["c", "seen", "none"]])) == [9, 2, -1, 12, 0]
    ctx.put_states(["s1", "s2"], [b"x", "y"])
    assert ctx.get_states(("s1", "s2", "none", "blob")) == [b"x", b"y", None, b"bytes"]
    ctx.del_states(["s1", "a"])
    assert ctx.get_states(["s1"]) == [None] and ctx.get_counters(["a"]) == [0]
    ctx.incr_counters(["a"])  # after a delete, counting restarts
    assert ctx.get_counters(["a"]) == [1] and ctx.incr_counter("a", 1) == 2
    assert ctx.get_counter("b") == 2 and ctx.get_state("s2") == b"y"  # the per-key API sees the same buffer
    assert store.get_counter("a") == 0  # nothing written before the batch's apply


@pytest.mark.parametrize("call, message", [
    (lambda c: c.incr_counters(["a", "b"], [1, 2, 3]), "incr_counters: 2 keys but 3 amounts"),
    (lambda c: c.incr_counters(["a"], [1.5]), "must be an int, not float"),
    (lambda c: c.incr_counters(["a"], [True]), "must be an int, not bool"),
    (lambda c: c.incr_counters("abc", 1), "keys must be a sequence of str, not one str"),
    (lambda c: c.incr_counters(5, 1), "keys must be a sequence of str, not int"),
    (lambda c: c.incr_counters(["a", None], 1), "incr_counters: a state key must be a str"),
    (lambda c: c.incr_counters(["a", "a"], [1, (1 << 63) - 1]), "'a' would overflow"),
    (lambda c: c.put_states(["a"], [b"x", b"y"]), "put_states: 1 keys but 2 values"),
    (lambda c: c.put_states(["a"], [3]), "bytes or str, not int"),
    (lambda c: c.put_states(["a", "b"], [b"x", b"y" * 101]), "ValueTooLarge|too large|101"),
    (lambda c: c.get_counters(["blob"]), "'blob' holds bytes"),
    (lambda c: c.del_states(["ok", ""]), "del_states: a state key must not be empty"),
])
def test_bulk_ops_refuse_bad_input_and_change_nothing(context, call, message):
    ctx, _, state = context
    with pytest.raises(Exception, match=message) as info:
        call(ctx)
    assert isinstance(info.value, (InvalidArgumentError, ValueError)) or "ValueTooLarge" in type(info.value).__name__
    assert state.puts == {} and state.counter_deltas == {}  # all or nothing


def test_vectorized_word_count_on_the_metadata_provider(spec, tmp_path):
    """The same runtime path on the portable provider (ZooKeeper and etcd use it as well)."""
    spec = {**spec, "state_provider": "metadata", "state_config": {"metadata_url": f"memory://batch-{tmp_path.name}"}}
    words = [f"w{i % 7}" for i in range(50)]
    assert run_partition(spec, 0, 1, lines(words)).applied
    assert not run_partition(spec, 0, 1, lines(words)).applied
    assert counters(spec) == dict(Counter(words))


INCR_AND_ECHO = '''
import pyarrow as pa
def process_batch(records, context):
    context.incr_counters(records["word"], 1)
    return pa.table({"word": records["word"]})
'''


@pytest.mark.parametrize("skip_errors", [False, True])
def test_stored_values_refusing_bulk_increments_fail_the_batch_whole(spec, tmp_path, skip_errors):
    """incr_counters reads nothing: a key holding bytes, or a stored counter it would overflow,
    is refused by the batch's write, which names the function and batch and writes nothing."""
    store = state_store(spec)
    store.put("blob", b"bytes")
    store.set_counter("big", (1 << 63) - 2)
    spec = {**spec, "code": INCR_AND_ECHO, "skip_errors": skip_errors, "output": str(tmp_path / "out")}
    for batch, bad in enumerate(["blob", "big"]):
        words = ["ok", bad, "big"]
        if skip_errors:
            stats = run_partition(spec, batch, 5, lines(words))
            assert (stats.processed, stats.skipped, stats.outputs, stats.applied) == (0, 3, 0, True)
            assert f"process_batch: the state changes of batch {batch}, partition 5 were refused" in stats.errors[0]
            assert not run_partition(spec, batch, 5, lines(words)).applied  # its marker was written
            assert not list((tmp_path / "out").glob("*.jsonl"))  # nor its outputs
        else:
            with pytest.raises(FunctionRecordError, match=f"wc process_batch: the state changes of batch {batch}, "
                                                          r"partition 5 were refused \(nothing written\)"):
                run_partition(spec, batch, 5, lines(words))
    assert counters(spec) == {"blob": None, "big": (1 << 63) - 2}


PER_RECORD_ECHO = "def process(input, context):\n    return {'word': input['word']}\n"
BATCH_ECHO = "def process_batch(records, context):\n    return records.select(['word'])\n"


def test_process_batch_output_to_a_topic_goes_to_the_topic_as_per_record_output_does(spec, tmp_path, monkeypatch):
    """A ``persistent://`` output of a ``process_batch`` function is the topic under the topics root, as for
    a per-record function: its rows are the topic's messages, and nothing is written to a literal
    ``persistent:`` directory under the working directory (issue 31, defect 1)."""
    from statekeep.functions.messaging import topics
    from statekeep.functions.messaging.columns import payload

    monkeypatch.chdir(tmp_path)
    root, topic = str(tmp_path / "topics"), "persistent://public/default/out"
    spec = {**spec, "output": topic, "topics_dir": root}
    run_partition({**spec, "code": BATCH_ECHO}, 0, 0, lines(["x", "y"]))
    batch_messages = [json.loads(payload(m)) for m in topics.read(root, topic)]
    assert batch_messages == [{"word": "x"}, {"word": "y"}]
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("persistent")]
    run_partition({**spec, "name": "echo", "code": PER_RECORD_ECHO}, 0, 0, lines(["x", "y"]))
    both = list(topics.read(root, topic))
    assert [json.loads(payload(m)) for m in both] == batch_messages * 2  # the same messages from either path
    assert {tuple(sorted(m)) for m in both} == {("publishTime", "value")}
    assert sorted(re.sub(r"@\d{13}\.", "@MS.", p.name) for p in Path(topics.directory(root, topic)).iterdir()) == [
        "batch-000000000000-part-00000-out-public.default.echo@MS.jsonl",
        "batch-000000000000-part-00000-out-public.default.wc@MS.jsonl"]
