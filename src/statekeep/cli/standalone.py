"""``statekeep standalone [--data-dir DIR] [--port 8080] [--host 127.0.0.1]``: the REST API on the
embedded default store ``local://DIR``, plus the functions worker that runs every created function
on Spark (:mod:`statekeep.functions.worker`)."""

from __future__ import annotations

import argparse
import logging
import os

DEFAULT_DATA_DIR = "./.statekeep-data"


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("standalone", help="run the REST API and functions worker on a local data directory")
    parser.add_argument("--data-dir", default=os.environ.get("STATEKEEP_DATA_DIR", DEFAULT_DATA_DIR),
                        help="data directory, used as local://DIR (default: $STATEKEEP_DATA_DIR or %(default)s)")
    parser.add_argument("--port", type=int, default=8080, help="HTTP port (default: %(default)s; 0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--tokens-file", default=None,
                        help='JSON {"TOKEN": {"superuser": true} | {"tenants": [...]}}: turns bearer-token auth on')
    parser.add_argument("--access-log", action="store_true", help="log every request")
    parser.add_argument("--spark-master", default="local[*,4]", help="Spark master for functions (default: %(default)s)")
    parser.add_argument("--no-worker", action="store_true", help="serve the REST API only; run no functions")
    parser.set_defaults(run=_run)


def build_worker(args: argparse.Namespace):
    """The functions worker of ``standalone``: runs every registered function on Spark
    (``--no-worker``: the REST API only)."""
    from statekeep.server.worker import NullWorker

    if args.no_worker:
        return NullWorker()
    from statekeep.functions.worker import SparkWorker

    data_dir = os.path.abspath(args.data_dir)
    return SparkWorker(f"local://{data_dir}", os.path.join(data_dir, "checkpoints"), master=args.spark_master)


def _run(args: argparse.Namespace) -> int:
    from statekeep.server import ServerConfig, create_app  # raises MissingDependencyError naming the extra

    import uvicorn

    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    app = create_app(ServerConfig(metadata_url=f"local://{data_dir}", tokens_file=args.tokens_file,
                                  worker=build_worker(args)))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger(__name__).info("statekeep standalone: data in %s, auth %s", data_dir,
                                     "on" if args.tokens_file else "off")
    uvicorn.run(app, host=args.host, port=args.port, access_log=args.access_log, log_level="info")
    return 0
