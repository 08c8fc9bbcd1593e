"""Time in functions without Spark: state TTL, timers, watermarks and windows, run partition by partition
as the Spark runtime does, on the embedded provider, the metadata provider over ZooKeeper and etcd,
and partition-owned state. The clock is injected (``timerun.CLOCK``): TTLs expire by logical time."""

from __future__ import annotations

import glob
import json
from urllib.parse import quote

import pytest

from statekeep.changelog import FollowerStore
from statekeep.errors import InvalidArgumentError
from statekeep.functions.windowing import timerun
from statekeep.functions.executor.errors import FunctionRecordError
from statekeep.functions.config.model import FunctionConfig
from statekeep.functions.config.spec import Layout, time_section
from statekeep.functions.windowing.timerun import stored_watermark
from statekeep.functions.config.windowconfig import WindowConfig
from statekeep.state import timestate
from statekeep.state.keygroups import key_group
from statekeep.state.partitioned import partition
from statekeep.state.typed import PREFIX as TYPED, variables_prefix
from statekeep.functions.windowing.windowstore import inline_limit, read_buffer
from statekeep.state.timestate import (buffer_key, expiry_key, group_key, timers_of, visible_entries,
                                       visible_entry, visible_records)
from conftest import BACKENDS
from support.specs import cached_state_store, run_partition, typed

TARGETS = ["embedded-local", "metadata-zk", "metadata-etcd", "partitioned-local"]


#: every provider: the metadata one on every backend, the embedded one, partition-owned state
EVERY_PROVIDER = ["metadata-memory", "metadata-local", "metadata-zk", "metadata-etcd", "embedded-local",
                  "partitioned-local"]


@pytest.fixture(params=TARGETS)
def base_spec(request, tmp_path):
    return spec_of(request.param, request, tmp_path)


def spec_of(target, request, tmp_path):
    provider, backend = target.split("-")
    url = BACKENDS[backend](request, tmp_path)
    config = {"metadata_url": url}
    if provider == "partitioned":
        config.update(state_dir=f"file://{tmp_path / 'shared'}", cache_dir=str(tmp_path / "cache"))
    return {"tenant": "t", "namespace": "n", "name": f"f{abs(hash(request.node.name)) % 10**8}", "py_name": "f.py",
            "state_provider": provider, "state_config": config, "input_format": "json",
            "output": str(tmp_path / "out"), "user_config": {}, "key_field": "k"}


@pytest.fixture
def clock(monkeypatch):
    now = {"ms": 1_000_000}
    monkeypatch.setattr(timerun, "CLOCK", lambda: now["ms"])
    monkeypatch.setattr(timestate, "wall_clock_ms", lambda: now["ms"])  # what REST's reads compare with
    return now


def run(spec, batch, records, parallelism=1, only=None):
    """One micro-batch as the driver runs it: the layout for this batch, then each partition's records
    (``only``: just these partitions, as a driver killed after their commits)."""
    store = cached_state_store(spec)
    groups = 128
    layout = store.partitioning(parallelism)
    if layout is not None:
        groups, parallelism = layout
    spec = typed(spec)
    # the function's watermark before the batch (the largest of the partitions')
    layout = Layout(groups, parallelism, stored_watermark(store, batch) if spec.time is not None else None)
    stats = []
    for p in range(parallelism) if only is None else only:
        mine = [r for r in records if key_group(r["k"], groups) * parallelism // groups == p]
        lines = [json.dumps(r) for r in mine]
        stats.append(run_partition(spec, batch, p, lines, record_keys=[r["k"] for r in mine], layout=layout))
    return stats


def outputs(spec):
    found = []
    for path in sorted(glob.glob(f"{spec['output']}/*.jsonl")):
        with open(path) as f:
            found.extend(json.loads(line) for line in f)
    return found


TTL = '''
def process(input, context):
    op = input["op"]
    if op == "put":
        context.put_state(input["k"], "v")
    elif op == "put_ttl":
        context.put_state(input["k"], "v", ttl_seconds=input["ttl"])
    elif op == "incr":
        return context.incr_counter(input["k"], 1)
    elif op == "get":
        return [input["k"], context.get_state(input["k"]).decode()]
'''


def test_ttl_hides_at_once_then_deletes_with_a_tombstone(base_spec, clock, tmp_path):
    spec = {**base_spec, "code": TTL, "time": {"window": None, "ttl_ms": 10_000}}
    run(spec, 0, [{"k": "a", "op": "put"}, {"k": "b", "op": "put_ttl", "ttl": 100}, {"k": "c", "op": "incr"},
                  {"k": "c", "op": "incr"}])
    store = cached_state_store(spec)
    start = clock["ms"]
    assert [e.key for e in visible_entries(store, now_ms=start)] == ["a", "b", "c"]
    expired = start + 10_000
    assert visible_entry(store, "a", now_ms=expired) is None  # invisible at once, before any batch
    assert visible_entry(store, "b", now_ms=expired) is not None
    assert [e.key for e in visible_entries(store, now_ms=expired)] == ["b"]
    assert store.get_entry("a") is not None  # still stored until its group's owner runs a batch
    follower = FollowerStore.open(store, "t", "n", spec["name"], local_dir=str(tmp_path / "follower"),
                                  check_registry=False)
    assert follower.wait_until_caught_up(30) and follower.get("a") == b"v"
    clock["ms"] = expired
    run(spec, 1, [{"k": "c", "op": "incr"}, {"k": "b", "op": "get"}])
    assert store.get_entry("a") is None and store.get_entry(expiry_key("a")) is None  # deleted by the sweep
    assert store.get_counter("c") == 1  # expired: the increment restarted it
    assert follower.wait_until_caught_up(30) and follower.get("a") is None and follower.get("b") == b"v"
    follower.close()
    assert outputs(spec)[-2:] == [1, ["b", "v"]]


def test_a_bad_ttl_changes_nothing(base_spec, clock):
    spec = {**base_spec, "code": TTL, "time": {"window": None, "ttl_ms": None}}
    with pytest.raises(FunctionRecordError, match="ttl_seconds must be an int"):
        run(spec, 0, [{"k": "a", "op": "put_ttl", "ttl": -5}])
    assert cached_state_store(spec).get_entry("a") is None


TYPED_TTL = '''
def process(input, context):
    if input.get("skip"):
        return None
    if input.get("plain") == "value":  # plain keys: the record's key itself (partition-owned state keeps a key's
        context.put_state(input["k"], str(input["i"]), ttl_seconds=60)  # state in its group)
        return None
    if input.get("plain") == "counter":
        context.incr_counter(input["k"], input["i"], ttl_seconds=60)
        return None
    context.value_state("last", int, ttl=60).update(input["i"])
    context.list_state("log", int, ttl=60).append(input["i"])
    context.map_state("seen", str, int, ttl=60).put("i", input["i"])
'''


@pytest.mark.parametrize("target", EVERY_PROVIDER)
def test_entries_of_every_kind_nobody_reads_again_are_deleted_after_their_ttl(target, request, clock, tmp_path,
                                                                              monkeypatch):
    """The leak issue 52 found: typed entries with a TTL were deleted only when read. 100k of them (a value, a
    list element, its bounds and a map entry for each of 25k keys) and 100k plain keys (50k values, 50k counters)
    on the embedded and partition-owned providers, a tenth of each on the others (local:// files, ZooKeeper and
    etcd, where each write is a round trip to a server or a file, their batches staged in groups; memory://, which
    stages as they do), are gone from the store after their TTL and the
    next batch, which reads none of them; the changelog holds a delete of each, and a follower applies them."""
    monkeypatch.setattr(partition, "SNAPSHOT_MIN_ENTRIES", 10 ** 9)  # partition-owned state keeps its whole log
    spec = {**spec_of(target, request, tmp_path), "code": TYPED_TTL, "time": time_section(FunctionConfig(
        tenant="t", namespace="n", name="f", inputs=["x"]), TYPED_TTL)}
    keys = 25_000 if target in ("embedded-local", "partitioned-local") else 2_500
    plain = [{"k": f"{kind}{i}", "i": i + 1, "plain": kind} for kind in ("value", "counter") for i in range(2 * keys)]
    run(spec, 0, [{"k": f"user{i}", "i": i} for i in range(keys)] + plain, parallelism=2)
    store = cached_state_store(spec)
    written = {k for k, _ in store.scan(TYPED)} | {r["k"] for r in plain}
    assert len(written) == 8 * keys and store.get_counter("counter7") == 8 and store.get("value7") == b"8"
    follower = FollowerStore.open(store, "t", "n", spec["name"], local_dir=str(tmp_path / "follower"),
                                  check_registry=False)
    assert follower.wait_until_caught_up(60) and len(list(follower.scan_entries(TYPED))) == 4 * keys
    assert len(list(follower.scan_entries("value"))) == len(list(follower.scan_entries("counter"))) == 2 * keys
    before = [store.partition_position(p).last_offset for p in range(store.changelog_partitions())]
    clock["ms"] += 59_999
    run(spec, 1, [{"k": "other", "skip": True}], parallelism=2)
    assert len(list(store.scan(TYPED))) == 4 * keys and store.get_counter("counter7") == 8  # not yet expired: kept
    clock["ms"] += 1
    run(spec, 2, [{"k": "other", "skip": True}], parallelism=2)
    assert list(store.scan(TYPED)) == [] and list(store.scan("value")) == list(store.scan("counter")) == []
    assert list(store.scan(timestate.expiry_key(""))) == []  # the plain keys' expiry entries too
    for group in store.scan_entries(timestate.GROUP_PREFIX):
        assert timestate.decode_group(group.value)["x"] == {}  # the TTL index is empty too
    deleted = {r.key for p, after in enumerate(before) for r in store.read_partition_changelog(p, after)
               if r.tombstone}
    assert deleted == written | {timestate.expiry_key(r["k"]) for r in plain}  # a plain key's expiry: its own entry
    assert follower.wait_until_caught_up(60) and list(follower.scan_entries(TYPED)) == []
    assert list(follower.scan_entries("value")) == list(follower.scan_entries("counter")) == []
    follower.close()


TIMERS = '''
def process(input, context):
    if input.get("cancel"):
        context.delete_timer(input["at"])
        return None
    context.register_timer(input["at"])
    context.incr_counter("seen:" + input["k"])
    return {"timers": context.list_timers()}

def on_timer(key, ts, context):
    return {"fired": key, "at": ts, "seen": context.get_counter("seen:" + key)}
'''


def test_event_time_timers_fire_once_when_the_watermark_passes(base_spec, clock):
    spec = {**base_spec, "code": TIMERS, "user_config": {"eventTimeField": "ts"},
            "time": {"window": None, "ttl_ms": None}}
    if spec["state_provider"] == "partitioned":
        spec["code"] = TIMERS.replace('"seen:" + ', "")  # partition-owned: a key's state stays in its group
    records = [{"k": k, "ts": 100, "at": 1000} for k in ("x", "y", "z")] + [{"k": "z", "ts": 100, "at": 5000}]
    run(spec, 0, records, parallelism=2)
    assert sorted(t["key"] for t in timers_of(cached_state_store(spec))) == ["x", "y", "z", "z"]
    batch1 = [{"k": "y", "ts": 999, "at": 1000, "cancel": True}, {"k": "x", "ts": 999, "at": 2000}]
    run(spec, 1, batch1, parallelism=2)
    assert [o for o in outputs(spec) if "fired" in o] == []  # watermark 999: nothing due
    run(spec, 1, batch1, parallelism=2)  # a replay: skipped
    run(spec, 2, [{"k": "q", "ts": 2000, "at": 9000}], parallelism=2)  # watermark 2000
    fired = sorted((o["fired"], o["at"]) for o in outputs(spec) if "fired" in o)
    assert fired == [("x", 1000), ("x", 2000), ("z", 1000)]
    left = timers_of(cached_state_store(spec))
    assert sorted((t["key"], t["timestamp"]) for t in left) == [("q", 9000), ("z", 5000)]
    assert not list(visible_entries(cached_state_store(spec), prefix="\x00"))


@pytest.mark.parametrize("base_spec", ["embedded-local"], indirect=True)
def test_only_an_int_event_time_field_moves_the_watermark(base_spec, clock):
    spec = {**base_spec, "code": TIMERS, "user_config": {"eventTimeField": "ts"},
            "time": {"window": None, "ttl_ms": None}}
    run(spec, 0, [{"k": "x", "ts": 100, "at": 500}])
    odd = [{"k": "x", "ts": 999.0, "at": 600}, {"k": "y", "ts": True, "at": 700}, {"k": "z", "at": 800},
           {"k": "w", "ts": "999", "at": 900}]
    assert [s.watermark for s in run(spec, 1, odd)] == [100]  # a float, a bool, no field, a str: not event times
    assert [o for o in outputs(spec) if "fired" in o] == []
    assert [s.watermark for s in run(spec, 2, [{"k": "x", "ts": 650, "at": 5000}])] == [650]
    assert sorted((o["fired"], o["at"]) for o in outputs(spec) if "fired" in o) == [("x", 500), ("x", 600)]


@pytest.mark.parametrize("base_spec", ["embedded-local"], indirect=True)
def test_message_input_event_times_come_from_json_lines_and_message_metadata(base_spec, clock, monkeypatch):
    """A message input's event time: a JSON file's line's ``eventTimeField`` (read from the value the function
    gets, not parsed again), a topic message's ``eventTime``; a line holding no object has none."""
    from statekeep.functions.executor.context import Context
    from statekeep.functions.messaging.columns import JSON_LINE
    from statekeep.functions.messaging.messages import Message

    parsed = []
    document = Context._document
    monkeypatch.setattr(Context, "_document", lambda self: parsed.append(1) or document(self))
    code = "def process(input, context):\n    context.register_timer(10_000)\n\ndef on_timer(key, ts, ctx):\n    pass\n"
    spec = {**base_spec, "code": code, "input_format": "message", "source_format": "message",
            "user_config": {"eventTimeField": "ts"}, "time": {"window": None, "ttl_ms": None}}
    spec = typed(spec)
    lines = [JSON_LINE + json.dumps({"k": "x", "ts": 300, "at": 400}), JSON_LINE + "[1, 2]",
             json.dumps(Message(json.dumps({"k": "y", "ts": 900, "at": 950}), "y", event_time=200).to_json())]
    stats = run_partition(spec, 0, 0, lines, record_keys=["x", None, "y"])
    assert stats.errors == [] and stats.watermark == 300  # the message's eventTime 200, not its payload's ts
    assert len(parsed) == 1  # only the line holding a list, which has no event time either way


BATCH_TIMERS = '''
def process_batch(records, context):
    for key, at in zip(records["k"].to_pylist(), records["at"].to_pylist()):
        context.register_timer(at, key=key)

def on_timer(key, ts, context):
    return {"fired": key, "at": ts}
'''


@pytest.mark.parametrize("base_spec", ["embedded-local"], indirect=True)
def test_process_batch_timers_are_checked_against_its_records_event_times(base_spec, clock):
    # a first batch's event times 45 years from the clock: its records are observed before process_batch runs
    spec = {**base_spec, "code": BATCH_TIMERS, "user_config": {"eventTimeField": "ts"},
            "time": {"window": None, "ttl_ms": None}}
    old = 1_436_918_400_000
    assert [s.watermark for s in run(spec, 0, [{"k": "x", "ts": old, "at": old + 30},
                                               {"k": "y", "ts": old + 20, "at": old + 5}])] == [old + 20]
    assert [(o["fired"], o["at"]) for o in outputs(spec)] == [("y", old + 5)]


def test_a_timer_far_away_or_not_an_int_is_refused(base_spec, clock):
    spec = {**base_spec, "code": TIMERS, "time": {"window": None, "ttl_ms": None}}
    with pytest.raises(FunctionRecordError, match="more than ten years"):
        run(spec, 0, [{"k": "x", "at": clock["ms"] + 20 * 365 * 86_400_000}])
    with pytest.raises(FunctionRecordError, match="timestamp is int"):
        run(spec, 0, [{"k": "x", "at": "soon"}])
    assert timers_of(cached_state_store(spec)) == []


WINDOW = '''
def process(records, context):
    w = context.get_window()
    return {"key": w.key, "start": w.start, "end": w.end, "n": len(records),
            "ts": sorted(r["ts"] for r in records)}

def ts_of(record):
    return record["ts"] * 1000
'''


def windowed(spec, **window):
    return {**spec, "code": WINDOW, "user_config": {"eventTimeField": "ts"},
            "time": {"window": WindowConfig(**window).to_spec(), "ttl_ms": None}}


def test_tumbling_event_time_windows_fire_once_and_late_records_are_counted(base_spec, clock):
    spec = windowed(base_spec, windowLengthDurationMs=100, maxLagMs=10)
    run(spec, 0, [{"k": "a", "ts": 5}, {"k": "a", "ts": 99}, {"k": "b", "ts": 150}, {"k": "a", "ts": 120}],
        parallelism=2)
    # watermark 150 - 10 = 140: [0, 100) of a fired; b's and a's [100, 200) are open
    assert outputs(spec) == [{"key": "a", "start": 0, "end": 100, "n": 2, "ts": [5, 99]}]
    stats = run(spec, 1, [{"k": "a", "ts": 50}, {"k": "a", "ts": 199}, {"k": "b", "ts": 400}], parallelism=2)
    late = sum(s.metrics.get(timerun.LATE_METRIC, [0])[0] for s in stats)
    assert late == 1  # ts 50: its window fired already
    got = sorted((o["key"], o["start"], o["ts"]) for o in outputs(spec))
    assert got == [("a", 0, [5, 99]), ("a", 100, [120, 199]), ("b", 100, [150])]
    assert [t["key"] for t in timers_of(cached_state_store(spec))] == ["b"]  # b's [400, 500)


def test_sliding_session_and_count_windows(base_spec, clock, tmp_path):
    spec = windowed(base_spec, windowLengthDurationMs=100, slidingIntervalDurationMs=50)
    run(spec, 0, [{"k": "a", "ts": 60}, {"k": "a", "ts": 120}, {"k": "a", "ts": 400}])
    assert sorted((o["start"], o["ts"]) for o in outputs(spec)) == [(0, [60]), (50, [60, 120]), (100, [120])]

    spec = windowed({**base_spec, "name": base_spec["name"] + "s", "output": str(tmp_path / "s")}, sessionGapMs=30,
                    lateDataTopic=str(tmp_path / "late"))
    run(spec, 0, [{"k": "a", "ts": 10}, {"k": "a", "ts": 30}, {"k": "a", "ts": 100}])
    run(spec, 1, [{"k": "a", "ts": 75}, {"k": "a", "ts": 20}, {"k": "a", "ts": 300}])
    # [10, 30] closed at 60 by watermark 100; 75 joins 100's session; 20 is late (its session fired)
    assert sorted((o["start"], o["end"], o["ts"]) for o in outputs(spec)) == [(10, 60, [10, 30]),
                                                                              (75, 130, [75, 100])]
    late = glob.glob(str(tmp_path / "late" / "*.jsonl"))
    assert [json.loads(line)["ts"] for path in late for line in open(path)] == [20]

    spec = windowed({**base_spec, "name": base_spec["name"] + "c", "output": str(tmp_path / "c")},
                    windowLengthCount=3, slidingIntervalCount=2)
    run(spec, 0, [{"k": "a", "ts": t} for t in range(5)] + [{"k": "b", "ts": 9}])
    assert [o["ts"] for o in outputs(spec)] == [[0, 1], [1, 2, 3]]


def test_event_time_errors_name_the_field_and_record(base_spec, clock):
    spec = windowed(base_spec, windowLengthDurationMs=100)
    with pytest.raises(FunctionRecordError, match=r"record 1: InvalidArgumentError: event-time field 'ts' is not"):
        run(spec, 0, [{"k": "a", "ts": 1}, {"k": "a", "ts": "noon"}])
    with pytest.raises(FunctionRecordError, match="record 0: .*'ts' is missing"):
        run(spec, 0, [{"k": "a"}])
    stats = run({**spec, "skip_errors": True}, 0, [{"k": "a", "ts": 1}, {"k": "a"}, {"k": "a", "ts": 500}])
    assert stats[0].skipped == 1 and [o["ts"] for o in outputs(spec)] == [[1]]


def test_extractor_and_reserved_keys(base_spec, clock):
    spec = windowed(base_spec, windowLengthDurationMs=1000, timestampExtractorClassName="f.ts_of")
    spec["user_config"] = {}
    run(spec, 0, [{"k": "a", "ts": 0}, {"k": "a", "ts": 2}])  # extractor: seconds -> ms
    assert [o["ts"] for o in outputs(spec)] == [[0]]
    store = cached_state_store(spec)
    internal = [e.key for e in store.scan_entries("\x00")]
    assert buffer_key("a") in internal and all(key_group(k, 128) == key_group("a", 128) for k in internal
                                                if k.startswith(("\x00w", "\x00v")))
    assert group_key(key_group("a", 128)) in internal
    assert [e.key for e in visible_entries(store)] == []  # none of it is user-visible
    bad = {**spec, "code": "def process(input, context):\n    context.put_state('\\x00g1', 'x')\n",
           "time": {"window": None, "ttl_ms": None}}
    with pytest.raises(FunctionRecordError, match="reserved for statekeep"):
        run(bad, 1, [{"k": "a", "ts": 0}])


@pytest.mark.parametrize("window, message", [
    ({}, "windowConfig: no window length"),
    ({"windowLengthCount": 3, "windowLengthDurationMs": 10}, "windowConfig: count and duration settings are mixed"),
    ({"windowLengthCount": 3, "maxLagMs": -1}, "windowConfig.maxLagMs: Input should be greater than or equal to 0"),
    ({"slidingIntervalCount": 2}, "windowConfig: no window length"),
    ({"windowLengthCount": 2, "slidingIntervalCount": 3}, "windowConfig: slidingIntervalCount: 3 exceeds"),
    ({"sessionGapMs": 10, "windowLengthCount": 2}, "windowConfig: count and|windowConfig: sessionGapMs"),
    ({"windowLengthDurationMs": 10, "color": 1}, "windowConfig.color: unknown"),
    ({"windowLengthDurationMs": "10"}, "windowConfig.windowLengthDurationMs: Input should be a valid integer"),
])
def test_window_config_errors_name_the_field(window, message):
    base = {"tenant": "t", "namespace": "n", "name": "f", "inputs": ["in"]}
    with pytest.raises(InvalidArgumentError, match=message):
        FunctionConfig.from_json({**base, "windowConfig": window})
    config = FunctionConfig.from_json({**base, "windowConfig": {"windowLengthDurationMs": 60_000},
                                       "stateTtlSeconds": 9})
    assert config.to_json()["windowConfig"] == {"windowLengthDurationMs": 60_000}
    assert time_section(config, "").ttl_ms == 9000
    assert time_section(FunctionConfig.from_json(base), "def process(input, context): pass") is None


@pytest.mark.parametrize("lag", [-1, "100", 1.5, True, 10 * 365 * 24 * 3600 * 1000 + 1, [5]])
def test_a_bad_user_config_max_lag_is_refused_at_create_and_at_spec_building(lag):
    """``userConfig.maxLagMs`` (the watermark's lag of a function without a windowConfig) is an int in the
    range of ``windowConfig.maxLagMs``: anything else is refused at create, over REST with a 400, and
    building a spec from a config stored before refuses it too, never taking it as 0 (issue 31, defect 5)."""
    from fastapi.testclient import TestClient

    from statekeep.functions.config.service import FunctionService
    from statekeep.server import create_app

    base = {"tenant": "t", "namespace": "n", "name": "lag", "inputs": ["in"], "stateTtlSeconds": 60}
    code = b"def process(input, context):\n    pass\n"
    message = r"userConfig\.maxLagMs must be an int in 0\.\.315360000000, got "
    with FunctionService.open("memory://") as service:
        with pytest.raises(InvalidArgumentError, match=message):
            service.registry.create({**base, "userConfig": {"maxLagMs": lag}}, code)
        assert service.registry.list("t", "n") == []
        service.registry.create({**base, "userConfig": {"maxLagMs": 5}}, code)
        with pytest.raises(InvalidArgumentError, match=message):
            service.registry.update("t", "n", "lag", {"userConfig": {"maxLagMs": lag}})
        assert service.registry.get("t", "n", "lag").userConfig == {"maxLagMs": 5}
        # stored before this check: still read, updated and deleted; building its spec refuses it
        path = service.registry.catalog.path("t", "n", "lag")
        raw = json.loads(service.registry.store.get(path).value)
        service.registry.store.put(path, json.dumps({**raw, "userConfig": {"maxLagMs": lag}}).encode())
        stored = service.registry.get("t", "n", "lag")
        assert stored.userConfig == {"maxLagMs": lag}
        with pytest.raises(InvalidArgumentError, match=message):
            time_section(stored, "")
        with pytest.raises(InvalidArgumentError, match=message):  # an update keeping it is refused
            service.registry.update("t", "n", "lag", {"parallelism": 2})
        service.registry.update("t", "n", "lag", {"userConfig": {"maxLagMs": 9}})
        assert time_section(service.registry.get("t", "n", "lag"), "").lag_ms == 9
        service.registry.delete("t", "n", "lag")
    assert time_section(FunctionConfig.from_json({**base, "userConfig": {"maxLagMs": 7}}), "").lag_ms == 7
    assert time_section(FunctionConfig.from_json(base), "").lag_ms == 0
    app = create_app({"metadata_url": "memory://"})
    try:
        client = TestClient(app)
        r = client.post("/admin/v3/functions/t/n/lag", files={
            "functionConfig": (None, json.dumps({**base, "py": "f.py", "userConfig": {"maxLagMs": lag}}),
                               "application/json"),
            "data": ("f.py", code, "application/octet-stream")})
        assert r.status_code == 400 and "userConfig.maxLagMs" in r.json()["reason"], r.text
        assert client.get("/admin/v3/functions/t/n").json() == []
    finally:
        app.state.service.close()


def test_timers_view_and_hidden_state_over_rest_and_cli(tmp_path, clock, capsys):
    """A registered windowed function with a TTL: REST lists its timers and watermark, never its internal
    or expired keys, and refuses writes to the reserved namespace; ``functions timers`` prints the same."""
    from fastapi.testclient import TestClient

    from statekeep.cli import main as cli_main
    from statekeep.functions.config.service import FunctionService
    from statekeep.server import create_app

    url = f"local://{tmp_path / 'data'}"
    _timed_function(tmp_path, url)
    app = create_app({"metadata_url": url})
    try:
        client = TestClient(app)
        fn = "/admin/v3/functions/t/n/w"
        timers = client.get(fn + "/timers").json()
        assert timers == {"watermark": 150, "timers": [{"key": "a", "timestamp": 200, "domain": "window"},
                                                       {"key": "b", "timestamp": 200, "domain": "window"}]}
        assert [i["key"] for i in client.get(fn + "/state").json()["items"]] == ["last"]
        assert client.post(fn + "/state/%00g1", json={"stringValue": "x"}).status_code == 400
        assert client.get(fn + "/state/%00g1").status_code == 404
        assert client.get("/admin/v3/functions/t/n/nope/timers").status_code == 404
    finally:
        app.state.service.close()
    clock["ms"] += 61_000  # 'last' expires: invisible at once
    with FunctionService.open(url) as service:
        assert service.list_state("t", "n", "w")["items"] == []
    assert cli_main(["functions", "timers", "--fqfn", "t/n/w", "--data-dir", str(tmp_path / "data")]) == 0
    assert json.loads(capsys.readouterr().out) == timers


def _timed_function(tmp_path, url):
    """A registered windowed function with a TTL, run once: its state holds ``last`` (with an expiry),
    window buffers and group entries. Returns its executor spec."""
    from statekeep.functions.config.service import FunctionService
    from statekeep.functions.config.spec import executor_spec

    code = WINDOW.replace("return {", "context.put_state('last', str(w.end))\n    return {")
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "w", "inputs": [str(tmp_path / "in")],
                                 "keyField": "k", "inputFormat": "json",
                                 "output": str(tmp_path / "out"), "stateTtlSeconds": 60,
                                 "windowConfig": {"windowLengthDurationMs": 100},
                                 "userConfig": {"eventTimeField": "ts"}}, code.encode())
        spec = executor_spec(service.registry, url, "t", "n", "w")[0]
    run(spec, 0, [{"k": "a", "ts": 10}, {"k": "b", "ts": 150}, {"k": "a", "ts": 120}])
    return spec


def test_followers_over_rest_never_show_internal_or_expired_keys(tmp_path, clock, capsys):
    """A server's read-only follower of a function keeping time shows what the leader's REST shows: its
    user keys, not statekeep's timers, window buffers and TTL entries, and not a key once expired
    (issue 31, defect 3: the followers' routes read the local copy as it is); nor does ``followers get``."""
    from fastapi.testclient import TestClient

    from statekeep.cli import main as cli_main
    from statekeep.server import ServerConfig, create_app
    from statekeep.testing import wait_for

    url = f"local://{tmp_path / 'data'}"
    store = cached_state_store(_timed_function(tmp_path, url))
    internal = [e.key for e in store.scan_entries("\x00")]
    assert any(k.startswith("\x00g") for k in internal) and {k[:3] for k in internal} >= {"\x00w\x00", "\x00x\x00"}
    follower = {"tenant": "t", "namespace": "n", "name": "w", "leader": url, "local_dir": str(tmp_path / "fol")}
    app = create_app(ServerConfig(metadata_url="memory://", followers=[follower]))
    with TestClient(app) as client:
        base = "/admin/v3/followers/t/n/w/state"
        assert wait_for(lambda: client.get(f"{base}/last").status_code == 200, timeout=30)
        assert client.get(f"{base}/last").json()["stringValue"] == "100"
        listed = client.get(base, params={"limit": 1}).json()
        assert [i["key"] for i in listed["items"]] == ["last"] and listed["nextStartAfter"] is None
        assert client.get(base, params={"prefix": "\x00"}).json()["items"] == []
        for key in internal:
            assert client.get(f"{base}/{quote(key)}").status_code == 404, key
        clock["ms"] += 61_000  # 'last' expires: hidden at once, as on the leader
        assert client.get(f"{base}/last").status_code == 404
        assert client.get(base).json()["items"] == []
    fol = ["--tenant", "t", "--namespace", "n", "--name", "w", "--leader-store", url,
           "--local-dir", str(tmp_path / "cli-fol")]
    for key in internal[:3]:  # the CLI's follower read too
        assert cli_main(["followers", "get", *fol, "--key", key]) != 0
        assert "not found" in capsys.readouterr().err


def test_the_changelog_source_reads_no_internal_keys(tmp_path, clock):
    """What the ``statekeep-changelog`` source (and a ``statekeep://T/N/F`` input) hands a reader, read
    without Spark: the function's user keys only, at the changelog's offsets (issue 31, defect 3: it
    handed over statekeep's time entries before the user's keys)."""
    url = f"local://{tmp_path / 'data'}"
    store = cached_state_store(_timed_function(tmp_path, url))
    log = store.read_changelog()
    assert any(r.key.startswith("\x00") for r in log)
    user = [(r.offset, r.key) for r in log if not r.key.startswith("\x00")]
    assert [k for _, k in user] == ["last"]
    assert [(r.offset, r.key) for r in visible_records(store)] == user
    assert [(r.offset, r.key) for r in visible_records(store, -1, log[-1].offset, page=1)] == user
    assert list(visible_records(store, prefix="\x00")) == []
    assert list(visible_records(store, user[0][0])) == []  # after the last user record: nothing more


def test_open_windows_and_timers_survive_a_rescale(base_spec, clock):
    """Windows opened at parallelism 2 fire once at 3 (partition-owned state moves whole key groups, the
    time entries with them; other providers re-route the groups)."""
    spec = windowed(base_spec, windowLengthDurationMs=100)
    keys = [f"key{i}" for i in range(12)]
    run(spec, 0, [{"k": k, "ts": 10 + i} for i, k in enumerate(keys)], parallelism=2)
    assert outputs(spec) == []
    run(spec, 1, [{"k": k, "ts": 150} for k in keys[:3]], parallelism=3)
    run(spec, 2, [], parallelism=3)  # partitions without records fire at the function's watermark (150) here
    assert sorted((o["key"], o["ts"]) for o in outputs(spec)) == sorted((k, [10 + i]) for i, k in enumerate(keys))
    run(spec, 3, [{"k": "key0", "ts": 400}], parallelism=3)
    run(spec, 4, [], parallelism=3)
    assert sorted(o["key"] for o in outputs(spec) if o["start"] == 100) == keys[:3]


PROCESSING = '''
def process(input, context):
    context.register_timer(context.get_current_processing_time() + 60_000, "processing")

def on_timer(key, ts, context):
    return {"key": key, "at": ts}
'''


def test_processing_time_timers_fire_when_the_clock_passes(base_spec, clock):
    spec = {**base_spec, "code": PROCESSING, "time": {"window": None, "ttl_ms": None}}
    start = clock["ms"]
    run(spec, 0, [{"k": "a"}])
    clock["ms"] += 59_999
    run(spec, 1, [{"k": "b"}])
    assert outputs(spec) == []
    clock["ms"] += 1
    run(spec, 2, [{"k": "c"}])
    assert outputs(spec) == [{"key": "a", "at": start + 60_000}]
    assert [(t["key"], t["domain"]) for t in timers_of(cached_state_store(spec))] == [("b", "processing"),
                                                                                       ("c", "processing")]


OTHER_KEY = '''
def process(input, context):
    context.put_state(input["target"], input["k"], ttl_seconds=input["ttl"])
'''


def test_a_key_outside_the_records_group_expires_and_is_swept_once(base_spec, clock):
    """On stores any task may write, a key of another key group gets a TTL too: it is indexed in the
    writer's group, and the sweep deletes it only if its expiry entry still says so."""
    spec = {**base_spec, "code": OTHER_KEY, "time": {"window": None, "ttl_ms": None}}
    p0 = next(k for k in (f"k{i}" for i in range(100)) if key_group(k, 128) < 64)  # partition 0's
    p1 = next(k for k in (f"k{i}" for i in range(100)) if key_group(k, 128) >= 64)  # partition 1's
    if base_spec["state_provider"] == "partitioned":  # there a record writes only its own key group's keys
        with pytest.raises(Exception, match="key groups"):
            run(spec, 0, [{"k": p0, "target": p1, "ttl": 10}], parallelism=2)
        return
    run(spec, 0, [{"k": p0, "target": "shared", "ttl": 10}, {"k": p1, "target": "other", "ttl": 10}], parallelism=2)
    clock["ms"] += 5_000
    run(spec, 1, [{"k": p1, "target": "shared", "ttl": 100}], parallelism=2)  # rewritten through p1's groups
    clock["ms"] += 6_000
    run(spec, 2, [{"k": p0, "target": "x", "ttl": 100}, {"k": p1, "target": "y", "ttl": 100}], parallelism=2)
    store = cached_state_store(spec)
    assert store.get_entry("other") is None  # swept
    assert store.get("shared") == p1.encode()  # p0's stale index entry did not delete the newer write


def test_a_batch_replayed_after_some_partitions_committed_uses_the_same_watermark(base_spec, clock):
    """Partition 0 committed batch 1 (its groups hold the new watermark), the driver died before
    partition 1 did: the replay judges partition 1's records against the watermark batch 1 started with,
    so a record on time in the first run is on time in the replay (its window fires with it)."""
    spec = windowed(base_spec, windowLengthDurationMs=100)
    a = next(k for k in (f"k{i}" for i in range(100)) if key_group(k, 128) < 64)
    b = next(k for k in (f"k{i}" for i in range(100)) if key_group(k, 128) >= 64)
    run(spec, 0, [{"k": a, "ts": 50}, {"k": b, "ts": 50}], parallelism=2)
    batch1 = [{"k": a, "ts": 500}, {"k": b, "ts": 120}]
    run(spec, 1, batch1, parallelism=2, only=[0])
    assert stored_watermark(cached_state_store(spec), 1) == 50 and stored_watermark(cached_state_store(spec), 2) == 500
    run(spec, 1, batch1, parallelism=2)  # the replay: partition 0 skips, partition 1 runs
    run(spec, 2, [], parallelism=2)  # the function's watermark (500) passes b's [100, 200)
    assert sorted((o["key"], o["start"], o["ts"]) for o in outputs(spec)) == [(a, 0, [50]), (b, 0, [50]),
                                                                             (b, 100, [120])]


FAILING = '''
def process(records, context):
    if any(r.get("bad") for r in records):
        raise ValueError("a bad record in the window")
    return {"key": context.get_window().key, "ts": [r["ts"] for r in records]}
'''

FAILING_TIMED = '''
def process(input, context):
    context.register_timer(input["ts"] + 100, key=input["k"])
    context.put_state(input["k"], "v", ttl_seconds=60)
    if input.get("bad"):
        raise ValueError("after registering a timer and a TTL")

def on_timer(key, ts, context):
    return {"key": key, "at": ts}
'''


def test_a_skipped_record_takes_back_its_windows_timers_and_ttl(base_spec, clock, tmp_path):
    """With --skip-errors, a record whose function call fails leaves no trace: the count window it
    completed is as before it (the next record completes it instead), its timers and TTL are gone."""
    spec = {**windowed(base_spec, windowLengthCount=3), "code": FAILING, "skip_errors": True}
    stats = run(spec, 0, [{"k": "a", "ts": 1}, {"k": "a", "ts": 2}, {"k": "a", "ts": 3, "bad": True},
                          {"k": "a", "ts": 4}, {"k": "a", "ts": 5}, {"k": "a", "ts": 6}, {"k": "a", "ts": 7}])
    assert stats[0].skipped == 1
    assert [o["ts"] for o in outputs(spec)] == [[1, 2, 4], [5, 6, 7]]

    spec = {**base_spec, "name": base_spec["name"] + "t", "output": str(tmp_path / "t"), "code": FAILING_TIMED,
            "skip_errors": True, "user_config": {"eventTimeField": "ts"},
            "time": {"window": None, "ttl_ms": None, "ttl_used": True}}
    stats = run(spec, 0, [{"k": "a", "ts": 10}, {"k": "b", "ts": 20, "bad": True}])
    assert stats[0].skipped == 1
    store = cached_state_store(spec)
    assert [(t["key"], t["timestamp"]) for t in timers_of(store)] == [("a", 110)]
    assert store.get_entry("b") is None and store.get_entry(expiry_key("b")) is None
    assert store.get_entry(expiry_key("a")) is not None
    run(spec, 1, [{"k": "c", "ts": 500}])  # the watermark (500) passes a's timer; b's is gone
    assert outputs(spec) == [{"key": "a", "at": 110}]


def test_a_time_windows_records_are_a_list_with_no_value_limit(base_spec, clock):
    """A time window's records past the inline limit are one entry each: a window of four times the store's value
    limit fires whole, once, and leaves nothing behind."""
    spec = windowed(base_spec, windowLengthDurationMs=1000)
    limit = cached_state_store(spec).max_value_size
    big = "x" * (limit // 2)
    run(spec, 0, [{"k": "a", "ts": t, "pad": big} for t in range(4)])
    run(spec, 1, [{"k": "a", "ts": t, "pad": big} for t in range(4, 8)])
    assert outputs(spec) == []
    run(spec, 2, [{"k": "b", "ts": 5000}])  # the watermark passes a's window
    assert [o["ts"] for o in outputs(spec)] == [list(range(8))]
    store = cached_state_store(spec)
    assert [e.key for e in store.scan_entries(variables_prefix("a"))] == []  # b's window (5000) is still open
    assert store.get_entry(buffer_key("a")) is None


AGGREGATE = '''
def create_accumulator():
    return {"n": 0, "top": None}

def add_to_accumulator(acc, record):
    return {"n": acc["n"] + 1, "top": record["ts"] if acc["top"] is None else max(acc["top"], record["ts"])}

def get_result(acc):
    return acc

def process(result, context):
    w = context.get_window()
    return {"key": w.key, "start": w.start, "n": result["n"], "top": result["top"], "size": w.size}
'''


def test_an_aggregate_keeps_an_accumulator_per_window_instead_of_records(base_spec, clock):
    spec = {**windowed(base_spec, windowLengthDurationMs=100), "code": AGGREGATE}
    run(spec, 0, [{"k": "a", "ts": 5}, {"k": "a", "ts": 70}, {"k": "b", "ts": 20}, {"k": "a", "ts": 130}],
        parallelism=2)
    run(spec, 1, [{"k": "a", "ts": 40}, {"k": "c", "ts": 400}], parallelism=2)  # 40: late, [0, 100) fired
    store = cached_state_store(spec)
    assert [e.key for e in store.scan_entries("\x00v")] == []  # no records kept
    assert sorted((o["key"], o["start"], o["n"], o["top"], o["size"]) for o in outputs(spec)) == [
        ("a", 0, 2, 70, 2), ("a", 100, 1, 130, 1), ("b", 0, 1, 20, 1)]
    session = {**windowed(base_spec, sessionGapMs=30), "code": AGGREGATE, "name": base_spec["name"] + "s"}
    with pytest.raises(InvalidArgumentError, match="session windows needs merge_accumulators"):
        run(session, 0, [{"k": "a", "ts": 1}])
    count = {**windowed(base_spec, windowLengthCount=2), "code": AGGREGATE, "name": base_spec["name"] + "c"}
    with pytest.raises(InvalidArgumentError, match="not count windows"):
        run(count, 0, [{"k": "a", "ts": 1}])


MERGING = AGGREGATE + '''
def merge_accumulators(a, b):
    tops = [t for t in (a["top"], b["top"]) if t is not None]
    return {"n": a["n"] + b["n"], "top": max(tops) if tops else None}
'''


def test_an_aggregate_over_session_windows_merges_the_sessions_a_record_bridges(base_spec, clock):
    spec = {**windowed(base_spec, sessionGapMs=30), "code": MERGING}
    # a: 0 and 50 open two sessions, 25 bridges them (merged), 200 opens a third; b: one session of one
    run(spec, 0, [{"k": "a", "ts": 0}, {"k": "a", "ts": 50}, {"k": "b", "ts": 10}, {"k": "a", "ts": 25},
                  {"k": "a", "ts": 200}], parallelism=2)
    run(spec, 1, [{"k": "a", "ts": 20}, {"k": "c", "ts": 400}], parallelism=2)  # 20: late, [0, 80) fired
    store = cached_state_store(spec)
    assert [e.key for e in store.scan_entries("\x00v")] == []  # no records kept
    assert sorted((o["key"], o["start"], o["n"], o["top"], o["size"]) for o in outputs(spec)) == [
        ("a", 0, 3, 50, 3), ("a", 200, 1, 200, 1), ("b", 10, 1, 10, 1)]


def test_session_and_count_windows_records_are_lists_with_no_value_limit(base_spec, clock, tmp_path):
    """A session's records past the inline limit and a count window's are one entry each, like a time window's:
    sessions of twice the store's value limit, two of them joined by a record between them, fire whole, once,
    sorted by event time; count windows of 1.5 times the limit too; nothing is left behind."""
    spec = windowed(base_spec, sessionGapMs=1000, maxLagMs=5000)
    limit = cached_state_store(spec).max_value_size
    big = "x" * (limit // 2)
    run(spec, 0, [{"k": "a", "ts": 0, "pad": big}, {"k": "a", "ts": 1800, "pad": big}])
    run(spec, 1, [{"k": "a", "ts": 950, "pad": big}, {"k": "a", "ts": 900, "pad": big}])  # 900 joins both
    assert outputs(spec) == []
    run(spec, 2, [{"k": "b", "ts": 10_000}])  # the watermark (5000) passes a's session
    assert [(o["start"], o["end"], o["ts"]) for o in outputs(spec)] == [(0, 2800, [0, 900, 950, 1800])]
    store = cached_state_store(spec)
    assert [e.key for e in store.scan_entries(variables_prefix("a"))] == []
    assert store.get_entry(buffer_key("a")) is None

    spec = windowed({**base_spec, "name": base_spec["name"] + "c", "output": str(tmp_path / "c")},
                    windowLengthCount=3)
    run(spec, 0, [{"k": "a", "ts": t, "pad": big} for t in range(4)])
    run(spec, 1, [{"k": "a", "ts": t, "pad": big} for t in range(4, 7)])
    assert [o["ts"] for o in outputs(spec)] == [[0, 1, 2], [3, 4, 5]]
    store = cached_state_store(spec)
    assert len(list(store.scan_entries(variables_prefix("a")))) == 1  # 6: the next window's first record


def test_count_windows_kept_in_the_keys_entry_by_an_earlier_version_continue_on_a_list(base_spec, clock):
    """A count buffer as versions before lists wrote it (its records in the key's entry) is moved onto the list
    at its first use: the window it had begun completes with its records, in order."""
    spec = windowed(base_spec, windowLengthCount=3)
    old = {"r": [[1, {"k": "a", "ts": 1}], [2, {"k": "a", "ts": 2}]], "n": 2}
    cached_state_store(spec).apply_batch({buffer_key("a"): json.dumps(old).encode()}, {})
    run(spec, 0, [{"k": "a", "ts": t} for t in (3, 4, 5, 6)])
    assert [o["ts"] for o in outputs(spec)] == [[1, 2, 3], [4, 5, 6]]
    assert cached_state_store(spec).get_entry(buffer_key("a")) is None


def test_a_time_windows_records_stay_in_the_keys_entry_until_it_is_too_large_then_move_to_its_list(base_spec, clock):
    """A window's ``[ts, record]`` pairs are kept in the key's entry (as versions before window lists wrote them
    too) while that entry is under the inline limit: no entry per record. A batch taking the entry past the limit
    moves them onto the window's list, where later records are appended; the window fires once with every record
    in order, and its list and the key's entry are deleted with the firing. The entry is msgpack; a JSON one, as
    versions before wrote it, is read as well."""
    spec = windowed(base_spec, windowLengthDurationMs=100, maxLagMs=50)
    store = cached_state_store(spec)
    run(spec, 0, [{"k": "a", "ts": 5}, {"k": "a", "ts": 20}])  # the window [0, 100) opened, its timer registered
    assert [e.key for e in store.scan_entries(variables_prefix("a"))] == []
    assert read_buffer(store.get_entry(buffer_key("a")).value) == {
        "0": [[5, {"k": "a", "ts": 5}], [20, {"k": "a", "ts": 20}]]}
    entry = read_buffer(store.get_entry(buffer_key("a")).value)  # as versions before inline lists wrote it: JSON
    store.apply_batch({buffer_key("a"): json.dumps(entry).encode()}, {})
    pad = "x" * inline_limit(store.max_value_size)
    run(spec, 1, [{"k": "a", "ts": 30, "pad": pad}])  # past the limit: onto the list
    assert len(list(store.scan_entries(variables_prefix("a")))) == 3
    assert read_buffer(store.get_entry(buffer_key("a")).value) == {"0": 3}
    run(spec, 2, [{"k": "a", "ts": 40}, {"k": "a", "ts": 110}])  # 40 appended to the list; [100, 200) inline
    assert read_buffer(store.get_entry(buffer_key("a")).value) == {"0": 4, "100": [[110, {"k": "a", "ts": 110}]]}
    assert outputs(spec) == []
    run(spec, 3, [{"k": "b", "ts": 190}])  # the watermark (140) passes 100
    assert outputs(spec) == [{"key": "a", "start": 0, "end": 100, "n": 4, "ts": [5, 20, 30, 40]}]
    assert [e.key for e in store.scan_entries(variables_prefix("a"))] == []
    assert read_buffer(store.get_entry(buffer_key("a")).value) == {"100": [[110, {"k": "a", "ts": 110}]]}


SHARDED = '''
def process(input, context):
    context.put_state(input["k"], "v", ttl_seconds=60)
    context.register_timer(input["at"])

def on_timer(key, ts, context):
    return {"key": key}
'''


def test_timers_and_ttls_beyond_an_entry_spread_over_shards(base_spec, clock):
    """More keys with timers and TTLs than one key group's entry can hold (a 2 KiB value limit here, 1 MiB
    by default): the groups spread them over shards, every timer fires once and every key expires."""
    spec = {**base_spec, "code": SHARDED, "user_config": {"eventTimeField": "ts"},
            "time": {"window": None, "ttl_ms": None, "ttl_used": True}}
    url = spec["state_config"]["metadata_url"]
    spec["state_config"] = {**spec["state_config"], "metadata_url": url + ("&" if "?" in url else "?") +
                            "max_value_size=2048"}
    store = cached_state_store(spec)
    if base_spec["state_provider"] == "partitioned":  # its values live in the state dir: a limit of its own
        store.max_value_size = 2048
    limit = store.max_value_size
    assert limit <= 2048
    keys = [f"user-{i:05d}" for i in range(4000)]
    run(spec, 0, [{"k": k, "ts": 1_000, "at": 10_000 + i % 7} for i, k in enumerate(keys)])
    groups = list(store.scan_entries("\x00g"))
    assert all(len(e.value) <= limit for e in groups)
    assert len([e for e in groups if "/" in e.key]) > 128  # every group's index took shards
    assert len(timers_of(store)) == len(keys)
    assert visible_entry(store, keys[0]) is not None
    clock["ms"] += 61_000
    run(spec, 1, [{"k": keys[0], "ts": 20_000, "at": 30_000}])  # every timer and TTL of batch 0 passed
    assert sorted(o["key"] for o in outputs(spec)) == sorted(keys)
    assert [t["key"] for t in timers_of(store)] == [keys[0]]  # batch 1's own
    assert [e.key for e in visible_entries(store)] == [keys[0]]  # written again in batch 1
    assert all(store.get_entry(k) is None for k in keys[1:200])  # deleted from storage


def test_a_follower_after_a_rescale_files_time_entries_under_their_keys_groups(tmp_path, clock):
    """Partition-owned state with windows, timers and TTLs rescaled from 2 to 3 partitions: a follower
    takes each internal entry (``\\0w\\0k``, ``\\0x\\0k``, ``\\0g<group>``) with the key group it
    belongs to, as the leader does, when it bootstraps from the inherited state and when it rebuilds a
    partition in place (issue 31, defect 4: it filtered by the raw crc32 of the internal key)."""
    url = f"local://{tmp_path / 'store'}"
    spec = {"tenant": "t", "namespace": "n", "name": "rescaled", "py_name": "f.py", "state_provider": "partitioned",
            "state_config": {"metadata_url": url, "state_dir": f"file://{tmp_path / 'shared'}",
                             "cache_dir": str(tmp_path / "cache")},
            "input_format": "json", "output": str(tmp_path / "out"), "key_field": "k"}
    spec = windowed(spec, windowLengthDurationMs=100)
    spec["code"] = WINDOW.replace("return {", "context.put_state(w.key, str(w.end), ttl_seconds=60)\n    return {")
    keys = [f"key{i}" for i in range(40)]
    run(spec, 0, [{"k": k, "ts": 10} for k in keys] + [{"k": k, "ts": 150} for k in keys[::2]], parallelism=2)
    store = cached_state_store(spec)

    def entries(of):
        return {e.key: (e.kind, bytes(e.value), e.version) for e in of.scan_entries()}

    internal = [k for k in entries(store) if k.startswith("\x00")]
    assert {k[:3] for k in internal} >= {"\x00w\x00", "\x00x\x00"} and any(k.startswith("\x00g") for k in internal)
    assert store.prepare_batch(3) == 3  # rescaled; no partition of the new layout committed yet
    follower = FollowerStore.open(store, "t", "n", "rescaled", local_dir=str(tmp_path / "follower"),
                                  check_registry=False, start=False)
    try:
        follower.step()  # bootstraps from the old partitions' state, filtered by each new one's key groups
        assert follower.status()["partitions"]["generation"] == 1
        assert entries(follower) == entries(store)
        # a new partition snapshots at its first commit: the follower rebuilds it in place, deleting first
        # the keys of its key groups it holds (and only those: the other partitions did not commit)
        run(spec, 1, [{"k": k, "ts": 250} for k in keys], parallelism=3, only=[0])
        follower.step()
        assert follower.status()["partitions"]["seqs"][1:] == [0, 0]
        assert entries(follower) == entries(store)
    finally:
        follower.close()
