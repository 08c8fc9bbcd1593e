"""``trigger`` of a function keeping time (windows, timers, event time, TTL) is a one-record micro-batch
(issue 31, defect 2): the record goes to the partition a batch would route it to, its windows, timers
and TTLs are kept as a batch keeps them, windows and timers fire when that batch's watermark passes them,
and the answer is that batch's output. Checked against the same records run through ``run_partition`` as
the driver runs them (``test_functions_time.run``), without Spark: through ``lifecycle.trigger`` and
``POST .../trigger`` of an in-process app."""

from __future__ import annotations

import glob
import json

import pytest

from statekeep.errors import InvalidArgumentError
from statekeep.functions.admin import lifecycle
from statekeep.functions.windowing import timerun
from statekeep.functions.config.service import FunctionService
from statekeep.functions.config.spec import executor_spec
from statekeep.state import timestate
from statekeep.state.partitioned import state_storage
from statekeep.state.keygroups import KEY_GROUPS, key_group
from statekeep.state.timestate import decode_group, stored_watermark_of, timers_of
from test_functions_time import WINDOW, run

# keys in the first (A, A2) and the second half (B) of the key groups: partitions 0 and 1 of two
A, A2 = [k for k in (f"a{i}" for i in range(100)) if key_group(k, KEY_GROUPS) < KEY_GROUPS // 2][:2]
B = next(k for k in (f"b{i}" for i in range(100)) if key_group(k, KEY_GROUPS) >= KEY_GROUPS // 2)

TIMED = '''
def process(input, context):
    context.register_timer(input["at"])
    context.incr_counter(input["k"])
    return {"timers": context.list_timers()}

def on_timer(key, ts, context):
    return {"fired": key, "at": ts, "seen": context.get_counter(key)}
'''


@pytest.fixture
def clock(monkeypatch):
    now = {"ms": 1_000_000}
    monkeypatch.setattr(timerun, "CLOCK", lambda: now["ms"])
    monkeypatch.setattr(timestate, "wall_clock_ms", lambda: now["ms"])
    return now


@pytest.fixture(params=["embedded", "partitioned"])
def functions(request, tmp_path, clock):
    """``create(code, **config)`` makes two functions alike: ``trig`` (triggered) and ``twin`` (run by
    micro-batches), parallelism 2, keyed by ``k``, event time ``ts``; yields ``(service, url, create)``."""
    url = f"local://{tmp_path / 'data'}"
    service = FunctionService.open(url)

    def create(code: str, **config) -> None:
        for name in ("trig", "twin"):
            base = {"tenant": "t", "namespace": "n", "name": name, "inputs": [str(tmp_path / "in")],
                    "keyField": "k", "inputFormat": "json", "output": str(tmp_path / name), "parallelism": 2,
                    "userConfig": {"eventTimeField": "ts"}}
            if request.param == "partitioned":
                base["stateStorage"] = state_storage(str(tmp_path / "shared" / name))
            service.registry.create({**base, **config}, code.encode())
            # the function has run (its partition-owned state laid out for its parallelism), as a batch sees it
            spec = executor_spec(service.registry, url, "t", "n", name)[0]
            spec.state_store().partitioning(2)

    yield service, url, create
    service.close()


def twin_batch(service, url, batch: int, record: dict) -> list:
    """``record`` as micro-batch ``batch`` of ``twin``, run by the partition it is routed to (the others
    would only do what is due without it); its outputs."""
    spec = executor_spec(service.registry, url, "t", "n", "twin")[0]
    run(spec, batch, [record], parallelism=2, only=[key_group(record["k"], KEY_GROUPS) * 2 // KEY_GROUPS])
    found = []
    for path in sorted(glob.glob(f"{spec.output}/batch-{batch:012d}-*.jsonl")):
        with open(path) as lines:
            found.extend(json.loads(line) for line in lines)
    return found


def time_view(service, name: str) -> dict:
    """A function's time and state as a batch leaves them: timers, watermark, user and internal entries
    (a key group's entry without the batch id a micro-batch notes in it for its replay)."""
    store = service.registry.state_store("t", "n", name)
    entries = {}
    for entry in store.scan_entries():
        if entry.key.startswith("\x00g"):
            group = decode_group(entry.value)
            group.pop("wb", None)
            entries[entry.key] = group
        else:
            entries[entry.key] = entry.value if entry.value is not None else entry.counter
    return {"timers": timers_of(store), "watermark": stored_watermark_of(store), "entries": entries}


def answer_of(outputs: list) -> object:
    """A one-record batch's outputs as the trigger answers them."""
    return None if not outputs else outputs[0] if len(outputs) == 1 else outputs


def test_trigger_of_a_windowed_function_is_a_one_record_batch(functions, tmp_path):
    """The record goes into its key's window; a window fires only once the watermark of the partition the
    record is routed to passes its end (B's record, in the other partition, fires none of A's windows);
    the state, timers and watermark are what the same batches leave, and the answer is their output."""
    service, url, create = functions
    create(WINDOW, windowConfig={"windowLengthDurationMs": 100}, stateTtlSeconds=60)
    records = [{"k": A, "ts": 10}, {"k": A, "ts": 50}, {"k": B, "ts": 150}, {"k": A, "ts": 120},
               {"k": B, "ts": 420}, {"k": A, "ts": 430}]
    answers = []
    for batch, record in enumerate(records):
        answers.append(lifecycle.trigger(service.registry, "t", "n", "trig", json.dumps(record)))
        assert json.loads(json.dumps(answers[-1])) == answer_of(twin_batch(service, url, batch, record)), batch
        assert time_view(service, "trig") == time_view(service, "twin"), batch
        if batch == 1:  # A's window [0, 100) holds both records, not fired: the watermark is 50
            assert answers == [None, None]
            assert timers_of(service.registry.state_store("t", "n", "trig")) == [
                {"key": A, "timestamp": 100, "domain": "window"}]
    assert answers[2] is None  # watermark 150 in B's partition: A's window waits for A's partition
    assert answers[3] == {"key": A, "start": 0, "end": 100, "n": 2, "ts": [10, 50]}
    assert answers[4] == {"key": B, "start": 100, "end": 200, "n": 1, "ts": [150]}
    assert answers[5] == {"key": A, "start": 100, "end": 200, "n": 1, "ts": [120]}
    # what fired went to the function's output too, as from the batches: no window's output is lost
    written = {name: sorted(json.dumps(json.loads(line), sort_keys=True) for path in (tmp_path / name).glob("*.jsonl")
                            for line in path.read_text().splitlines()) for name in ("trig", "twin")}
    assert written["trig"] == written["twin"] and len(written["trig"]) == 3


def test_trigger_of_a_function_with_timers_and_a_ttl(functions, clock):
    """register_timer works under trigger and the timer is stored; it fires (on_timer's output joins the
    answer) once the watermark passes it; stateTtlSeconds gives the key its expiry, and an expired key
    is deleted by the trigger of a record of its partition, as by a batch."""
    service, url, create = functions
    create(TIMED, stateTtlSeconds=60)
    records = [{"k": A, "ts": 100, "at": 1000}, {"k": B, "ts": 100, "at": 1000}, {"k": A, "ts": 2000, "at": 5000}]
    for batch, record in enumerate(records):
        answer = lifecycle.trigger(service.registry, "t", "n", "trig", json.dumps(record))
        assert json.loads(json.dumps(answer)) == answer_of(twin_batch(service, url, batch, record)), batch
        assert time_view(service, "trig") == time_view(service, "twin"), batch
    assert json.loads(json.dumps(answer)) == [{"timers": [[1000, "event"], [5000, "event"]]},
                                              {"fired": A, "at": 1000, "seen": 2}]
    store = service.registry.state_store("t", "n", "trig")
    assert [(t["key"], t["timestamp"]) for t in timers_of(store)] == [(B, 1000), (A, 5000)]
    assert store.get_entry(timestate.expiry_key(A)) is not None  # stateTtlSeconds applied
    clock["ms"] += 61_000  # A and B expire; a record of A's partition deletes A (not B, in the other one)
    record = {"k": A2, "ts": 2000, "at": 7000}
    answer = lifecycle.trigger(service.registry, "t", "n", "trig", json.dumps(record))
    assert json.loads(json.dumps(answer)) == answer_of(twin_batch(service, url, 3, record))
    assert time_view(service, "trig") == time_view(service, "twin")
    assert store.get_entry(A) is None and store.get_entry(B) is not None


def test_trigger_over_rest_and_refusals(functions, tmp_path):
    """``POST .../trigger`` answers the same; a process_batch function with a windowConfig is refused with
    the reason a batch gives, and an on_timer that raises is the trigger's 400, writing nothing."""
    from fastapi.testclient import TestClient

    from statekeep.server import create_app

    service, url, create = functions
    create(TIMED)
    app = create_app({"metadata_url": url})
    try:
        client = TestClient(app)
        r = client.post("/admin/v3/functions/t/n/trig/trigger", files={"data": (None, json.dumps(
            {"k": A, "ts": 100, "at": 1000}))})
        assert r.status_code == 200 and json.loads(r.text) == {"timers": [[1000, "event"]]}, r.text
        assert [t["key"] for t in client.get("/admin/v3/functions/t/n/trig/timers").json()["timers"]] == [A]
    finally:
        app.state.service.close()
    batch = "def process_batch(records, context):\n    return records\n"
    service.registry.create({"tenant": "t", "namespace": "n", "name": "pb", "inputs": ["in"], "keyField": "k",
                             "windowConfig": {"windowLengthDurationMs": 100}}, batch.encode())
    with pytest.raises(InvalidArgumentError, match="a windowConfig needs process"):
        lifecycle.trigger(service.registry, "t", "n", "pb", json.dumps({"k": A}))
    failing = TIMED.replace('return {"fired"', 'raise ValueError("no")\n    return {"fired"')
    service.registry.create({"tenant": "t", "namespace": "n", "name": "bad", "inputs": ["in"], "keyField": "k",
                             "inputFormat": "json", "userConfig": {"eventTimeField": "ts"}}, failing.encode())
    with pytest.raises(InvalidArgumentError, match="ValueError: no"):
        lifecycle.trigger(service.registry, "t", "n", "bad", json.dumps({"k": A, "ts": 5000, "at": 1000}))
    assert timers_of(service.registry.state_store("t", "n", "bad")) == []  # nothing written
