"""Streaming queries of a user's own, each with a statekeep function in it (``statekeep.spark.apply_function``), in
one driver, for the operator's fault tests: JSON-lines files in (one micro-batch per file), a word count whose output
row per record is ``(word, n)``, n the word's count after it, out to a file sink or to ``foreachBatch`` writing one
file per batch id.

    python operator_query.py [--master M] --query SPEC [--query SPEC ...]

Each SPEC is a JSON object: ``store``, ``input``, ``out``, ``checkpoint``, ``flags`` (directories or URLs), and
optionally ``sink`` (``file`` or ``foreach``), ``pause`` (``WHERE@BATCH,...``), ``state_dir`` and ``outputs_dir``.
The queries run side by side in the one driver: a fault test kills them all with it, each at its own fault.

``pause`` arms faults, each ``WHERE@BATCH`` and each once (the file ``FLAGS/armed-WHERE`` exists until the fault
takes it): ``function``: the function stops (sleeps) on partition 1 of micro-batch BATCH, writing
``FLAGS/paused-function``, so the test can SIGKILL the driver with partition 0's state committed and the sink not;
``before-sink`` / ``after-sink``: the ``foreachBatch`` handler of batch BATCH stops after the batch's rows were
computed (state committed), before or after it wrote them; ``kill-worker``: the function SIGKILLs its own Python
worker on micro-batch BATCH's partition 0. When a query ends the driver writes what its sink holds, as JSON rows,
to ``OUT.result.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time


def faults(pause: str) -> dict[str, str]:
    """``--pause`` as {where: batch id}."""
    return dict(item.split("@") for item in pause.split(",") if item and item != "none")


def take(flags: str, where: str) -> bool:
    """Whether the fault ``where`` is still armed; it is disarmed by this call."""
    try:
        os.remove(os.path.join(flags, f"armed-{where}"))
        return True
    except FileNotFoundError:
        return False


def stop(flags: str, where: str) -> None:
    open(os.path.join(flags, f"paused-{where}"), "w").close()
    time.sleep(600)


def count(flags: str, pause: str):
    armed = faults(pause)

    def process(input, context):
        word = input["word"]
        context.incr_counter(word, 1)
        batch, partition, _ = context.get_message_id().split(":")
        if armed.get("function") == batch and partition == "1" and take(flags, "function"):
            stop(flags, "function")
        if armed.get("kill-worker") == batch and partition == "0" and take(flags, "kill-worker"):
            os.kill(os.getpid(), signal.SIGKILL)
        return {"word": word, "n": context.get_counter(word)}
    return process


def start(spark, spec: dict):
    """Start the query of ``spec`` (see the module's docstring); returns it."""
    from statekeep.spark import apply_function

    pause, flags, out = spec.get("pause", "none"), spec["flags"], spec["out"]
    events = spark.readStream.schema("word string").option("maxFilesPerTrigger", 1).json(spec["input"])
    rows = apply_function(events, count(flags, pause), name="public/default/opcount", key="word", store=spec["store"],
                          state_dir=spec.get("state_dir"), output_schema="word string, n long",
                          outputs_dir=spec.get("outputs_dir"))
    writer = rows.writeStream.option("checkpointLocation", spec["checkpoint"]).trigger(availableNow=True)
    if spec.get("sink", "file") == "file":
        return writer.format("json").option("path", out).start()

    def handle(frame, batch_id):
        rows = [r.asDict() for r in frame.collect()]
        armed = faults(pause)

        def pause_at(where):
            if armed.get(where) == str(batch_id) and take(flags, where):
                stop(flags, where)
        pause_at("before-sink")
        os.makedirs(out, exist_ok=True)
        target = os.path.join(out, f"batch-{batch_id}.json")
        with open(target + ".tmp", "w") as f:  # by batch id: a replay replaces the batch's file
            json.dump(rows, f)
        os.replace(target + ".tmp", target)
        pause_at("after-sink")
    return writer.foreachBatch(handle).start()


def write_result(spark, spec: dict) -> None:
    """What the sink of ``spec``'s ended query holds, as JSON rows, to ``OUT.result.json``."""
    out = spec["out"]
    if spec.get("sink", "file") == "file":
        rows = [r.asDict() for r in spark.read.schema("word string, n long").json(out).collect()]
    else:
        rows = [row for name in sorted(os.listdir(out)) if name.endswith(".json")
                for row in json.load(open(os.path.join(out, name)))]
    with open(out.rstrip("/") + ".result.json", "w") as f:
        json.dump(rows, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--query", action="append", type=json.loads, required=True)
    args = parser.parse_args()

    from statekeep.functions.driver.session import spark_session

    spark = spark_session(args.master, "operator-test")
    running = [(spec, start(spark, spec)) for spec in args.query]
    while running:  # each query's result as soon as it ends (another may be stopped at a fault meanwhile)
        for spec, query in list(running):
            if query.awaitTermination(0.2):  # raises if the query failed
                write_result(spark, spec)
                running.remove((spec, query))
    spark.stop()


if __name__ == "__main__":
    main()
