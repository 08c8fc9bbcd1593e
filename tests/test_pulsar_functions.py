"""Pulsar Python functions and the whole Context, without Spark: the three kinds of entry point,
``from pulsar import Function`` with and without pulsar-client, each Context method on one
(batch, partition), per-record retries / dead letters / timeouts that take back a failed record's
state, the stats the driver sums, and trigger through the function's real state."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
import textwrap

import pytest

from statekeep.errors import InvalidArgumentError, NotFoundError
from statekeep.functions.admin import lifecycle
from statekeep.functions.driver import stats
from statekeep.functions.config.loader import (BATCH, NATIVE, RECORD, FunctionLoadError, load_function,
                                               validate_function_source)
from statekeep.functions.executor.errors import FunctionRecordError
from support.specs import run_partition
from statekeep.functions.config.service import FunctionService
from statekeep.state import open_provider

CLASS = '''
from pulsar import Function

class Echo(Function):
    def process(self, input, context):
        context.incr_counter(input["word"], 1)
        return input
'''


@pytest.fixture
def spec(tmp_path):
    return {"tenant": "public", "namespace": "default", "name": "wc", "py_name": "wc.py",
            "state_provider": "embedded", "state_config": {"metadata_url": f"local://{tmp_path / 'state'}"},
            "input_format": "json", "source_format": "json", "output": None, "user_config": {}}


def counters(spec) -> dict:
    store = open_provider(spec["state_provider"], spec["state_config"]).get_state_store("public", "default", "wc")
    return {e.key: e.counter for e in store.scan_entries()}


def words(*ws: str) -> list[str]:
    return [json.dumps({"word": w}) for w in ws]


# ---- entry points -------------------------------------------------------------------------------

def test_the_three_kinds_of_entry_point_and_a_class_by_class_name():
    assert load_function("def process(input, context):\n    return 1\n")[1] == RECORD
    assert load_function("def process(input):\n    return 1\n")[1] == NATIVE
    assert load_function("def process(i, c): pass\ndef process_batch(records, context): pass\n")[1] == BATCH
    process, kind = load_function(CLASS, "echo.py", "echo.Echo")
    assert kind == RECORD and process.__self__.__class__.__name__ == "Echo"
    with pytest.raises(FunctionLoadError, match="no class 'Missing'"):
        load_function(CLASS, "echo.py", "echo.Missing")
    with pytest.raises(FunctionLoadError, match="creating Needy"):
        load_function("class Needy:\n    def __init__(self, x): pass\n    def process(self, i, c): pass\n",
                      "n.py", "n.Needy")


@pytest.mark.parametrize("code, class_name, error", [
    (CLASS, "echo.Echo", None),
    ("def process(input):\n    pass\n", None, None),
    ("class C(Base):\n    pass\n", "m.C", None),  # process may come from a base class
    ("class C:\n    pass\n", "m.C", "has no method process"),
    ("class C:\n    def process(self, input):\n        pass\n", "m.C", r"process\(self, input, context\)"),
    (CLASS, "echo.Other", "must define a top-level class 'Other'"),
    ("def process(a, b, c):\n    pass\n", None, "process must be"),
    ("def process():\n    pass\n", None, "process must be"),
])
def test_source_check_without_running_it(code, class_name, error):
    if error is None:
        validate_function_source(code.encode(), "f.py", class_name)
    else:
        with pytest.raises(InvalidArgumentError, match=error):
            validate_function_source(code.encode(), "f.py", class_name)


BLOCK_PULSAR = textwrap.dedent('''
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "pulsar" or name.startswith("pulsar."):
                raise ImportError("pulsar-client is not installed here")
    sys.meta_path.insert(0, Block())
''')


def test_from_pulsar_import_function_works_without_pulsar_client():
    script = BLOCK_PULSAR + textwrap.dedent(f'''
        from statekeep.functions.config.loader import load_function
        process, kind = load_function({CLASS!r}, "echo.py", "echo.Echo")
        import pulsar, pulsar.functions.function, statekeep.pulsar_compat
        assert pulsar is statekeep.pulsar_compat, pulsar
        assert isinstance(process.__self__, pulsar.functions.function.Function)
        print(kind, type(process.__self__).__mro__[1].__module__)
    ''')
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["record", "statekeep.pulsar_compat.functions.function"]


def test_with_pulsar_client_installed_its_real_function_class_runs(spec):
    # the package, not the module name (an earlier test may have installed the shim as "pulsar"); the test
    # extra installs it, so a missing client fails here instead of skipping
    importlib.metadata.version("pulsar-client")
    import pulsar

    from statekeep.pulsar_compat import install

    assert "statekeep" not in pulsar.__file__ and install() is False  # the real client, not shadowed
    process, _ = load_function(CLASS, "echo.py", "echo.Echo")
    assert isinstance(process.__self__, pulsar.Function)
    stats_ = run_partition({**spec, "code": CLASS, "class_name": "echo.Echo"}, 0, 0, words("a", "b", "a"))
    assert stats_.processed == 3 and counters(spec) == {"a": 2, "b": 1}


def test_native_function_on_text_and_json(spec, tmp_path):
    out = tmp_path / "out"
    native = "def process(input):\n    return [type(input).__name__, input]\n"
    run_partition({**spec, "code": native, "input_format": "text", "output": str(out)}, 0, 0, ["plain line"])
    run_partition({**spec, "code": native, "output": str(out)}, 1, 0, words("w"))
    got = [json.loads(line) for p in sorted(out.iterdir()) for line in p.read_text().splitlines()]
    assert got == [["str", "plain line"], ["dict", {"word": "w"}]]


# ---- the Context ---------------------------------------------------------------------------------

CONTEXT_ALL = '''
def process(input, context):
    context.record_metric("size", input.get("n", 0))
    return {
        "id": context.get_message_id(), "key": context.get_message_key(), "pkey": context.get_partition_key(),
        "okey": context.get_ordering_key(), "time": context.get_message_eventtime(),
        "props": context.get_message_properties(), "topic": context.get_current_message_topic_name(),
        "inputs": context.get_input_topics(), "output": context.get_output_topic(),
        "fid": context.get_function_id(), "iid": context.get_instance_id(), "ver": context.get_function_version(),
        "config": context.get_user_config_map(), "greeting": context.get_user_config_value("greeting"),
        "secret": context.get_secret("db"), "unlisted": context.get_secret("PATH"),
        "names": [context.get_function_tenant(), context.get_function_namespace(), context.get_function_name()],
        "serde": context.get_output_serde_class_name(), "ack": context.ack("id", "topic"),
    }
'''


def test_each_context_method_on_a_partition(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("db", "s3cret")  # the environment secrets provider, as Pulsar's default
    out = tmp_path / "out"
    spec = {**spec, "code": CONTEXT_ALL, "output": str(out), "inputs": ["in/a", "in/b"], "function_id": "f-1",
            "function_version": 3, "secrets": {"db": "env"},
            "user_config": {"greeting": "hi", "eventTimeField": "ts"}}
    records = [json.dumps({"word": "x", "ts": 1700000000000, "n": 2}), json.dumps({"word": "y", "n": 5})]
    stats_ = run_partition(spec, 12, 1, records, record_keys=["x", "y"], topics=["file://in/b/1.json", "in/a/2.json"])
    first, second = [json.loads(line) for p in out.iterdir() for line in p.read_text().splitlines()]
    assert first["id"] == "12:1:0" and second["id"] == "12:1:1"
    assert (first["key"], first["pkey"], first["okey"], second["key"]) == ("x", "x", "x", "y")
    assert first["time"] == 1700000000000 and second["time"] is None
    assert first["props"] == {} and (first["topic"], second["topic"]) == ("in/b", "in/a")
    assert first["inputs"] == ["in/a", "in/b"] and first["output"] == str(out)
    assert (first["fid"], first["iid"], first["ver"]) == ("f-1", 1, 3)
    assert first["config"] == {"greeting": "hi", "eventTimeField": "ts"} and first["greeting"] == "hi"
    assert first["secret"] == "s3cret" and first["unlisted"] is None  # only names in the secrets map
    assert first["names"] == ["public", "default", "wc"] and first["serde"] == "serde.IdentitySerDe"
    assert first["ack"] is None
    assert stats_.metrics == {"size": [7.0, 2.0, 5.0]}  # sum, count, last


def test_changelog_input_properties_and_one_input_topic(spec, tmp_path):
    out = tmp_path / "out"
    code = "def process(input, context):\n    return [context.get_message_properties(), " \
           "context.get_current_message_topic_name()]\n"
    record = json.dumps({"offset": 4, "key": "k", "kind": "counter", "version": 2, "tombstone": False})
    run_partition({**spec, "code": code, "output": str(out), "source_format": "statekeep-changelog",
                   "inputs": ["statekeep://t/n/f"]}, 0, 0, [record])
    (got,) = [json.loads(line) for p in out.iterdir() for line in p.read_text().splitlines()]
    assert got == [{"offset": "4", "kind": "counter", "version": "2"}, "statekeep://t/n/f"]


@pytest.mark.parametrize("bad, error", [
    ("context.record_metric('m', 'x')", "a metric value must be a number"),
    ("context.record_metric('', 1)", "non-empty str"),
    ("context.publish('', 'x')", "publish needs an output name"),
])
def test_context_refuses_bad_arguments(spec, bad, error):
    code = f"def process(input, context):\n    {bad}\n"
    with pytest.raises(FunctionRecordError, match=error):
        run_partition({**spec, "code": code}, 0, 0, words("a"))


def test_publish_is_written_with_the_batch_and_a_replay_writes_it_once(spec, tmp_path):
    side = tmp_path / "side"
    code = f"def process(input, context):\n    context.publish({str(side)!r}, input['word'].encode())\n"
    assert run_partition({**spec, "code": code}, 5, 0, words("a", "b")).applied
    assert not run_partition({**spec, "code": code}, 5, 0, words("a", "b")).applied  # replay: its marker
    files = list(side.iterdir())
    assert [re.sub(r"@\d{13}\.", "@MS.", f.name) for f in files] == [
        "batch-000000000005-part-00000-pub-public.default.wc@MS.jsonl"]
    assert files[0].read_text().splitlines() == ['"a"', '"b"']


# ---- failing records: retries, dead letters, timeouts -------------------------------------------

FLAKY = '''
attempts = {}

def process(input, context):
    word = input["word"]
    context.incr_counter(word, 1)
    context.put_state("last", word)
    attempts[word] = attempts.get(word, 0) + 1
    if word.startswith("flaky") and attempts[word] == 1:
        raise RuntimeError("first attempt fails")
    if word == "bad":
        raise RuntimeError("always fails")
    if word == "slow":
        import time
        time.sleep(0.05)
    return word
'''


def test_a_retried_record_applies_its_state_once(spec):
    stats_ = run_partition({**spec, "code": FLAKY, "max_retries": 1}, 0, 0, words("a", "flaky1", "a"))
    assert (stats_.processed, stats_.user_exceptions, stats_.skipped) == (3, 1, 0)
    assert counters(spec) == {"a": 2, "flaky1": 1, "last": None}


def test_after_the_retries_a_record_goes_to_the_dead_letter_output_with_no_state(spec, tmp_path):
    dead = tmp_path / "dead"
    stats_ = run_partition({**spec, "code": FLAKY, "max_retries": 2, "dead_letter": str(dead)}, 0, 0,
                           words("a", "bad", "b"))
    assert (stats_.processed, stats_.user_exceptions, stats_.dead_letters) == (2, 3, 1)
    assert counters(spec) == {"a": 1, "b": 1, "last": None}  # "bad" changed nothing; "last" was b
    store = open_provider(spec["state_provider"], spec["state_config"]).get_state_store("public", "default", "wc")
    assert store.get("last") == b"b"
    (dead_file,) = dead.iterdir()
    assert [json.loads(line) for line in dead_file.read_text().splitlines()] == [{"word": "bad"}]
    assert all("always fails" in message for message, _ in stats_.exceptions)


def test_without_dead_letter_a_record_is_skipped_after_its_retries(spec):
    stats_ = run_partition({**spec, "code": FLAKY, "max_retries": 0}, 0, 0, words("bad", "c"))
    assert (stats_.processed, stats_.skipped, stats_.user_exceptions) == (1, 1, 1)
    assert counters(spec) == {"c": 1, "last": None}


def test_a_record_over_timeout_ms_is_a_user_exception(spec):
    stats_ = run_partition({**spec, "code": FLAKY, "timeout_ms": 10, "max_retries": 0}, 0, 0, words("slow", "d"))
    assert (stats_.processed, stats_.skipped) == (1, 1) and "timeoutMs=10" in stats_.errors[0]
    assert counters(spec) == {"d": 1, "last": None}
    with pytest.raises(FunctionRecordError, match="ProcessingTimeout"):  # no retries configured: fails
        run_partition({**spec, "code": FLAKY, "timeout_ms": 10}, 1, 0, words("slow"))


# ---- stats ---------------------------------------------------------------------------------------

def test_stats_summed_per_instance_in_pulsars_shapes():
    instances: dict = {}
    row = {"partition": 1, "received": 4, "processed": 3, "user_exceptions": 1, "dead_letters": 0, "latency": 0.002,
           "metrics": json.dumps({"m": [6.0, 3.0, 1.0]}), "exceptions": json.dumps([["boom", 5]])}
    stats.add_batch(instances, [row, {"partition": 0, "received": 0, "applied": False}], now_ms=1_000_000)
    stats.add_batch(instances, [row], now_ms=1_030_000)
    status = {"running": True, "error": None, "workerId": "w1", "instances": instances}
    shaped = stats.function_stats(status, 2, now_ms=1_070_000)
    assert (shaped["receivedTotal"], shaped["processedSuccessfullyTotal"], shaped["userExceptionsTotal"]) == (8, 6, 2)
    assert shaped["avgProcessLatency"] == pytest.approx(0.5)  # ms per received record
    assert shaped["1min"]["receivedTotal"] == 4  # only the batch of the last minute
    assert shaped["lastInvocation"] == 1_030_000
    inst0, inst1 = (i["metrics"] for i in shaped["instances"])
    assert inst0["receivedTotal"] == 0 and inst1["userMetrics"] == {"m": 2.0}
    full = stats.function_status(status, 2, num_restarts=3)
    assert full["numInstances"] == 2 and full["numRunning"] == 2
    one = full["instances"][1]["status"]
    assert one["numReceived"] == 8 and one["numRestarts"] == 3 and one["workerId"] == "w1"
    assert one["latestUserExceptions"] == [{"exceptionString": "boom", "timestampMs": 5}] * 2
    lines = stats.metrics_lines([("t/n/f", status)])
    assert 'statekeep_function_user_metric_sum{function="t/n/f",metric="m"} 12.0' in lines
    assert 'statekeep_function_received_total{function="t/n/f"} 8' in lines


# ---- lifecycle and trigger on a registry ----------------------------------------------------------

@pytest.fixture
def service(tmp_path):
    with FunctionService.open(f"local://{tmp_path / 'data'}") as s:
        yield s


def create(service, name: str, code: str, **extra) -> None:
    service.registry.create({"tenant": "t", "namespace": "n", "name": name, "inputs": ["in.jsonl"],
                             "keyField": "word", **extra}, code.encode())


def test_stop_start_restart_markers_live_and_die_with_the_function(service):
    registry = service.registry
    create(service, "f", CLASS, className="echo.Echo")
    assert not lifecycle.is_stopped(registry, "t", "n", "f")
    assert lifecycle.set_stopped(registry, "t", "n", "f", True) is True
    assert lifecycle.set_stopped(registry, "t", "n", "f", True) is False  # already stopped
    assert lifecycle.is_stopped(registry, "t", "n", "f")
    assert [lifecycle.request_restart(registry, "t", "n", "f") for _ in range(2)] == [1, 2]
    assert registry.list("t", "n") == ["f"]  # the markers are not functions
    registry.delete("t", "n", "f")
    create(service, "f", CLASS, className="echo.Echo")  # created again: starts running, no restarts
    assert not lifecycle.is_stopped(registry, "t", "n", "f") and lifecycle.restart_count(registry, "t", "n", "f") == 0
    with pytest.raises(NotFoundError):
        lifecycle.set_stopped(registry, "t", "n", "absent", True)
    with pytest.raises(NotFoundError):
        lifecycle.request_restart(registry, "t", "n", "absent")


def test_trigger_runs_through_the_real_state(service):
    create(service, "f", CLASS, className="echo.Echo")
    assert lifecycle.trigger(service.registry, "t", "n", "f", b'{"word": "hi"}') == {"word": "hi"}
    lifecycle.trigger(service.registry, "t", "n", "f", '{"word": "hi"}\n')
    assert service.query_state("t", "n", "f", "hi")["numberValue"] == 2
    with pytest.raises(InvalidArgumentError, match="not a JSON value"):
        lifecycle.trigger(service.registry, "t", "n", "f", b"{not json")
    create(service, "boom", "def process(input, context):\n    context.incr_counter('k', 1)\n    raise KeyError('x')\n")
    with pytest.raises(InvalidArgumentError, match="raised on the trigger data: KeyError"):
        lifecycle.trigger(service.registry, "t", "n", "boom", b'{"word": "a"}')
    with pytest.raises(NotFoundError):
        service.query_state("t", "n", "boom", "k")  # nothing written
    create(service, "txt", "def process(input):\n    return input[::-1]\n", inputFormat="text")
    assert lifecycle.output_text(lifecycle.trigger(service.registry, "t", "n", "txt", b"abc")) == "cba"
    assert lifecycle.output_text({"a": 1}) == '{"a": 1}' and lifecycle.output_text(None) == ""
