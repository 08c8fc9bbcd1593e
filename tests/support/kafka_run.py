"""Run the Kafka test function (support/kafka_function.py) with the runner until its input is read, as
``functions localrun --once`` does, for the fault tests of broker topics: a Kafka or Pulsar topic in, one out.

    python kafka_run.py --store URL --checkpoints DIR --input kafka://... --output kafka://... [--per-batch N]
        [--parallelism P] [--changelog-topic kafka://...] [--until FILE --trigger-ms MS]

With ``--until`` it runs as ``functions localrun`` does (a micro-batch when input arrives, every MS ms at most) until
FILE exists, then stops: for a source without a read limit (Pulsar's), whose micro-batches the test makes by
producing in steps.

The function is created on the first run (``parallelism`` P, default 2, ``maxOffsetsPerTrigger`` N: one micro-batch
per N messages; its state changes also on the changelog topic if one is given) and run again from its checkpoint by
the next, with its parallelism updated to P. Faults come from the environment (see kafka_function.py).
"""

import argparse
import json
import sys
from pathlib import Path

FUNCTION = Path(__file__).with_name("kafka_function.py")
# not this script's directory on the path: its pulsar.py (the tests' helpers) would shadow pulsar-client's module
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != FUNCTION.parent.resolve()]


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--store", "--checkpoints", "--input", "--output"):
        parser.add_argument(name, required=True)
    parser.add_argument("--per-batch", type=int, default=100)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--changelog-topic", default=None)
    parser.add_argument("--master", default="local[2,4]")
    parser.add_argument("--until", default=None)
    parser.add_argument("--trigger-ms", type=int, default=0)
    args = parser.parse_args()

    from statekeep.errors import NotFoundError
    from statekeep.functions.config.service import FunctionService
    from statekeep.functions.driver.spark import run_registered

    with FunctionService.open(args.store) as service:
        try:
            if service.registry.get("public", "default", "kcount").parallelism != args.parallelism:
                service.registry.update("public", "default", "kcount", {"parallelism": args.parallelism})
        except NotFoundError:
            service.registry.create({"tenant": "public", "namespace": "default", "name": "kcount", "py": FUNCTION.name,
                                     "inputs": [args.input], "output": args.output, "parallelism": args.parallelism,
                                     "triggerIntervalMs": args.trigger_ms,
                                     "userConfig": {"inputOptions": {"maxOffsetsPerTrigger": str(args.per_batch)}},
                                     **({"changelogTopic": args.changelog_topic} if args.changelog_topic else {})},
                                    FUNCTION.read_bytes())
        query = run_registered(service, args.store, "public", "default", "kcount", checkpoint_root=args.checkpoints,
                               once=args.until is None, master=args.master)
        if args.until is None:
            query.await_termination()
        else:
            while not Path(args.until).exists() and not query.await_termination(0.2):
                pass
            query.stop()
        status = query.status()
    print(json.dumps(status))
    if status["error"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
