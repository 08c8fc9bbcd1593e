"""``statekeep functions localrun`` and ``statekeep functions status``: running a function on Spark.

``localrun`` registers (or updates) the function in the store, then runs it as a Spark Structured
Streaming query: ``--once`` processes everything available at start and exits (Spark's
``availableNow``); without it the query runs until interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys

from statekeep.cli import print_json
from statekeep.errors import AlreadyExistsError, InvalidArgumentError


def register(command) -> None:
    """Add ``localrun`` and ``status`` through the functions group's ``command`` helper."""
    run = command("localrun", _localrun, "run a function on Spark against local inputs")
    for flag, help in (("--py", "the function's Python file"), ("--inputs", "comma-separated input directories"),
                       ("--output", "output directory (or 'console')"), ("--key-field", "field that partitions records"),
                       ("--input-format", "json, csv, text, parquet or rate (default: from the input name)"),
                       ("--output-format", "jsonl or parquet"), ("--user-config", "JSON object for the function")):
        run.add_argument(flag, help=help)
    run.add_argument("--classname", default=None, help="entry point (default: process)")
    run.add_argument("--parallelism", type=int, default=None, help="Spark partitions for the function (default: 1)")
    run.add_argument("--once", action="store_true", help="process what is there now, then exit")
    run.add_argument("--spark-master", default="local[*,4]", help="Spark master (default: %(default)s)")
    run.add_argument("--checkpoint-dir", default=None, help="Spark checkpoints (default: DATA_DIR/checkpoints)")
    run.add_argument("--skip-errors", action="store_true",
                     help="skip and count records on which the function raises (default: fail the query)")
    command("status", _status, "show a function's query state, records processed and last batch")


def _service_and_url(args: argparse.Namespace):
    from statekeep.cli.functions import _direct

    if args.url:
        raise InvalidArgumentError("localrun and status work on a store (--data-dir or --store), not --url")
    service = _direct(args)
    return service, service.registry.store


def _localrun(args: argparse.Namespace) -> int:
    from statekeep.cli.functions import _config_from_args, _read_py
    from statekeep.functions.spark import read_status, run_registered

    config, code = _config_from_args(args), _read_py(args)
    if code is None or not config.get("inputs"):
        raise InvalidArgumentError("localrun needs --py FILE and --inputs SRC")
    config["py"] = os.path.basename(args.py)
    if args.skip_errors:
        config.setdefault("userConfig", {})["skipErrors"] = True
    data_dir = os.path.abspath(args.data_dir or "./.statekeep-data")
    service, store = _service_and_url(args)
    with service:
        try:
            service.registry.create(config, code)
        except AlreadyExistsError:
            service.registry.update(args.tenant, args.namespace, args.name, config, code)
        metadata_url = args.store or f"local://{data_dir}"
        query = run_registered(service, metadata_url, args.tenant, args.namespace, args.name,
                               checkpoint_root=args.checkpoint_dir or os.path.join(data_dir, "checkpoints"),
                               once=args.once, master=args.spark_master)
        try:
            query.await_termination()
        except KeyboardInterrupt:
            query.stop()
        except Exception as e:  # a StreamingQueryException: report the function's own message
            message = str(e)
            marker = "FunctionRecordError: "
            if marker in message:
                message = message[message.index(marker) + len(marker):].split("\n")[0]
            print(f"statekeep: the function failed: {message}", file=sys.stderr)
            return 1
        print_json(read_status(store, args.tenant, args.namespace, args.name) or query.status())
    return 0


def _status(args: argparse.Namespace) -> int:
    from statekeep.functions.spark import read_status

    service, store = _service_and_url(args)
    with service:
        service.registry.get(args.tenant, args.namespace, args.name)  # NotFoundError for an unknown function
        status = read_status(store, args.tenant, args.namespace, args.name)
    print_json(status or {"running": False, "batches": 0, "processed": 0, "last_batch": None})
    return 0
