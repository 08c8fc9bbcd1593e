"""The record path itself (issue 31): every entry point x every state provider (embedded, metadata on
memory://, ZooKeeper and etcd, partitioned on a file URL) x output to a topic and to a directory gives the
same results, those of a plain-Python model of the function.

Each cell registers the function, builds its executor spec as the driver does (``executor_spec``, then the
query's layout as ``function_plan`` sets it) and feeds one partition's records to ``arrow_partition_runner``
as Spark hands them (Arrow record batches of ``__record``/``__key``, the micro-batch's id a task property), with
no Spark session; ``trigger`` runs the same function one record
at a time. What comes out (the output's records, the function's user state, dead letters and the stats row)
is compared with the model."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
from collections import Counter, defaultdict

import pyarrow as pa
import pytest

from statekeep.functions.admin import lifecycle
from statekeep.functions.messaging import columns
from statekeep.functions.executor.task import SPARK_BATCH_ID, SPARK_QUERY_ID, arrow_partition_runner
from statekeep.functions.windowing.timerun import routing
from statekeep.functions.config.service import FunctionService
from statekeep.functions.config.spec import Layout, executor_spec
from statekeep.functions.messaging.topics import directory
from statekeep.state.partitioned import state_storage
from conftest import BACKENDS

KEYS = ["a", "b", "a", "c", "a", "b", "c", "a"]
TS = [100, 104, 112, 118, 125, 131, 139, 147]  # the watermark ends at 147: no window end or timer on it
RECORDS = [{"k": k, "v": i + 1, "ts": ts} for i, (k, ts) in enumerate(zip(KEYS, TS))]
BAD = 3  # the record the careful function fails on

COUNT = '''
def process(input, context):
    context.incr_counter(input["k"], 1)
    return {"k": input["k"], "n": context.get_counter(input["k"])}
'''
NATIVE = '''
def process(input):
    return {"k": input["k"], "n": input["v"]}
'''
CLASS = '''
from pulsar import Function

class Count(Function):
    def process(self, input, context):
        context.incr_counter(input["k"], 1)
        return {"k": input["k"], "n": context.get_counter(input["k"])}
'''
BATCH = '''
def process_batch(records, context):
    context.incr_counters(records.column("k"), [1] * records.num_rows)
    return records.select(["k", "v"])
'''
COUNT_WINDOW = '''
def process(records, context):
    return {"k": context.get_window().key, "n": sum(r["v"] for r in records)}
'''
TIME_WINDOW = '''
def process(records, context):
    window = context.get_window()
    return {"k": window.key, "n": sum(r["v"] for r in records), "start": window.start}
'''
TIMERS = '''
def process(input, context):
    context.register_timer(input["ts"] + 5)
    context.incr_counter(input["k"], 1)

def on_timer(key, ts, context):
    return {"k": key, "n": context.get_counter(key), "at": ts}
'''
CAREFUL = COUNT.replace("    context.incr", f'    if input["v"] == {BAD}:\n        raise ValueError("bad")\n'
                                           "    context.incr", 1)


def counting(records):
    """COUNT's model: each record's running count; the counts."""
    counts: Counter[str] = Counter()
    out = []
    for r in records:
        counts[r["k"]] += 1
        out.append({"k": r["k"], "n": counts[r["k"]]})
    return out, dict(counts)


def count_windows(records):
    buffered, out = defaultdict(list), []
    for r in records:
        buffered[r["k"]].append(r["v"])
        if len(buffered[r["k"]]) == 2:
            out.append({"k": r["k"], "n": sum(buffered.pop(r["k"]))})
    return out, {}


def time_windows(records):
    watermark, windows = max(r["ts"] for r in records), defaultdict(int)
    for r in records:
        windows[r["k"], r["ts"] // 20 * 20] += r["v"]
    return [{"k": k, "n": n, "start": s} for (k, s), n in windows.items() if s + 20 <= watermark], {}


def timers(records, one_by_one=False):
    """TIMERS' model: after each batch (each record with ``one_by_one``) the timers the watermark reached
    fire with the key's count at that time."""
    counts: Counter[str] = Counter()
    pending, out, watermark = set(), [], None
    batches = [[r] for r in records] if one_by_one else [records]
    for batch in batches:
        for r in batch:
            counts[r["k"]] += 1
            pending.add((r["k"], r["ts"] + 5))
        watermark = max([r["ts"] for r in batch] + ([watermark] if watermark is not None else []))
        for key, at in sorted(p for p in pending if p[1] <= watermark):
            out.append({"k": key, "n": counts[key], "at": at})
            pending.discard((key, at))
    return out, dict(counts)


def careful(records):
    out, counts = counting([r for r in records if r["v"] != BAD])
    return out, counts


# entry point -> (code, extra config, model(records) -> (outputs, user state))
ENTRIES = {
    "record": (COUNT, {}, counting),
    "native": (NATIVE, {}, lambda records: ([{"k": r["k"], "n": r["v"]} for r in records], {})),
    "class": (CLASS, {"className": "f.Count"}, counting),
    "process_batch": (BATCH, {}, lambda records: ([{"k": r["k"], "v": r["v"]} for r in records],
                                                  dict(Counter(r["k"] for r in records)))),
    "count_window": (COUNT_WINDOW, {"windowConfig": {"windowLengthCount": 2}}, count_windows),
    "time_window": (TIME_WINDOW, {"windowConfig": {"windowLengthDurationMs": 20}}, time_windows),  # the bulk loop
    "timers": (TIMERS, {}, timers),
    "retries_dead_letters": (CAREFUL, {"maxMessageRetries": 1}, careful),
    "trigger": (COUNT, {}, counting),
    "trigger_timers": (TIMERS, {}, lambda records: timers(records, one_by_one=True)),
}
#: a server backend's cells land in its own tier (conftest); the fast tier runs the others
PROVIDERS = ["embedded-local", "metadata-memory", "partitioned-local", "metadata-zk", "metadata-etcd"]
OUTPUTS = ["topic", "directory"]


@pytest.fixture
def function(request, tmp_path, monkeypatch):
    """``create(entry, output)``: the function of ``entry`` registered on the provider of the test's
    parameter, its output a topic or a directory; yields ``(registry, url, create)``."""
    monkeypatch.setenv("STATEKEEP_TOPICS_DIR", str(tmp_path / "topics"))
    provider, backend = request.param.split("-")
    url = BACKENDS[backend](request, tmp_path)
    service = FunctionService.open(url)

    def create(entry: str, output: str) -> str:
        code, extra, _ = ENTRIES[entry]
        config = {"tenant": "t", "namespace": "n", "name": "f", "inputs": [str(tmp_path / "in.jsonl")],
                  "inputFormat": "json", "keyField": "k", "parallelism": 1,
                  "output": "persistent://public/default/out" if output == "topic" else str(tmp_path / "out"),
                  "userConfig": {"eventTimeField": "ts"}, **extra}
        if entry == "retries_dead_letters":
            config["deadLetterTopic"] = str(tmp_path / "dead")
        if provider == "partitioned":  # its state under a file URL
            config["stateStorage"] = state_storage(str(tmp_path / "shared"))
        service.registry.create(config, code.encode())
        return config["output"]

    yield service.registry, url, create
    service.close()


class _Task:
    """What a Spark task of micro-batch ``batch`` of a streaming query shows its function."""

    def __init__(self, batch: int, partition: int = 0) -> None:
        self.batch, self.partition = batch, partition

    def partitionId(self) -> int:  # noqa: N802 - Spark's name
        return self.partition

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - Spark's name
        return {SPARK_BATCH_ID: str(self.batch), SPARK_QUERY_ID: "query"}.get(key)


def feed(registry, url, monkeypatch, records):
    """One micro-batch of the function with ``records`` in its one partition, as Spark runs it; its stats row."""
    import pyspark

    spec = executor_spec(registry, url, "t", "n", "f")[0]
    groups, partitions = routing(spec, spec.state_store(), 1)  # as function_plan lays the query out
    layout = Layout(groups, partitions) if groups is not None else Layout()
    task = _Task(0)
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: task))
    lines = [json.dumps(r) for r in records]
    keys = [r["k"] for r in records]
    half = len(lines) // 2  # two Arrow batches, as Spark sends a partition's rows
    batches = [pa.RecordBatch.from_pydict({"__record": pa.array(lines[a:b], pa.string()),
                                           "__key": pa.array(keys[a:b], pa.string())})
               for a, b in ((0, half), (half, len(lines)))]
    (stats,) = arrow_partition_runner(spec, None, layout)(iter(batches))
    return stats.to_pylist()[0]


def read_output(where: str, topics: str) -> list:
    """The function's output records: a topic's messages' values, or a directory's records."""
    found = []
    path = directory(topics, where) if "://" in where else where
    for name in sorted(glob.glob(os.path.join(path, "*.jsonl"))):
        with open(name) as lines:
            for line in lines:
                record = json.loads(line)
                found.append(json.loads(columns.payload(record)) if "://" in where else record)
    return found


def user_state(registry) -> dict:
    store = registry.state_store("t", "n", "f")
    return {e.key: e.counter if e.counter is not None else e.value
            for e in store.scan_entries() if not e.key.startswith("\x00")}


def canonical(records: list) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in records)


@pytest.mark.parametrize("function", PROVIDERS, indirect=True)
@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_every_entry_point_gives_the_same_results_on_every_provider_and_output(function, entry, output, tmp_path,
                                                                                monkeypatch):
    registry, url, create = function
    where = create(entry, output)
    expected_outputs, expected_state = ENTRIES[entry][2](RECORDS)
    if entry.startswith("trigger"):
        answers = []
        for record in RECORDS:  # each record a one-record batch of its own
            result = lifecycle.trigger(registry, "t", "n", "f", json.dumps(record).encode())
            answers.extend(result if isinstance(result, list) else [] if result is None else [result])
        assert canonical(answers) == canonical(expected_outputs)
        if entry == "trigger_timers":  # a function keeping time: what a batch writes is written too
            assert canonical(read_output(where, str(tmp_path / "topics"))) == canonical(expected_outputs)
    else:
        stats = feed(registry, url, monkeypatch, RECORDS)
        assert canonical(read_output(where, str(tmp_path / "topics"))) == canonical(expected_outputs)
        failed = entry == "retries_dead_letters"
        assert (stats["received"], stats["processed"], stats["skipped"], stats["outputs"], stats["applied"],
                stats["dead_letters"], stats["user_exceptions"]) == (
            len(RECORDS), len(RECORDS) - failed, 0, len(expected_outputs), True, int(failed), 2 * failed)
        if failed:
            assert read_output(str(tmp_path / "dead"), "") == [r for r in RECORDS if r["v"] == BAD]
        assert feed(registry, url, monkeypatch, RECORDS)["applied"] is False  # a replay of the batch: skipped
    assert user_state(registry) == expected_state


def test_the_executor_spec_is_frozen_checked_once_and_travels_to_executors(tmp_path):
    """Built by ``executor_spec`` on the driver, it pickles to executors whole (Spark ships it in the runner's
    closure); nothing changes it after (a batch's parts are a new spec), and a value the runtime cannot run
    is refused when it is built, not when a record meets it."""
    import pickle

    from statekeep.errors import InvalidArgumentError
    from statekeep.functions.config.spec import ExecutorSpec, TimeSpec

    with FunctionService.open(f"local://{tmp_path / 'data'}") as service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["in.jsonl"],
                                 "keyField": "k", "windowConfig": {"windowLengthCount": 2},
                                 "triggerIntervalMs": 400}, COUNT_WINDOW.encode())
        spec = executor_spec(service.registry, "", "t", "n", "f")[0]
        service.registry.update("t", "n", "f", {"triggerIntervalMs": 0})
        assert executor_spec(service.registry, "", "t", "n", "f")[0].trigger_interval_ms == 0
    assert isinstance(spec.time, TimeSpec) and spec.time.window["kind"] == "count"
    assert spec.trigger_interval_ms == 400 and ExecutorSpec("t", "n", "f").trigger_interval_ms == 0
    assert pickle.loads(pickle.dumps(spec)) == spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.output = "elsewhere"  # type: ignore[misc]
    with pytest.raises(InvalidArgumentError, match="input format"):
        dataclasses.replace(spec, input_format="csv")
    with pytest.raises(InvalidArgumentError, match="max_retries"):
        ExecutorSpec("t", "n", "f", max_retries=-1)
    with pytest.raises(InvalidArgumentError, match="trigger_interval_ms"):
        ExecutorSpec("t", "n", "f", trigger_interval_ms=-1)
