"""A streaming query of a user's own, with a statekeep function in it (``statekeep.spark.apply_function``), for the
operator's fault tests: JSON-lines files in (one micro-batch per file), a word count whose output row per record is
``(word, n)``, n the word's count after it, out to a file sink or to ``foreachBatch`` writing one file per batch id.

    python operator_query.py --store URL --input DIR --out DIR --checkpoint DIR --flags DIR
        [--sink file|foreach] [--pause WHERE@BATCH,...] [--master M]
        [--state-dir URL] [--outputs-dir DIR]

``--pause`` arms faults, each ``WHERE@BATCH`` and each once (the file ``FLAGS/armed-WHERE`` exists until the fault
takes it): ``function``: the function stops (sleeps) on partition 1 of micro-batch BATCH, writing
``FLAGS/paused-function``, so the test can SIGKILL the driver with partition 0's state committed and the sink not;
``before-sink`` / ``after-sink``: the ``foreachBatch`` handler of batch BATCH stops after the batch's rows were
computed (state committed), before or after it wrote them; ``kill-worker``: the function SIGKILLs its own Python
worker on micro-batch BATCH's partition 0. At the end the driver writes what the sink holds, as JSON rows, to
``OUT.result.json``.
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


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--store", "--input", "--out", "--checkpoint", "--flags"):
        parser.add_argument(name, required=True)
    parser.add_argument("--sink", choices=("file", "foreach"), default="file")
    parser.add_argument("--pause", default="none")
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--outputs-dir", default=None)
    args = parser.parse_args()

    from statekeep.functions.driver.session import spark_session
    from statekeep.spark import apply_function

    spark = spark_session(args.master, "operator-test")
    events = spark.readStream.schema("word string").option("maxFilesPerTrigger", 1).json(args.input)
    out = apply_function(events, count(args.flags, args.pause), name="public/default/opcount", key="word",
                         store=args.store, state_dir=args.state_dir, output_schema="word string, n long",
                         outputs_dir=args.outputs_dir)
    writer = out.writeStream.option("checkpointLocation", args.checkpoint).trigger(availableNow=True)
    if args.sink == "file":
        query = writer.format("json").option("path", args.out).start()
    else:
        def handle(frame, batch_id):
            rows = [r.asDict() for r in frame.collect()]
            armed = faults(args.pause)

            def pause_at(where):
                if armed.get(where) == str(batch_id) and take(args.flags, where):
                    stop(args.flags, where)
            pause_at("before-sink")
            os.makedirs(args.out, exist_ok=True)
            target = os.path.join(args.out, f"batch-{batch_id}.json")
            with open(target + ".tmp", "w") as f:  # by batch id: a replay replaces the batch's file
                json.dump(rows, f)
            os.replace(target + ".tmp", target)
            pause_at("after-sink")
        query = writer.foreachBatch(handle).start()
    query.awaitTermination()
    if args.sink == "file":
        rows = [r.asDict() for r in spark.read.schema("word string, n long").json(args.out).collect()]
    else:
        rows = [row for name in sorted(os.listdir(args.out)) if name.endswith(".json")
                for row in json.load(open(os.path.join(args.out, name)))]
    with open(args.out.rstrip("/") + ".result.json", "w") as f:
        json.dump(rows, f)
    spark.stop()


if __name__ == "__main__":
    main()
