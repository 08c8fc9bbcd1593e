"""How each Nexmark query of ``examples/nexmark/`` is run: its functions in order (a multi-step query's
steps are joined by their output directories, each step reading the one before), and running one through
statekeep's Python API on a Spark session, as ``statekeep functions localrun ... --once`` runs it.

The input directory is ``generator.write_jsonl(..., per_stream=True)``'s: ``events/`` (the combined stream)
and ``bid/``; the first step reads one generator file per micro-batch, later steps read what the step before
wrote in one micro-batch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "nexmark"
ON_TIME = {"eventTimeField": "dateTime"}
PEOPLE_AND_SELLERS = {"keys": {"person": ["id"], "auction": ["seller"]}}
AUCTIONS_AND_BIDS = {"keys": {"auction": ["id"], "bid": ["auction"]}}
HOP = {"windowLengthDurationMs": 10_000, "slidingIntervalDurationMs": 2_000}
TUMBLE = {"windowLengthDurationMs": 10_000}
SESSION = {"sessionGapMs": 10_000}


@dataclasses.dataclass(frozen=True)
class Step:
    """One function: its file under examples/nexmark/, key field, userConfig and windowConfig (None: none)."""

    py: str
    key_field: str | None = None
    user_config: dict[str, Any] = dataclasses.field(default_factory=dict)
    window_config: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True)
class Pipeline:
    """A query's steps, the generator file set its first step reads, its ``process_batch`` variant, if
    any: the files its first steps run instead (the steps after them stay as they are), and its ``windowConfig``
    variant, if any: the steps its first steps are replaced by (the aggregate form of windows instead of timers)."""

    source: str
    steps: tuple[Step, ...]
    batch: tuple[str, ...] = ()
    windowed: tuple[Step, ...] = ()


def _one(py: str, key: str | None = None, **extra: Any) -> tuple[Step, ...]:
    return (Step(py, key, **extra),)


PIPELINES: dict[str, Pipeline] = {
    "q0": Pipeline("bid", _one("q0.py"), ("q0_batch.py",)),
    "q1": Pipeline("bid", _one("q1.py"), ("q1_batch.py",)),
    "q2": Pipeline("bid", _one("q2.py"), ("q2_batch.py",)),
    "q3": Pipeline("events", _one("q3.py"), ("q3_batch.py",)),
    "q4": Pipeline("events", (Step("rekey.py", user_config=AUCTIONS_AND_BIDS), Step("q4_max.py", "k"),
                              Step("q4_avg.py", "category"))),
    "q5": Pipeline("bid", (Step("q5_count.py", "auction", user_config=ON_TIME), Step("q5_hot.py", "start")),
                   ("q5_count_batch.py", "q5_hot_batch.py"),
                   _one("q5_window.py", "auction", user_config=ON_TIME, window_config=HOP)),
    "q7": Pipeline("bid", _one("q7.py", None, user_config=ON_TIME), ("q7_batch.py",),
                   _one("q7_window.py", None, user_config=ON_TIME, window_config=TUMBLE)),
    "q8": Pipeline("events", (Step("rekey.py", user_config=PEOPLE_AND_SELLERS),
                              Step("q8.py", "k", user_config=ON_TIME)), ("rekey_batch.py", "q8_batch.py")),
    "q9": Pipeline("events", _one("q9.py"), ("q9_batch.py",)),
    "q11": Pipeline("bid", _one("q11.py", "bidder", user_config=ON_TIME), ("q11_batch.py",),
                    _one("q11_window.py", "bidder", user_config=ON_TIME, window_config=SESSION)),
    "q12": Pipeline("bid", _one("q12.py", "bidder"), ("q12_batch.py",)),
    "q13": Pipeline("bid", _one("q13.py"), ("q13_batch.py",)),
    "q14": Pipeline("bid", _one("q14.py"), ("q14_batch.py",)),
    "q15": Pipeline("bid", _one("q15.py"), ("q15_batch.py",)),
    "q17": Pipeline("bid", _one("q17.py", "auction"), ("q17_batch.py",)),
    "q18": Pipeline("bid", _one("q18.py"), ("q18_batch.py",)),
    "q21": Pipeline("bid", _one("q21.py"), ("q21_batch.py",)),
    "q22": Pipeline("bid", _one("q22.py"), ("q22_batch.py",)),
}
QUERIES = tuple(PIPELINES)


def read_outputs(directory: Path) -> list[Any]:
    """A function's output records, in the order written (files are named by batch, then partition)."""
    return [json.loads(line) for path in sorted(directory.glob("*.jsonl"))
            for line in path.read_text(encoding="utf-8").splitlines() if line]


def run(spark: Any, query: str, data: Path, work: Path, *, batch: bool = False, windowed: bool = False,
        state_dir: bool = False, parallelism: int = 2, side_input: Path | None = None) -> tuple[float, list[Any]]:
    """Run ``query`` (its ``process_batch`` variant with ``batch``, its ``windowConfig`` one with ``windowed``) over
    the generated events under ``data``,
    every step once to the end of its input (Spark's availableNow), in ``work`` (a fresh directory: store,
    checkpoints, outputs). State on ``local://`` under ``work``, or partition-owned under ``work/state`` with
    ``state_dir``. Returns the seconds the steps took (from start to end of each run, added) and the last
    step's output records. Raises what the function's query raises."""
    from statekeep.functions.config.service import FunctionService
    from statekeep.functions.driver.spark import run_registered
    from statekeep.state.partitioned import state_storage

    pipeline = PIPELINES[query]
    steps = pipeline.steps
    if batch:
        if not pipeline.batch:
            raise ValueError(f"{query} has no process_batch variant")
        steps = tuple(dataclasses.replace(step, py=py) for step, py in zip(steps, pipeline.batch)) + \
            steps[len(pipeline.batch):]
    if windowed:
        if not pipeline.windowed:
            raise ValueError(f"{query} has no windowConfig variant")
        steps = pipeline.windowed + steps[len(pipeline.windowed):]
    url = f"local://{work / 'store'}"
    seconds = 0.0
    inputs = data / pipeline.source
    with FunctionService.open(url) as service:
        for index, step in enumerate(steps):
            name = f"{query}-{index}"
            output = work / "out" / name
            user_config = dict(step.user_config)
            if index == 0:
                user_config["inputOptions"] = {"maxFilesPerTrigger": "1"}
            if step.py.startswith("q13"):
                user_config["sideInput"] = str(side_input)
            config: dict[str, Any] = {"tenant": "public", "namespace": "default", "name": name,
                                      "inputs": [str(inputs)], "output": str(output), "parallelism": parallelism,
                                      "userConfig": user_config}
            if step.key_field:
                config["keyField"] = step.key_field
            if step.window_config:
                config["windowConfig"] = dict(step.window_config)
            if state_dir:
                config["stateStorage"] = state_storage(str(work / "state"))
            service.registry.create(config, (EXAMPLES / step.py).read_bytes())
            os.makedirs(output, exist_ok=True)
            began = time.perf_counter()
            running = run_registered(service, url, "public", "default", name,
                                     checkpoint_root=str(work / "checkpoints"), once=True, spark=spark)
            running.await_termination()
            seconds += time.perf_counter() - began
            inputs = output
    return seconds, read_outputs(inputs)


def sink_files(directory: Path) -> list[Path]:
    """The files a Spark file sink committed to ``directory``, in micro-batch order, from its ``_spark_metadata``
    log: the newest compacted file (``N.compact``, every batch up to N, written every tenth batch) and the batches
    after it."""
    log = directory / "_spark_metadata"
    entries = {int(p.name.split(".")[0]): p for p in log.glob("*") if p.name.split(".")[0].isdigit()} \
        if log.exists() else {}
    compacted = [batch for batch, p in entries.items() if p.name.endswith(".compact")]
    first = max(compacted, default=0)
    files = []
    for batch in sorted(b for b in entries if b >= first):
        for line in entries[batch].read_text().splitlines()[1:]:
            files.append(Path(json.loads(line)["path"].removeprefix("file:")))
    return files


def run_operator(spark: Any, query: str, data: Path, work: Path, *, parallelism: int = 2,
                 side_input: Path | None = None) -> tuple[float, list[Any]]:
    """``query``'s per-record functions as :func:`run` runs them, each through the DataFrame operator
    (``statekeep.spark.apply_function``) in a query of its own: the step's input read as a streaming JSON
    DataFrame (the first step one generator file per micro-batch), its output rows' JSON values written by Spark's
    text file sink, which the next step reads. Returns the seconds the steps took and the last step's output."""
    from statekeep.spark import apply_function

    steps = PIPELINES[query].steps
    url = f"local://{work / 'store'}"
    seconds = 0.0
    inputs = data / PIPELINES[query].source
    outputs: list[Any] = []
    for index, step in enumerate(steps):
        files = sorted(inputs.glob("part-*.jsonl")) if index == 0 else sink_files(inputs)
        if not files:
            return seconds, []
        user_config = dict(step.user_config)
        if step.py.startswith("q13"):
            user_config["sideInput"] = str(side_input)
        output = work / "out" / f"{query}-{index}"
        began = time.perf_counter()
        schema = spark.read.json([str(f) for f in (files[:1] if index == 0 else files)]).schema
        reader = spark.readStream.schema(schema)
        if index == 0:
            reader = reader.option("maxFilesPerTrigger", 1)
        out = apply_function(reader.json(str(inputs)), str(EXAMPLES / step.py), name=f"public/default/{query}-{index}",
                             key=step.key_field, store=url, parallelism=parallelism,
                             config={"userConfig": user_config})
        running = (out.select("value").writeStream.format("text").option("path", str(output))
                   .option("checkpointLocation", str(work / "checkpoints" / str(index)))
                   .trigger(availableNow=True).start())
        running.awaitTermination()
        seconds += time.perf_counter() - began
        outputs = [json.loads(line) for path in sink_files(output) for line in path.read_text().splitlines() if line]
        inputs = output
    return seconds, outputs
