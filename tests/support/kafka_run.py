"""Run the Kafka test function (support/kafka_function.py) with the runner until its input is read, as
``functions localrun --once`` does, for the Kafka fault tests: Kafka topic in, Kafka topic out.

    python kafka_run.py --store URL --checkpoints DIR --input kafka://... --output kafka://... [--per-batch N]

The function is created on the first run (``parallelism`` 2, ``maxOffsetsPerTrigger`` N: one micro-batch per N
messages) and run again from its checkpoint by the next. Faults come from the environment (see kafka_function.py).
"""

import argparse
import json
from pathlib import Path

FUNCTION = Path(__file__).with_name("kafka_function.py")


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--store", "--checkpoints", "--input", "--output"):
        parser.add_argument(name, required=True)
    parser.add_argument("--per-batch", type=int, default=100)
    parser.add_argument("--master", default="local[2,4]")
    args = parser.parse_args()

    from statekeep.errors import NotFoundError
    from statekeep.functions.config.service import FunctionService
    from statekeep.functions.driver.spark import run_registered

    with FunctionService.open(args.store) as service:
        try:
            service.registry.get("public", "default", "kcount")
        except NotFoundError:
            service.registry.create({"tenant": "public", "namespace": "default", "name": "kcount", "py": FUNCTION.name,
                                     "inputs": [args.input], "output": args.output, "parallelism": 2,
                                     "userConfig": {"inputOptions": {"maxOffsetsPerTrigger": str(args.per_batch)}}},
                                    FUNCTION.read_bytes())
        query = run_registered(service, args.store, "public", "default", "kcount", checkpoint_root=args.checkpoints,
                               once=True, master=args.master)
        query.await_termination()
        status = query.status()
    print(json.dumps(status))
    if status["error"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
