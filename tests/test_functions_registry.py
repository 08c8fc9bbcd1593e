"""The function registry on every metadata backend: configuration and code stored together,
validation before anything is written, delete removes the state too."""

from __future__ import annotations

import pytest

from statekeep.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError, ValueTooLargeError
from statekeep.functions.config.loader import validate_function_source as validate_source
from statekeep.functions.config.model import FunctionConfig
from statekeep.functions.config.service import FunctionService

CODE = b"def process(input, context):\n    context.incr_counter(input, 1)\n"


@pytest.fixture
def service(store_url):
    with FunctionService.open(store_url) as s:
        yield s


def config(name="wc", **extra):
    return {"tenant": "acme", "namespace": "prod", "name": name, "inputs": ["in"], **extra}


def test_create_get_list_update_delete(service):
    reg = service.registry
    created = reg.create(config(userConfig={"a": 1}, keyField="word"), CODE)
    assert created.fqfn == "acme/prod/wc" and reg.get("acme", "prod", "wc") == created
    assert reg.get_code("acme", "prod", "wc") == CODE
    reg.create(config("other"), CODE)
    assert reg.list("acme", "prod") == ["other", "wc"] and reg.list("acme", "none") == []
    with pytest.raises(AlreadyExistsError, match="already exists"):
        reg.create(config(), CODE)
    updated = reg.update("acme", "prod", "wc", {"parallelism": 3, "output": None}, b"def process(a, b):\n    pass\n")
    assert updated.parallelism == 3 and updated.userConfig == {"a": 1} and updated.keyField == "word"
    assert reg.get_code("acme", "prod", "wc").startswith(b"def process(a, b)")
    with pytest.raises(InvalidArgumentError, match="differs"):
        reg.update("acme", "prod", "wc", {"name": "x"})
    with pytest.raises(InvalidArgumentError, match="syntax"):
        reg.update("acme", "prod", "wc", {"parallelism": 5}, b"def process(:\n")
    assert reg.get("acme", "prod", "wc").parallelism == 3  # the failed update wrote nothing
    reg.delete("acme", "prod", "wc")
    with pytest.raises(NotFoundError):
        reg.get("acme", "prod", "wc")
    with pytest.raises(NotFoundError):
        reg.delete("acme", "prod", "wc")
    with pytest.raises(NotFoundError):
        reg.update("acme", "prod", "wc", {"parallelism": 1})
    with pytest.raises(NotFoundError):
        reg.state_store("acme", "prod", "wc")
    assert reg.list("acme", "prod") == ["other"]


def test_delete_then_recreate_starts_with_empty_state(service):
    reg = service.registry
    reg.create(config(), CODE)
    first = reg.incarnation("acme", "prod", "wc")
    state = reg.state_store("acme", "prod", "wc")
    state.incr("hits", 5)
    state.put("last", b"x")
    state.apply_batch({}, {"hits": 1}, marker="batch-0-0")
    reg.delete("acme", "prod", "wc")
    with pytest.raises(NotFoundError):
        reg.incarnation("acme", "prod", "wc")
    reg.create(config(), CODE)
    # a new incarnation (its own checkpoint) even where versions restart and no creation time is kept
    second = reg.incarnation("acme", "prod", "wc")
    assert second != first
    reg.update("acme", "prod", "wc", {"parallelism": 2})
    assert reg.incarnation("acme", "prod", "wc") == second  # an update is the same incarnation
    again = reg.state_store("acme", "prod", "wc")
    assert list(again.scan()) == [] and again.get_counter("hits") == 0 and not again.has_marker("batch-0-0")
    assert again.read_changelog() == []


def test_inputs_its_query_read_cannot_change(service):
    """Issue 52: a changed input failed the query with a page of Spark's plan. Once a run read its inputs
    (``record_sources``), an update to others is refused in one line, before anything is written; until then, and
    with them kept, the function updates as ever; a new incarnation reads whatever it is given."""
    reg = service.registry
    reg.create(config(), CODE)
    reg.update("acme", "prod", "wc", {"inputs": ["a"]})  # read nothing yet: free
    reg.record_sources(reg.get("acme", "prod", "wc"))
    reg.record_sources(reg.get("acme", "prod", "wc"))  # idempotent
    before = reg.get("acme", "prod", "wc")
    for changes in ({"inputs": ["b"]}, {"inputs": ["a", "b"]}, {"inputFormat": "text"}):
        with pytest.raises(InvalidArgumentError) as refused:
            reg.update("acme", "prod", "wc", {**changes, "parallelism": 4})
        assert "\n" not in str(refused.value) and "delete and create it" in str(refused.value)
        assert reg.get("acme", "prod", "wc") == before  # nothing written
    assert "has read a, and its Spark checkpoint resumes only with the sources it started with, so it cannot " \
           "read b instead" in str(pytest.raises(InvalidArgumentError, reg.update, "acme", "prod", "wc",
                                                 {"inputs": ["b"]}).value)
    assert reg.update("acme", "prod", "wc", {"inputs": ["a"], "parallelism": 4}).parallelism == 4  # kept: free
    reg.delete("acme", "prod", "wc")
    reg.create(config(), CODE)
    assert reg.update("acme", "prod", "wc", {"inputs": ["b"]}).inputs == ["b"]  # a new incarnation


def test_custom_state_provider(service, store_url):
    reg = service.registry
    storage = {"provider": "metadata", "config": {"metadata_url": store_url, "root": "/elsewhere"}}
    reg.create(config(stateStorage=storage), CODE)
    reg.state_store("acme", "prod", "wc").put("k", b"v")
    assert reg.store.exists("/elsewhere/acme/prod/wc/kv/k")
    with pytest.raises(InvalidArgumentError, match="cannot be changed"):
        reg.update("acme", "prod", "wc", {"stateStorage": {"provider": "metadata", "config": {"metadata_url": "memory://"}}})
    reg.delete("acme", "prod", "wc")
    assert not reg.store.exists("/elsewhere/acme/prod/wc")
    with pytest.raises(InvalidArgumentError, match="unknown state provider"):
        reg.create(config("x", stateStorage={"provider": "nope", "config": {}}), CODE)
    reg.allow_custom_providers = False
    with pytest.raises(InvalidArgumentError, match="stateStorage"):
        reg.create(config("y", stateStorage=storage), CODE)
    assert reg.list("acme", "prod") == []


def test_code_too_large(service):
    big = CODE + b"#" * (service.registry.store.max_value_size + 1)
    with pytest.raises(ValueTooLargeError):
        service.registry.create(config(), big)
    assert service.registry.list("acme", "prod") == []


def test_create_reads_py_path_when_no_code_given(service, tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(CODE)
    service.registry.create(config(py=str(path)))
    assert service.registry.get_code("acme", "prod", "wc") == CODE
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        service.registry.create(config("g", py=str(tmp_path / "missing.py")))


@pytest.mark.parametrize("bad, message", [
    ({"tenant": "a/b"}, "tenant"), ({"namespace": ".."}, "namespace"), ({"name": ""}, "function name"),
    ({"inputs": []}, "inputs"), ({"inputs": [1]}, "input"), ({"inputs": None}, "inputs"),
    ({"parallelism": 0}, "parallelism"), ({"parallelism": True}, "parallelism"),
    ({"userConfig": [1]}, "userConfig"), ({"className": "Foo."}, "className"), ({"runtime": "GO"}, "PYTHON"),
    ({"stateStorage": {"provider": 1}}, "stateStorage"), ({"output": ""}, "output"),
    ({"customSchemaInputs": [None, None]}, "customSchemaInputs"), ({"customSerdeInputs": "x"}, "customSerdeInputs"),
    ({"inputSpecs": 3}, "inputSpecs"), ({"inputFormat": "orc"}, "inputFormat.*parquet"),
    ({"changelogFormat": "avro"}, "changelogFormat"),
])
def test_config_validation(bad, message):
    with pytest.raises(InvalidArgumentError, match=message):
        FunctionConfig.from_json(config(**bad))


def test_config_accepts_pulsar_admin_extras():
    cfg = FunctionConfig.from_json(config(autoAck=True, cleanupSubscription=None, className="mod.process",
                                          inputs="a, b", runtime="python"))
    assert cfg.inputs == ["a", "b"] and cfg.className == "mod.process" and cfg.runtime == "PYTHON"
    assert "autoAck" not in cfg.to_json()


@pytest.mark.parametrize("code, message", [
    (b"def process(input, context):\n  if True:\n pass\n", "f.py:3"),
    (b"x = 1\n", "def process"),
    (b"async def process(input, context):\n    pass\n", "async"),
    (b"def process(input, context, extra):\n    pass\n", r"process\(input, context\)"),
    (b"def process(input, context, *, flag):\n    pass\n", r"process\(input, context\)"),
    (b"if True:\n    def process(input, context):\n        pass\n", "top-level"),
    (b"\x00", "null bytes"),
    (b"\xc3\x28", "UTF-8"),
    (b"(" * 300 + b")" * 300, "f.py"),
    ("text", "bytes"),
])
def test_source_validation(code, message):
    with pytest.raises(InvalidArgumentError, match=message):
        validate_source(code, "f.py")


def test_source_validation_accepts_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    code = (f"open({str(marker)!r}, 'w').close()\n"
            "def process(input, context, extra=None, *args, **kwargs):\n    return input\n").encode()
    validate_source(code)
    validate_source(b"def process(*args):\n    pass\n")
    assert not marker.exists()
