"""Windows on Spark, exactly once: ``localrun --once`` with pulsar-admin's window flags, the driver
SIGKILLed after two micro-batches and run again; every window fires once with exactly its records,
late records go to the late-data topic once; on the embedded default and with --state-dir."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest

from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import read_status
from statekeep.state.timestate import timers_of
from statekeep.testing import wait_for

WINDOWED = '''
def process(records, context):
    w = context.get_window()
    context.incr_counter(w.key)  # the window's key: its state (with --state-dir, in the key's group)
    return {"key": w.key, "start": w.start, "end": w.end, "ids": sorted(r["id"] for r in records)}
'''
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]  # in both partitions' key groups
KEYS, FILES, LENGTH = len(NAMES), 6, 1000


def write_events(directory, part, events):
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".part-{part}.tmp"
    temp.write_text("".join(json.dumps(e) + "\n" for e in events))
    temp.rename(directory / f"part-{part}.jsonl")
    os.utime(directory / f"part-{part}.jsonl", (1_000_000 + part, 1_000_000 + part))  # Spark reads by mtime


def events_of(part):
    """File ``part`` covers event times [part*1000, part*1000 + 1000); file 4 also has a late record."""
    events = [{"k": NAMES[i % KEYS], "ts": part * LENGTH + (i * 37) % LENGTH, "id": f"{part}-{i}"} for i in range(40)]
    if part == 4:
        events.append({"k": "bob", "ts": 150, "id": "late"})  # window [0, 1000) fired long before
    return events


# time is state committed with each batch, the same on every commit path: once, on partition-owned state (the
# embedded path's driver kill: tests/test_functions_spark.py)
@pytest.mark.parametrize("state_dir", [True], ids=["state-dir"])
def test_windows_exactly_once_across_a_driver_sigkill(tmp_path, state_dir, spark_env):
    inputs, out, late, data = tmp_path / "in", tmp_path / "out", tmp_path / "late", tmp_path / "data"
    for part in range(FILES):
        write_events(inputs, part, events_of(part))
    py = tmp_path / "windowed.py"
    py.write_text(WINDOWED)
    command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", "win", "--py", str(py),
               "--inputs", str(inputs), "--key-field", "k", "--parallelism", "2", "--output", str(out),
               "--data-dir", str(data), "--once", "--window-length-duration-ms", str(LENGTH),
               "--late-data-topic", str(late),
               "--user-config", json.dumps({"eventTimeField": "ts", "inputOptions": {"maxFilesPerTrigger": "1"}})]
    if state_dir:
        command += ["--state-dir", str(tmp_path / "shared")]
    env = {**os.environ, **spark_env}
    first = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    with FunctionService.open(f"local://{data}") as service:
        assert wait_for(lambda: (read_status(service.registry.store, "public", "default", "win") or {})
                        .get("batches", 0) >= 2 or first.poll() is not None, timeout=300)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    time.sleep(1)
    rerun = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert rerun.returncode == 0, rerun.stderr[-3000:]

    expected: dict[tuple[str, int], list[str]] = defaultdict(list)
    for part in range(FILES - 1):  # the watermark (5999) has passed every window but the last
        for e in events_of(part):
            if e["id"] != "late":
                expected[(e["k"], e["ts"] // LENGTH * LENGTH)].append(e["id"])
    fired = [json.loads(line) for p in out.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert sorted((o["key"], o["start"]) for o in fired) == sorted(expected)  # each window once
    assert {(o["key"], o["start"]): o["ids"] for o in fired} == {k: sorted(v) for k, v in expected.items()}
    late_lines = [json.loads(line)["id"] for p in late.glob("*.jsonl") for line in p.read_text().splitlines()]
    assert late_lines == ["late"]
    with FunctionService.open(f"local://{data}") as service:
        state = service.registry.state_store("public", "default", "win")
        assert service.list_state("public", "default", "win")["items"] == [
            {"key": name, "numberValue": FILES - 1, **_rest(state, name)}
            for name in sorted(NAMES)]
        open_windows = timers_of(state)  # the last window of every key is still open, its timer registered
        assert sorted(t["key"] for t in open_windows) == sorted(NAMES)
        assert {t["timestamp"] for t in open_windows} == {FILES * LENGTH}


def _rest(state, key):
    from statekeep.state.shape import function_state_json

    body = function_state_json(state.get_entry(key))
    return {k: v for k, v in body.items() if k not in ("key", "numberValue")}


CLOCKED = '''
def process(value, context):
    context.register_timer(context.get_current_processing_time() + 1500, "processing")
    context.put_state("brief-" + value["k"], b"x", ttl_seconds=1)


def on_timer(key, timestamp_ms, context):
    return {"key": key, "fired": timestamp_ms}
'''


def test_processing_time_timers_and_ttl_act_while_the_input_is_idle(tmp_path, spark):
    """A running query with no new input still fires its processing-time timers and deletes expired
    keys (with a changelog tombstone): the clock source gives it a micro-batch every second."""
    from statekeep.functions.driver.spark import _checkpoint_sources, run_registered

    inputs, out = tmp_path / "in", tmp_path / "out"
    write_events(inputs, 0, [{"k": "alice"}, {"k": "bob"}])
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "idle", "inputs": [str(inputs)],
                                 "keyField": "k", "output": str(out), "parallelism": 2}, CLOCKED.encode())
        query = run_registered(service, url, "public", "default", "idle", checkpoint_root=str(tmp_path / "ck"),
                               spark=spark)
        try:
            state = service.registry.state_store("public", "default", "idle")

            def fired():
                return sorted(json.loads(line)["key"] for p in out.glob("*.jsonl")
                              for line in p.read_text().splitlines())

            # no input after the first micro-batch: only the clock source's batches can do this. A batch writes
            # its outputs before it commits its state, so the fired timers' removal may land a moment later
            assert wait_for(lambda: fired() == ["alice", "bob"] and state.get_entry("brief-alice") is None
                            and state.get_entry("brief-bob") is None and timers_of(state) == [], timeout=120), \
                (fired(), timers_of(state), query.status())
            assert query.status()["error"] is None
            assert query.status()["processed"] == 2  # the clock's batches hold no record
            tombstones = {r.key for r in state.read_changelog() if r.tombstone}
            assert {"brief-alice", "brief-bob"} <= tombstones
            assert _checkpoint_sources(spark, query.checkpoint) == 2  # the input and the clock
        finally:
            query.stop()


def test_a_checkpoint_without_the_clock_source_still_resumes(tmp_path, spark):
    """A function that kept no time when its query first ran gains timers by an update: its query
    resumes from the same checkpoint (Spark refuses a source more), its timers acting with input."""
    from statekeep.functions.driver.spark import _checkpoint_sources, run_registered

    inputs, out = tmp_path / "in", tmp_path / "out"
    write_events(inputs, 0, [{"k": "alice"}])
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "late", "inputs": [str(inputs)],
                                 "keyField": "k", "output": str(out), "parallelism": 2},
                                b"def process(value, context):\n    return None\n")
        first = run_registered(service, url, "public", "default", "late", checkpoint_root=str(tmp_path / "ck"),
                               spark=spark, once=True)
        first.await_termination()
        service.registry.update("public", "default", "late", code=CLOCKED.encode())
        write_events(inputs, 1, [{"k": "bob"}])
        query = run_registered(service, url, "public", "default", "late", checkpoint_root=str(tmp_path / "ck"),
                               spark=spark)
        try:
            assert wait_for(lambda: query.status()["processed"] >= 1 or query.status()["error"], timeout=120)
            assert query.status()["error"] is None, query.status()["error"]
            assert _checkpoint_sources(spark, query.checkpoint) == 1
            state = service.registry.state_store("public", "default", "late")
            assert [t["key"] for t in timers_of(state)] in (["bob"], [])  # registered (or already fired)
        finally:
            query.stop()


def test_a_once_run_fires_what_only_the_functions_watermark_passed(tmp_path, spark):
    """One partition's records reach t=10000, the other's only 1500: its window [1000, 2000) is not passed
    by its own watermark but is by the function's (10000), so the run ends with a batch without input that
    fires it (and a run where nothing is left needs none)."""
    from statekeep.functions.driver.spark import run_registered
    from statekeep.state.keygroups import key_group

    ahead = next(k for k in NAMES if key_group(k, 128) < 64)  # partition 0 of 2
    behind = next(k for k in NAMES if key_group(k, 128) >= 64)  # partition 1
    inputs, out = tmp_path / "in", tmp_path / "out"
    write_events(inputs, 0, [{"k": ahead, "ts": 10_000, "id": "a"}, {"k": behind, "ts": 1500, "id": "b"}])
    url = f"local://{tmp_path / 'data'}"
    with FunctionService.open(url) as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "lag", "inputs": [str(inputs)],
                                 "keyField": "k", "output": str(out), "parallelism": 2,
                                 "windowConfig": {"windowLengthDurationMs": LENGTH},
                                 "userConfig": {"eventTimeField": "ts"}}, WINDOWED.encode())
        query = run_registered(service, url, "public", "default", "lag", checkpoint_root=str(tmp_path / "ck"),
                               spark=spark, once=True)
        query.await_termination()
        assert query.status()["error"] is None
        assert query.status()["batches"] == 2  # the input's, then the last one
        fired = [json.loads(line) for p in out.glob("*.jsonl") for line in p.read_text().splitlines()]
        assert [(o["key"], o["start"], o["ids"]) for o in fired] == [(behind, 1000, ["b"])]
