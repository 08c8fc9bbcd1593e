"""``statekeep functions localrun``: running a function on Spark, in this process.

``localrun`` takes the function's lock (the one standalone workers run it under; it waits up to
``--lock-wait`` seconds for a holder that is stopping or died), registers (or updates) the function
in the store, then runs it as a Spark Structured Streaming query: ``--once`` processes everything
available at start and exits (Spark's ``availableNow``); without it the query runs until
interrupted. Checkpoints go to ``--checkpoint-dir`` (a directory or Hadoop-compatible URL), by
default ``DATA_DIR/checkpoints``; with ``--store`` and no ``--checkpoint-dir`` that default is
``./.statekeep-data/checkpoints``, and localrun says so. It always works on a store (``--data-dir``,
``--store``, else ``$STATEKEEP_STORE`` or ``local://./.statekeep-data``), never through a server, so it
opens the store itself (:func:`statekeep.cli.common.direct`) rather than going through a
:class:`~statekeep.cli.functions_client.FunctionsClient`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import sys
from typing import TYPE_CHECKING, Any

from statekeep.cli import common
from statekeep.cli.common import CommandAdder, print_json
from statekeep.errors import AlreadyExistsError, InvalidArgumentError
from statekeep.metadata.registry import default_store_url

if TYPE_CHECKING:
    from statekeep.functions.config.service import FunctionService
    from statekeep.metadata import MetadataStore


def register(command: CommandAdder) -> None:
    """Add ``localrun`` through the functions group's ``command`` helper."""
    from statekeep.cli.standalone import add_spark_conf_option

    run = command("localrun", _localrun, "run a function on Spark in this process, on a store (not a server)",
                  direct=True)
    common.add_config_flags(run)
    run.add_argument("--once", action="store_true",
                     help="process every record there at start, print the function's status as JSON, then exit "
                          "(Spark's availableNow trigger; default: run until interrupted)")
    run.add_argument("--spark-master", default="local[*,4]",
                     help="Spark master, e.g. spark://HOST:7077 (default: %(default)s)")
    add_spark_conf_option(run)
    run.add_argument("--checkpoint-dir", default=None, metavar="DIR_OR_URL",
                     help="Spark checkpoints: a directory or Hadoop-compatible URL (default: DATA_DIR/checkpoints)")
    run.add_argument("--lock-wait", type=float, default=60.0, metavar="SECONDS",
                     help="how long to wait for the worker running the function to let it go (default: %(default)s)")
    run.add_argument("--skip-errors", action="store_true",
                     help="skip and count records on which the function raises (default: fail the query)")
    from statekeep.cli.topics import add_topics_dir_option

    add_topics_dir_option(run)


def _localrun(args: argparse.Namespace) -> int:
    from statekeep.cli.standalone import resolve_location, spark_conf
    from statekeep.coordination import CoordinationService
    from statekeep.functions.admin.worker import acquire_function_lock

    config, code, path = common.config_from_args(args), common.read_py(args), common.code_path(args)
    if code is None or path is None or not config.get("inputs"):
        raise InvalidArgumentError("localrun needs --py FILE and --inputs SRC (flags or --function-config-file)")
    if args.url:
        raise InvalidArgumentError("localrun works on a store (--data-dir or --store), not a server's --url")
    if args.lock_wait < 0:
        raise InvalidArgumentError("--lock-wait takes a number of seconds >= 0")
    args.spark_conf = spark_conf(args.spark_conf)
    config["py"] = os.path.basename(path)
    if args.skip_errors:
        config.setdefault("userConfig", {})["skipErrors"] = True
    if config.get("output") and config["output"] != "console":
        # executors write it: on a cluster their working directory is not ours
        config["output"] = resolve_location(config["output"])
    data_dir = os.path.abspath(args.data_dir or "./.statekeep-data")
    from statekeep.cli.topics import use_topics_dir

    use_topics_dir(args, data_dir)
    if args.checkpoint_dir:
        checkpoint_root = resolve_location(args.checkpoint_dir)
    else:
        checkpoint_root = os.path.join(data_dir, "checkpoints")
        if args.store:
            print(f"statekeep: checkpoints in {checkpoint_root} (--checkpoint-dir sets a place every "
                  "machine reaches)", file=sys.stderr)
    service = common.direct(args)
    store = service.registry.store
    # the store the executors open: the registry's own (a local:// one by its absolute path)
    if args.data_dir or not (args.store or os.environ.get("STATEKEEP_STORE")):
        metadata_url = f"local://{data_dir}"
    else:
        metadata_url = args.store or default_store_url()
    worker_id = f"localrun@{socket.gethostname()}:{os.getpid()}"
    with service, CoordinationService(store) as coordination:
        lock = acquire_function_lock(
            coordination, args.tenant, args.namespace, args.name, worker_id, wait=args.lock_wait,
            on_wait=lambda holder: print(f"statekeep: waiting for worker {holder} to let go of the function",
                                         file=sys.stderr))
        with lock:
            return _run_locked(args, config, code, service, store, metadata_url, checkpoint_root, worker_id,
                               os.path.join(data_dir, "logs"))


def _run_locked(args: argparse.Namespace, config: dict[str, Any], code: bytes, service: FunctionService,
                store: MetadataStore,
                metadata_url: str, checkpoint_root: str, worker_id: str, logs: str) -> int:
    """Register and run the function while this process holds its lock; Spark's log goes to a file in ``logs``."""
    from statekeep.functions.driver.spark import read_status, run_registered

    try:
        service.registry.create(config, code)
    except AlreadyExistsError:
        service.registry.update(args.tenant, args.namespace, args.name, config, code)
    from statekeep.functions.driver.session import log_to_file, spark_session, stderr_into

    # Spark's log (its JVM's start, a failing task's retries, tracebacks, a stopping session's listener) in a file,
    # named on failure; but the console output's records are printed by the executors on the JVM's stderr
    log = os.path.join(logs, f"{args.tenant}.{args.namespace}.{args.name}.spark.log")
    with contextlib.nullcontext() if args.output == "console" else stderr_into(log):
        spark = spark_session(args.spark_master, conf=args.spark_conf)
    log_to_file(spark, log)
    query = run_registered(service, metadata_url, args.tenant, args.namespace, args.name,
                           checkpoint_root=checkpoint_root, once=args.once, spark=spark, worker_id=worker_id)
    try:
        query.await_termination()
    except KeyboardInterrupt:
        query.stop()
    except Exception as e:  # noqa: BLE001 - a StreamingQueryException: report the function's own message
        message = str(e)
        marker = "FunctionRecordError: "
        if marker in message:
            message = message[message.index(marker) + len(marker):].split("\n")[0]
        print(f"statekeep: the function failed: {message} (Spark's log: {os.path.abspath(log)})", file=sys.stderr)
        return 1
    print_json(read_status(store, args.tenant, args.namespace, args.name) or query.status())
    return 0
