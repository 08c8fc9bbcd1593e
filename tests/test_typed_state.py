"""Typed state variables (value, list and map state) in the fast tier: their schemas and evolution, and a function
using them run by the runtime's executor (the operator's task, without Spark) on every provider that needs no
server: the metadata provider (on local://: memory:// is one process's), the embedded one and partition-owned
state. Replays count once, TTL expires entry by entry, a bad value or an incompatible schema changes nothing."""

from __future__ import annotations

import dataclasses
import inspect
import zlib

import msgspec
from fastapi.testclient import TestClient
import pyarrow as pa
import pyspark
import pytest

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.service import FunctionService
from statekeep.functions.config.spec import executor_spec
from statekeep.functions.driver.sources import StatekeepStateSource
from statekeep.state import timestate as context_module
from statekeep.functions.windowing import timerun
from statekeep.functions.config.spec import Layout, time_section
from statekeep.functions.executor.context import Context
from statekeep.server import create_app
from statekeep.functions.executor.errors import FunctionRecordError
from statekeep.functions.executor.task import SPARK_BATCH_ID, SPARK_QUERY_ID, \
    arrow_partition_runner
from statekeep.state import typed
from statekeep.state.buffer import BufferedState
from statekeep.state.partitioned import state_storage
from statekeep.state.keygroups import key_group
from statekeep.state.schemas import read_schemas, schemas_path


@dataclasses.dataclass
class Bid:
    auction: int
    price: int


@dataclasses.dataclass
class BidV2:  # Bid evolved: a field added with a default, price widened to float
    auction: int
    price: float
    currency: str = "USD"


class Person(msgspec.Struct):
    name: str
    tags: list[str] = []


# ---- schemas ---------------------------------------------------------------------------------------------

def schema(kind: str, value_type, key_type=None) -> dict:
    return typed.variable("v", kind, value_type, key_type).schema()


def test_schemas_name_every_field_and_refuse_types_no_codec_takes():
    assert schema("value", int) == {"kind": "value", "type": "int"}
    assert schema("map", Bid, str) == {"kind": "map", "key": "str", "type": {"struct": "Bid", "fields": [
        {"name": "auction", "type": "int", "default": False}, {"name": "price", "type": "int", "default": False}]}}
    assert schema("list", Person)["type"]["fields"][1] == {"name": "tags", "type": {"list": "str"}, "default": True}
    assert schema("value", dict[str, float | None])["type"] == {"map": ["str", {"optional": "float"}]}
    with pytest.raises(typed.StateSchemaError, match="set"):
        typed.variable("v", "value", set)
    with pytest.raises(InvalidArgumentError, match="map's keys"):
        typed.variable("v", "map", int, float)
    for bad in ("", "1x", "a b", "x" * 65, 3):
        with pytest.raises(InvalidArgumentError, match="name"):
            typed.variable(bad, "value", int)
    with pytest.raises(InvalidArgumentError, match="ttl"):
        typed.variable("v", "value", int, ttl=0)


@pytest.mark.parametrize("old,new", [(int, float), (Bid, BidV2), (BidV2, Bid.__mro__[0]), (int, int | None)])
def test_accepted_evolutions_read_old_values_under_the_new_schema(old, new):
    if old is BidV2:  # removing a field (currency): BidV2 -> a class without it, price still float
        @dataclasses.dataclass
        class Narrow:
            auction: int
            price: float
        new = Narrow
    typed.check_evolution("v", schema("value", old), schema("value", new))
    value = {int: 3, Bid: Bid(7, 10), BidV2: BidV2(7, 10.5, "EUR")}[old]
    read = typed.StateType(new).decode(typed.StateType(old).encode(value))
    if old is Bid:
        assert read == BidV2(7, 10.0, "USD")
    elif old is BidV2:
        assert (read.auction, read.price) == (7, 10.5)
    else:
        assert read == 3


@pytest.mark.parametrize("old,new,field", [
    (float, int, None), (int, str, None), (Bid, BidV2.__mro__[0], None), ("value", "list", None)])
def test_refused_evolutions_name_the_variable_and_field(old, new, field):
    if old == "value":
        with pytest.raises(typed.StateSchemaError, match="'v' is value state, not list state"):
            typed.check_evolution("v", schema("value", int), schema("list", int))
        return
    if old is Bid:
        @dataclasses.dataclass
        class Changed:
            auction: str  # int -> str
            price: int
            seller: int  # new, no default
        with pytest.raises(typed.StateSchemaError, match="field 'auction' was int, cannot become str") as e:
            typed.check_evolution("v", schema("value", Bid), schema("value", Changed))
        assert (e.value.variable, e.value.field) == ("v", "auction")

        @dataclasses.dataclass
        class Added:
            auction: int
            price: int
            seller: int
        with pytest.raises(typed.StateSchemaError, match="new field 'seller' has no default"):
            typed.check_evolution("v", schema("value", Bid), schema("value", Added))
        return
    with pytest.raises(typed.StateSchemaError, match="'v'"):
        typed.check_evolution("v", schema("value", old), schema("value", new))


def test_a_variables_entries_are_in_its_record_keys_key_group():
    for key in ("a", "user:42", "é/x", "k\x00in", "9:"):
        prefix = typed.variable_prefix(key, "bids")
        assert typed.owner(prefix + "m" + typed.map_key_code("z")) == key
        for groups in (7, 128):
            assert key_group(typed.element_key(prefix, 5), groups) == zlib.crc32(key.encode()) % groups
    for code in ("x", 0, -12, True, False, b"\x00\xff", "i1"):
        assert typed.decode_map_key(typed.map_key_code(code)) == code


# ---- a function using them, run by the executor --------------------------------------------------------

def counting(input, context):
    """Per user: a count (value), the bids in order (list), the highest bid per auction (map)."""
    user, bid = input["user"], Bid(input["auction"], input["price"])
    count = context.value_state("count", int)
    count.update(count.get(0) + 1)
    context.list_state("bids", Bid).append(bid)
    best = context.map_state("best", int, int)
    if bid.price > best.get(bid.auction, -1):
        best.put(bid.auction, bid.price)
    return {"user": user, "n": count.get(), "bids": len(context.list_state("bids", Bid).get()),
            "best": sorted(best.items())}


ROWS = pa.schema([("user", pa.string()), ("n", pa.int64()), ("bids", pa.int64()),
                  ("best", pa.list_(pa.list_(pa.int64())))])


class _Task:
    def __init__(self, batch: int, partition: int) -> None:
        self.batch, self.partition = batch, partition

    def partitionId(self) -> int:  # noqa: N802 - Spark's name
        return self.partition

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - Spark's name
        return {SPARK_BATCH_ID: str(self.batch), SPARK_QUERY_ID: "q"}.get(key)


def storages(tmp_path) -> dict:
    return {"local-metadata": (f"local://{tmp_path}/m", "metadata"),
            "embedded": (f"local://{tmp_path}/e", None), "partitioned": (f"local://{tmp_path}/p", "partitioned")}


@pytest.fixture(params=["local-metadata", "embedded", "partitioned"])
def runner(request, tmp_path, monkeypatch):
    """``task(batch, rows, function=counting)``: run the function on ``rows`` (dicts with "user") as partition
    ``crc32(user) % 2``'s task of micro-batch ``batch``; returns the output rows. The clock is ``clock[0]``."""
    url, provider = storages(tmp_path)[request.param]
    service = FunctionService.open(url)
    config = {"tenant": "public", "namespace": "default", "name": "typed", "inputs": ["dataframe"],
              "keyField": "user", "parallelism": 2}
    if provider == "metadata":
        config["stateStorage"] = {"provider": "metadata", "config": {"metadata_url": url}}
    elif provider == "partitioned":
        config["stateStorage"] = state_storage(str(tmp_path / "shared"))
    service.registry.create(config, b"def process(input, context):\n    pass\n")
    base, cfg = executor_spec(service.registry, url, "public", "default", "typed")
    clock = [1_000_000]
    monkeypatch.setattr(context_module, "wall_clock_ms", lambda: clock[0])
    monkeypatch.setattr(timerun, "CLOCK", lambda: clock[0])

    def task(batch: int, rows: list[dict], function=counting, schema=ROWS) -> list[dict]:
        # as apply_function builds it: the time section from the function's own source
        spec = dataclasses.replace(base, entry=function, input_format="rows", source_format="rows",
                                   output=str(tmp_path / "rows"), output_format="arrow", rows_schema=schema,
                                   time=time_section(cfg, inspect.getsource(function)))
        if provider == "partitioned":  # what the driver does before each micro-batch
            service.registry.state_store("public", "default", "typed").prepare_batch(2)
        out = []
        for partition in (0, 1):
            mine = [r for r in rows if zlib.crc32(r["user"].encode()) % 128 * 2 // 128 == partition]
            if not mine:
                continue
            monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls, p=partition: _Task(batch, p)))
            records = pa.RecordBatch.from_pylist([{**r, "__key": r["user"]} for r in mine])
            runner = arrow_partition_runner(spec, None, Layout(128, 2))
            out += [r for b in runner(iter([records])) for r in b.to_pylist()]
        return out

    task.service, task.clock, task.provider, task.url = service, clock, provider, url
    yield task
    service.close()


def bids(user: str, *pairs: tuple[int, int]) -> list[dict]:
    return [{"user": user, "auction": a, "price": p} for a, p in pairs]


def test_value_list_and_map_state_count_once_over_batches_and_replays(runner):
    rows = bids("ann", (1, 10), (2, 5), (1, 7)) + bids("bob", (1, 3))
    first = runner(0, rows)
    by_user = {(r["user"], r["n"]): r for r in first}
    assert by_user["ann", 3] == {"user": "ann", "n": 3, "bids": 3, "best": [[1, 10], [2, 5]]}
    assert by_user["bob", 1]["best"] == [[1, 3]]
    assert runner(0, rows) == first  # a replay: the kept rows, nothing counted again
    again = runner(1, bids("ann", (2, 8)))
    assert again == [{"user": "ann", "n": 4, "bids": 4, "best": [[1, 10], [2, 8]]}]
    app = create_app({"metadata_url": runner.url})  # and over REST, decoded to JSON
    try:
        with TestClient(app) as client:
            base = "/admin/v3/functions/public/default/typed/variables/"
            assert client.get(base + "ann").json() == {"key": "ann", "variables": {
                "count": 4, "best": {"1": 10, "2": 8},
                "bids": [{"auction": a, "price": p} for a, p in ((1, 10), (2, 5), (1, 7), (2, 8))]}}
            assert client.get(base + "nobody").status_code == 404
            bad = client.get(base + "%00x")
            assert bad.status_code == 400 and "reserved" in bad.json()["reason"]
    finally:
        app.state.service.close()
    # and as Spark's statekeep data source reads it (its reader, run here as an executor runs it)
    options = {"function": "public/default/typed", "store": runner.url, "variable": "best"}
    assert StatekeepStateSource(options).schema() == "key string, value string"
    assert sorted(StatekeepStateSource(options).reader(None).read(None)) == [
        ("ann", '{"1":10,"2":8}'), ("bob", '{"1":3}')]


def test_a_list_appends_without_reading_it_and_a_map_entry_is_one_entry(runner):
    """100k elements in a list and 100k entries in a map under one key (10k on the metadata provider, whose
    batches of 100k keys are staged in groups: 30 s here)."""
    size = 10_000 if runner.provider == "metadata" else 100_000

    def many(input, context):
        items = context.list_state("items", int)
        items.extend(range(input["auction"]))
        seen = context.map_state("seen", str, int)
        seen.put_all({f"k{i}": i for i in range(input["auction"])})
        return {"user": input["user"], "n": input["price"]}

    runner(0, bids("big", (size, 0)), function=many, schema=pa.schema([("user", pa.string()), ("n", pa.int64())]))
    state = runner.service.registry.state_store("public", "default", "typed")
    prefix = typed.variable_prefix("big", "items")
    assert typed.list_bounds(state.get(prefix + "#")) == (0, size)
    assert state.get(typed.element_key(prefix, size - 1)) == msgspec.msgpack.encode(size - 1)
    assert len(list(state.scan(typed.variable_prefix("big", "seen") + "m"))) == size

    def read(input, context):
        items, seen = context.list_state("items", int).get(), context.map_state("seen", str, int)
        return {"user": input["user"], "n": sum(items) + len(seen.keys()) + seen.get("k7")}

    out = runner(1, bids("big", (0, 0)), function=read, schema=pa.schema([("user", pa.string()), ("n", pa.int64())]))
    assert out == [{"user": "big", "n": sum(range(size)) + size + 7}]


def test_ttl_expires_entry_by_entry(runner):
    def timed(input, context):
        log = context.list_state("log", int, ttl=10)
        last = context.value_state("last", int, ttl=10)
        tags = context.map_state("tags", str, int, ttl=10)
        if input["price"] >= 0:
            log.append(input["price"])
            last.update(input["price"])
            tags.put(str(input["price"]), input["price"])
        return {"user": input["user"], "n": last.get(-1), "bids": len(log.get()),
                "best": [[int(k), v] for k, v in tags.items()]}

    runner(0, bids("ann", (0, 1)), function=timed)
    runner.clock[0] += 6_000
    assert runner(1, bids("ann", (0, 2)), function=timed)[0]["best"] == [[1, 1], [2, 2]]
    runner.clock[0] += 5_000  # the first write is 11 s old, the second 5 s
    assert runner(2, bids("ann", (0, -1)), function=timed) == [
        {"user": "ann", "n": 2, "bids": 1, "best": [[2, 2]]}]
    runner.clock[0] += 5_000
    assert runner(3, bids("ann", (0, -1)), function=timed) == [{"user": "ann", "n": -1, "bids": 0, "best": []}]
    state = runner.service.registry.state_store("public", "default", "typed")
    assert [k for k, _ in state.scan("\x00v")] == []  # every expired entry was deleted with its batch


def test_a_wrong_value_type_or_an_incompatible_schema_fails_the_batch_and_changes_nothing(runner):
    runner(0, bids("ann", (1, 10)))
    state = runner.service.registry.state_store("public", "default", "typed")
    before = list(state.scan())

    def wrong_value(input, context):
        context.value_state("count", int).update("three")

    def two_schemas(input, context):
        context.value_state("count", int).get()
        context.value_state("count", str).get()

    for function, match in ((wrong_value, "'count' holds int, not str"), (two_schemas, "two schemas")):
        with pytest.raises(FunctionRecordError, match=match):
            runner(1, bids("ann", (1, 11)), function=function)
        assert list(state.scan()) == before


def test_schemas_are_recorded_with_the_function_and_evolve_only_compatibly(runner):
    def v1(input, context):
        best = context.value_state("best", Bid)
        best.update(Bid(input["auction"], input["price"]))
        return {"user": input["user"], "n": best.get().price}

    def v2(input, context):  # Bid -> BidV2: a field with a default added, price widened to float
        best = context.value_state("best", BidV2)
        old = best.get()
        best.update(BidV2(input["auction"], old.price + 0.5, old.currency))
        return {"user": input["user"], "n": int(best.get().price * 10)}

    def narrowed(input, context):
        context.value_state("best", Bid).get()  # float back to int: refused

    registry = runner.service.registry
    one = pa.schema([("user", pa.string()), ("n", pa.int64())])
    runner(0, bids("ann", (1, 10)), function=v1, schema=one)
    assert read_schemas(registry.store, "public", "default", "typed") == {"best": schema("value", Bid)}
    assert runner(1, bids("ann", (1, 0)), function=v2, schema=one) == [{"user": "ann", "n": 105}]
    assert read_schemas(registry.store, "public", "default", "typed")["best"] == schema("value", BidV2)
    state = registry.state_store("public", "default", "typed")
    before = list(state.scan())
    with pytest.raises(FunctionRecordError, match="'best': field 'price' was float, cannot become int"):
        runner(2, bids("ann", (1, 0)), function=narrowed, schema=one)
    assert list(state.scan()) == before
    assert read_schemas(registry.store, "public", "default", "typed")["best"] == schema("value", BidV2)
    registry.delete("public", "default", "typed")  # the schemas go with the function
    assert not registry.store.exists(schemas_path(registry.store, "public", "default", "typed"))


def test_bulk_forms_read_many_keys_in_one_read_and_write_all_or_nothing(tmp_path):
    """``get_many`` and ``update_many`` (for process_batch) on a Context outside any record."""
    with FunctionService.open(f"local://{tmp_path}") as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "bulk", "inputs": ["x"]},
                                b"def process(input, context):\n    pass\n")
        store = service.registry.state_store("public", "default", "bulk")
        reads: list[list[str]] = []

        def fetch(keys):
            reads.append(list(keys))
            return store.fetch_many(reads[-1])

        state = BufferedState(fetch, store.max_value_size, store.scan)
        count = Context("public", "default", "bulk", state).value_state("count", int)
        count.update_many(["a", "b"], [1, 2])
        with pytest.raises(InvalidArgumentError, match="holds int, not str"):
            count.update_many(["c", "d"], [3, "four"])  # checked before any is buffered
        with pytest.raises(InvalidArgumentError, match="2 keys but 1 values"):
            count.update_many(["c", "d"], [3])
        with pytest.raises(InvalidArgumentError, match="this record has none"):
            count.get()  # no current record: no key
        store.apply_batch(state.puts, state.counter_deltas)
        state = BufferedState(fetch, store.max_value_size, store.scan)
        reads.clear()
        assert Context("public", "default", "bulk", state).value_state("count", int).get_many(
            ["a", "b", "c"], 0) == [1, 2, 0]
        assert len(reads) == 1  # one bulk read
