"""The DataFrame operator's executor side without Spark (fast tier): a replayed (batch, partition) whose state was
committed gives the rows its first run kept, a second streaming query on the function is refused at its first task,
and results become rows of the output schema (or a named error)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyspark
import pytest

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.service import FunctionService
from statekeep.functions.config.spec import executor_spec
from statekeep.functions.executor.task import SPARK_BATCH_ID, SPARK_QUERY_ID, arrow_partition_runner
from statekeep.functions.messaging.rows import row_maker, rows_table

SCHEMA = pa.schema([("word", pa.string()), ("n", pa.int64())])


def count(input, context):
    return {"word": input["word"], "n": context.incr_counter(input["word"], 1)}


class _Task:
    def __init__(self, batch: int, query: str) -> None:
        self.batch, self.query = batch, query

    def partitionId(self) -> int:  # noqa: N802 - Spark's name
        return 0

    def getLocalProperty(self, key: str) -> str | None:  # noqa: N802 - Spark's name
        return {SPARK_BATCH_ID: str(self.batch), SPARK_QUERY_ID: self.query}.get(key)


@pytest.fixture
def run(tmp_path, monkeypatch):
    """Run the operator's task of ``batch`` (of streaming query ``query``) on ``words``: its output rows."""
    url = f"local://{tmp_path}/data"
    service = FunctionService.open(url)
    service.registry.create({"tenant": "public", "namespace": "default", "name": "count", "inputs": ["dataframe"],
                             "keyField": "word"}, b"def process(input, context):\n    pass\n")
    spec = dataclasses.replace(executor_spec(service.registry, url, "public", "default", "count")[0],
                               entry=count, input_format="rows", source_format="rows", output=str(tmp_path / "rows"),
                               output_format="arrow", rows_schema=SCHEMA)

    def task(batch: int, query: str, words: list[str]) -> list[tuple[str, int]]:
        monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: _Task(batch, query)))
        records = pa.RecordBatch.from_pydict({"word": words, "__key": words})
        return [(r["word"], r["n"]) for b in arrow_partition_runner(spec)(iter([records])) for r in b.to_pylist()]

    yield task, service
    service.close()


def test_a_replayed_partition_gives_its_kept_rows_and_counts_nothing_again(run):
    task, service = run
    first = task(0, "q1", ["a", "b", "a"])
    assert first == [("a", 1), ("b", 1), ("a", 2)]
    assert task(0, "q1", ["a", "b", "a"]) == first  # applied already: the kept rows, the function not run
    assert task(1, "q1", ["a"]) == [("a", 3)]
    assert service.query_state("public", "default", "count", "a")["numberValue"] == 3


def test_a_second_query_of_the_function_is_refused_and_changes_nothing(run):
    task, service = run
    task(0, "q1", ["a"])
    with pytest.raises(InvalidArgumentError, match="belongs to streaming query q1"):
        task(0, "q2", ["a"])  # another checkpoint: its batch 0 would count as applied
    assert service.query_state("public", "default", "count", "a")["numberValue"] == 1


def test_results_become_rows_of_the_schema_or_a_named_error():
    kv = pa.schema([("key", pa.string()), ("value", pa.string())])
    make = row_maker(kv, lambda: "k1")
    assert rows_table([make({"x": 1}), make("text"), make({"key": "k2", "value": 3})], kv).to_pylist() == [
        {"key": "k1", "value": '{"x":1}'}, {"key": "k1", "value": "text"}, {"key": "k2", "value": "3"}]
    typed = row_maker(SCHEMA, lambda: None)
    assert rows_table([typed(("a", 1)), typed({"word": "b"})], SCHEMA).to_pylist() == [
        {"word": "a", "n": 1}, {"word": "b", "n": None}]
    with pytest.raises(InvalidArgumentError, match="fields \\['z'\\]"):
        typed({"word": "a", "z": 1})
    with pytest.raises(InvalidArgumentError, match="output schema"):
        rows_table([typed({"word": "a", "n": "not a number"})], SCHEMA)
