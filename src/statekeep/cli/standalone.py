"""``statekeep standalone [--data-dir DIR] [--port 8080] [--host 127.0.0.1]``: the REST API on the
embedded default store ``local://DIR``, plus the functions worker that runs every created function
on Spark (:mod:`statekeep.functions.worker`). ``--follow T/N/F[@LEADER_URL]`` (repeatable) also serves a
read-only follower of that function (leader default: this server's own store) under
``/admin/v3/followers/T/N/F``, its copy in ``DIR/followers/T.N.F``."""

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
    parser.add_argument("--follow", action="append", default=[], metavar="T/N/F[@LEADER_URL]",
                        help="serve a read-only follower of function T/N/F of LEADER_URL (default: this store)")
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
                                  worker=build_worker(args), followers=follower_specs(args.follow, data_dir)))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger(__name__).info("statekeep standalone: data in %s, auth %s", data_dir,
                                     "on" if args.tokens_file else "off")
    uvicorn.run(app, host=args.host, port=args.port, access_log=args.access_log, log_level="info")
    return 0


def follower_specs(follow: list[str], data_dir: str) -> list[dict]:
    """``T/N/F[@LEADER_URL]`` options as ``ServerConfig.followers`` entries."""
    from statekeep.errors import InvalidArgumentError

    specs = []
    for item in follow:
        function, _, leader = item.partition("@")
        parts = function.split("/")
        if len(parts) != 3 or not all(parts):
            raise InvalidArgumentError(f"--follow takes TENANT/NAMESPACE/NAME[@LEADER_URL], not {item!r}")
        specs.append({"tenant": parts[0], "namespace": parts[1], "name": parts[2],
                      "leader": leader or f"local://{data_dir}",
                      "local_dir": os.path.join(data_dir, "followers", ".".join(parts))})
    return specs
