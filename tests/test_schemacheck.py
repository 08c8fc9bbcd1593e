"""The state schema check at ``functions update`` (issue 44): new code whose state variables cannot evolve from the
schemas its function's runs recorded is refused at the update (Python API, CLI, REST), naming the variable and the
field, with the function's config, code, schemas and state as they were. The schemas are those a real first run of
the old code recorded. The schemas found in the code without running it are the run's own (checked against what a
run of the same file opens)."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from typing import Any

from fastapi.testclient import TestClient
import pyarrow as pa
import pyspark
import pytest

from statekeep.functions.config.loader import execute_file
from statekeep.functions.config.schemacheck import static_variables
from statekeep.functions.config.service import FunctionService
from statekeep.functions.config.spec import executor_spec
from statekeep.functions.executor.task import SPARK_BATCH_ID, SPARK_QUERY_ID, arrow_partition_runner
from statekeep.server import create_app
from statekeep.state import typed
from statekeep.state.schemas import read_schemas, record_schemas
from statekeep.state.typed import StateSchemaError

from support.cli import run

# ---- the schemas found without running the code --------------------------------------------------------------

TYPES = '''
import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import msgspec
from msgspec import Struct


@dataclass
class Bid:
    auction: int
    price: float
    tags: list[str] = field(default_factory=list)
    note: Optional[str] = None
    seen: int = field(default=0)
    ratio: float = dataclasses.field(repr=False, default=1.0)
    LIMIT: typing.ClassVar[int] = 3


@dataclasses.dataclass(kw_only=True)
class Lot(Bid):
    bids: List[Bid] = dataclasses.field(default_factory=list)
    owner: str | None = None
    required: bytes = field(repr=False)


class Person(msgspec.Struct):
    name: str
    tags: list[str] = []
    age: int | None = msgspec.field(default=None)


class Late(Struct, kw_only=True, frozen=True):
    when: int = 0
    who: Person
    extra: Dict[str, typing.Optional[bool]] = msgspec.field(default_factory=dict)


def process(input, context):
    context.value_state("count", int)
    context.value_state(name="maybe", type=float | None)
    context.value_state("flag", typing.Union[bool, None])
    context.value_state("raw", bytes, ttl=60)
    context.list_state("bids", Bid)
    context.list_state("names", list[str])
    context.map_state("lots", str, Lot)
    context.map_state("people", int, Person, ttl=5)
    context.map_state(name="late", key_type=bytes, value_type=Late)
    context.value_state("nested", dict[str, list[Optional[Person]]])
'''


class _Recorder:
    """A Context that records the schema of each variable opened, as the run's Context makes it."""

    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}

    def _open(self, name: str, kind: str, value_type: Any, key_type: Any = None, ttl: Any = None) -> None:
        self.schemas[name] = typed.variable(name, kind, value_type, key_type, ttl).schema()

    def value_state(self, name: str, type: Any, *, ttl: Any = None) -> None:
        self._open(name, "value", type, None, ttl)

    def list_state(self, name: str, type: Any, *, ttl: Any = None) -> None:
        self._open(name, "list", type, None, ttl)

    def map_state(self, name: str, key_type: Any, value_type: Any, *, ttl: Any = None) -> None:
        self._open(name, "map", value_type, key_type, ttl)


def test_schemas_found_without_running_the_code_are_the_ones_a_run_records():
    recorder = _Recorder()
    execute_file(TYPES, "types.py")["process"](None, recorder)
    static = static_variables(TYPES, "types.py")
    assert len(recorder.schemas) == 10
    assert {name: v.schema for name, v in static.items()} == recorder.schemas
    assert static["bids"].line == TYPES.splitlines().index('    context.list_state("bids", Bid)') + 1


LEFT_TO_THE_RUN = '''
import dataclasses
from dataclasses import dataclass
from elsewhere import Imported
from . import sibling
import functools

int = float  # shadows the builtin: "int" below is not int


@dataclass
class Plain:
    n: float


class NotData:
    n: float


@functools.total_ordering
@dataclass
class Decorated:
    n: float


@dataclass
class Node:
    children: list["Node"]                                 # text: the run cannot resolve it either


@dataclass
class Twice:
    n: float


Twice = Plain


def helper(name, tp):
    return name, tp


def process(input, context):
    context.value_state("plain", Plain)                # the one seen
    context.value_state(input["name"], Plain)          # a computed name
    context.value_state("im", Imported)                # a class from another module
    context.value_state("sib", sibling.Thing)
    context.value_state("shadowed", int)
    context.value_state("notdata", NotData)
    context.value_state("decorated", Decorated)
    context.value_state("node", Node)
    context.value_state("twice", Twice)
    Local = Plain
    context.value_state("local", Local)               # a name bound in the function
    context.value_state(*helper("star", Plain))
    context.value_state("mixed", Plain)
    context.value_state("bad name!", Plain)            # the run refuses it, saying so
    context.map_state("badkey", float, Plain)


def other(context):
    context.value_state("mixed", list[Plain])          # opened with two schemas in one file
'''


def test_what_cannot_be_seen_without_running_the_code_is_left_to_the_run():
    assert list(static_variables(LEFT_TO_THE_RUN)) == ["plain"]
    assert static_variables("from os import *\ndef process(i, context):\n    context.value_state('x', str)\n") == {}
    future = "from __future__ import annotations\n" + LEFT_TO_THE_RUN.replace("int = float", "")
    assert list(static_variables(future)) == ["plain", "shadowed"]  # its classes resolve as without it


# ---- the check at functions update, after a real first run -------------------------------------------------------

V1 = '''
import dataclasses


@dataclasses.dataclass
class Bid:
    auction: int
    price: int


def process(input, context):
    best = context.value_state("best", Bid)
    best.update(Bid(input["auction"], input["price"]))
    context.list_state("prices", int).append(input["price"])
    seen = context.map_state("seen", str, int)
    seen.put(input["user"], seen.get(input["user"], 0) + 1)
    return {"user": input["user"], "n": best.get().price}
'''


def v1_with(old: str, new: str) -> bytes:
    assert old in V1
    return V1.replace(old, new).encode()


class _Task:
    def __init__(self, batch: int) -> None:
        self.batch = batch

    def partitionId(self) -> int:  # noqa: N802 - Spark's name
        return 0

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - Spark's name
        return {SPARK_BATCH_ID: str(self.batch), SPARK_QUERY_ID: "q"}.get(key)


@pytest.fixture
def fn(tmp_path, monkeypatch):
    """The function ``public/default/f`` (code V1) in ``local://DATA``, after one real run of its registered code
    (which recorded its schemas); ``fn.run(batch, rows)`` runs the registered code again."""
    data = tmp_path / "data"
    url = f"local://{data}"
    service = FunctionService.open(url)
    service.registry.create({"tenant": "public", "namespace": "default", "name": "f", "inputs": ["dataframe"],
                             "keyField": "user", "py": "f.py"}, V1.encode())

    def run_batch(batch: int, rows: list[dict]) -> list[dict]:
        spec = dataclasses.replace(executor_spec(service.registry, url, "public", "default", "f")[0],
                                   input_format="rows", source_format="rows", output=str(tmp_path / "rows"),
                                   output_format="arrow",
                                   rows_schema=pa.schema([("user", pa.string()), ("n", pa.float64())]))
        monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: _Task(batch)))
        records = pa.RecordBatch.from_pylist([{**r, "__key": r["user"]} for r in rows])
        return [r for b in arrow_partition_runner(spec)(iter([records])) for r in b.to_pylist()]

    assert run_batch(0, [{"user": "ann", "auction": 1, "price": 10}]) == [{"user": "ann", "n": 10.0}]
    service.run, service.data = run_batch, data  # type: ignore[attr-defined]
    yield service
    service.close()


def everything(service: FunctionService) -> tuple[Any, ...]:
    """The function's config, code, schemas and state, to show that a refused update changed none of them."""
    registry = service.registry
    path = registry.catalog.path("public", "default", "f")
    entries = {child: registry.store.get(f"{path}/{child}") for child in registry.store.get_children(path)}
    return (registry.store.get(path), {k: (v.value, v.stat.version) for k, v in entries.items() if v},
            list(registry.state_store("public", "default", "f").scan()))


REFUSED = [  # (new code, variable, field, what the message says)
    (v1_with("price: int", "price: str"), "best", "price", "field 'price' was int, cannot become str"),
    (v1_with("price: int", "price: int\n    currency: str"), "best", "currency", "new field 'currency' has no default"),
    (v1_with('context.list_state("prices", int)', 'context.list_state("prices", str)'), "prices", None,
     "its type was int, cannot become str"),
    (v1_with('context.map_state("seen", str, int)', 'context.map_state("seen", int, int)'), "seen", "<map key>",
     "field '<map key>' was str"),
    (v1_with('context.value_state("best", Bid)', 'context.list_state("best", Bid)'), "best", None,
     "is value state, not list state"),
]


@pytest.mark.parametrize("code, variable, field, message", REFUSED)
def test_an_update_the_state_cannot_follow_is_refused_and_changes_nothing(fn, code, variable, field, message):
    before = everything(fn)
    with pytest.raises(StateSchemaError, match="cannot update public/default/f: f.py:") as refused:
        fn.registry.update("public", "default", "f", {"parallelism": 3}, code)
    assert (refused.value.variable, refused.value.field) == (variable, field) and message in str(refused.value)
    assert everything(fn) == before
    assert fn.registry.get("public", "default", "f").parallelism == 1


V2 = '''
import dataclasses


@dataclasses.dataclass
class Bid:
    auction: int
    price: float
    currency: str = "EUR"


def process(input, context):
    best = context.value_state("best", Bid)
    old = best.get()
    best.update(Bid(input["auction"], input["price"] / 2))
    context.list_state("prices", float).append(input["price"] / 2)
    return {"user": input["user"], "n": old.price + len(old.currency) if old else -1.0}
'''


def test_accepted_updates_write_no_schema_and_the_next_run_reads_old_values_under_the_new_one(fn):
    recorded = read_schemas(fn.registry.store, "public", "default", "f")
    fn.registry.update("public", "default", "f", None, v1_with("    price: int\n", ""))  # a field removed
    fn.registry.update("public", "default", "f", None, V2.encode())  # a field with a default added, int to float
    assert read_schemas(fn.registry.store, "public", "default", "f") == recorded  # the next run records them
    assert fn.registry.get_code("public", "default", "f") == V2.encode()
    assert fn.run(1, [{"user": "ann", "auction": 2, "price": 5}]) == [{"user": "ann", "n": 13.0}]  # 10 + "EUR"
    now = read_schemas(fn.registry.store, "public", "default", "f")
    assert now["best"]["type"]["fields"][1:] == [{"name": "price", "type": "float", "default": False},
                                                 {"name": "currency", "type": "str", "default": True}]
    assert now["prices"]["type"] == "float" and now["seen"] == recorded["seen"]


def test_the_cli_refuses_it_naming_the_variable_and_field(fn, tmp_path, capsys):
    before = everything(fn)
    new = tmp_path / "f.py"
    new.write_bytes(REFUSED[0][0])
    code, _, err = run(capsys, "functions", "update", "--name", "f", "--py", str(new), "--parallelism", "4",
                       "--data-dir", str(fn.data))
    assert code == 2 and "state variable 'best': field 'price' was int, cannot become str" in err, err
    assert everything(fn) == before


def test_rest_refuses_it_with_a_400_naming_the_variable_and_field(fn):
    before = everything(fn)
    with TestClient(create_app({"metadata_url": f"local://{fn.data}"})) as client:
        r = client.put("/admin/v3/functions/public/default/f", files={
            "functionConfig": (None, json.dumps({"parallelism": 2}), "application/json"),
            "data": ("f.py", REFUSED[1][0], "application/octet-stream")})
        assert r.status_code == 400, r.text
        assert "state variable 'best': new field 'currency' has no default" in r.json()["reason"]
        assert everything(fn) == before
        r = client.put("/admin/v3/functions/public/default/f", files={  # without new code: nothing to check
            "functionConfig": (None, json.dumps({"parallelism": 2}), "application/json")})
        assert r.status_code == 200 and r.json()["parallelism"] == 2


def test_process_batch_and_window_functions_are_checked_the_same_way(fn):
    batch = textwrap.dedent('''
        def process_batch(records, context):
            counts = context.value_state("count", str)
            return counts.get_many([r["user"] for r in records])
    ''').encode()
    window = textwrap.dedent('''
        def process(records, context):
            context.list_state("prices", bytes).extend([b"x"])
            return len(records)
    ''').encode()
    count = typed.variable("count", "value", int).schema()
    record_schemas(fn.registry.store, "public", "default", "f", {"count": count})  # as a batch run records it
    before = everything(fn)
    with pytest.raises(StateSchemaError, match="'count': its type was int, cannot become str"):
        fn.registry.update("public", "default", "f", None, batch)
    with pytest.raises(StateSchemaError, match="'prices': its type was int, cannot become bytes"):
        fn.registry.update("public", "default", "f", {"windowConfig": {"windowLengthCount": 10}}, window)
    assert everything(fn) == before


def test_a_run_recording_schemas_during_the_update_makes_it_check_again(fn, monkeypatch):
    """The update's write is conditional on the schemas it checked: one recorded meanwhile is checked too."""
    store = fn.registry.store
    multi = store.multi
    recorded_meanwhile = []

    def racing(ops):
        if not recorded_meanwhile:  # a run records "extra" as str between the update's check and its write
            recorded_meanwhile.append(ops)
            record_schemas(store, "public", "default", "f", {"extra": typed.variable("extra", "value", str).schema()})
        return multi(ops)

    monkeypatch.setattr(store, "multi", racing)
    with pytest.raises(StateSchemaError, match="'extra': its type was str, cannot become int"):
        fn.registry.update("public", "default", "f", None, V1.encode() + b'\n\ndef more(context):\n'
                           b'    context.value_state("extra", int)\n')
    assert recorded_meanwhile and fn.registry.get_code("public", "default", "f") == V1.encode()
    assert read_schemas(store, "public", "default", "f")["extra"]["type"] == "str"


def test_a_function_file_with_text_annotations_loads_and_its_classes_have_schemas():
    """A file with ``from __future__ import annotations`` (its classes' annotations kept as text) runs as a module
    of its own, so dataclasses and typed state resolve them as in a file without it."""
    body = ("import dataclasses\n\n@dataclasses.dataclass\nclass Bid:\n    price: int\n"
            "    tags: list[str] | None = None\n")
    text = execute_file("from __future__ import annotations\n" + body, "text.py")
    plain = execute_file(body, "plain.py")
    assert typed.StateType(text["Bid"]).schema == typed.StateType(plain["Bid"]).schema


# ---- a function given as a Python object (the DataFrame operator's) ------------------------------------------

OPERATOR_MODULE = '''
import dataclasses

import msgspec


@dataclasses.dataclass
class Bid:
    auction: int
    price: int

    def doubled(self) -> int:
        return self.price * 2


class Person(msgspec.Struct):
    name: str


def best_bid(row, context):
    best = context.value_state("best", Bid)
    best.update(Bid(row["auction"], row["price"]))


def other(row, context):  # another operator in the same module: its variables are not best_bid's
    context.value_state("best", str).update("x")


class Counter:
    def process(self, input, context):
        context.map_state("people", str, Person).put("a", Person("a"))


SPARK = object()  # a module-level statement: not part of the registered file
'''


@pytest.fixture
def operator_module(tmp_path, monkeypatch):
    import importlib.util

    path = tmp_path / "bids.py"
    path.write_text(OPERATOR_MODULE)
    spec = importlib.util.spec_from_file_location("bids_operator_module", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(__import__("sys").modules, "bids_operator_module", module)
    spec.loader.exec_module(module)
    return module


def test_a_function_objects_source_is_registered_for_the_update_check(operator_module, tmp_path):
    """Issue 52: the operator registered a stub, so update's schema check never saw an object's code. Now its
    source (its module's imports and classes, and its own lines, at their lines) is what the registry checks."""
    from statekeep.functions.config.objectsource import object_source

    source, filename = object_source(operator_module.best_bid, "t/n/f")
    assert filename == "bids.py"
    assert {v.name: (v.schema, v.line) for v in static_variables(source, filename).values()} == {
        "best": (typed.variable("best", "value", operator_module.Bid).schema(), 21)}  # best_bid's, at its line
    assert "doubled" not in source and "SPARK" not in source and "def other" not in source
    counter, _ = object_source(operator_module.Counter, "t/n/f")
    assert set(static_variables(counter, "bids.py")) == {"people"}
    assert object_source(operator_module.Counter(), "t/n/f")[0] == counter  # an instance: its class
    with FunctionService.open(f"local://{tmp_path}/store") as service:
        registry = service.registry
        registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["dataframe"], "py": filename},
                        source.encode())
        record_schemas(registry.store, "t", "n", "f", {"best": typed.variable("best", "value", int).schema()})
        with pytest.raises(StateSchemaError, match="bids.py:21: state variable 'best'"):
            registry.update("t", "n", "f", {}, source.encode())
        assert registry.get_code("t", "n", "f") == source.encode()


def test_where_python_has_no_source_the_object_is_registered_with_a_stub():
    from statekeep.functions.config.objectsource import object_source

    def nested(row, context):  # a closure in a file: its own lines, dedented, at their lines
        context.value_state("n", int).update(1)

    source, _ = object_source(nested, "t/n/f")
    assert set(static_variables(source, "x.py")) == {"n"}
    assert object_source(lambda row, context: None, "t/n/f") is None
    assert object_source(len, "t/n/f") is None
    scope: dict = {}
    exec("def typed_in(row, context):\n    pass\n", scope)  # as a REPL makes it: no file behind it
    assert object_source(scope["typed_in"], "t/n/f") is None
