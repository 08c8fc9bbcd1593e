"""``statekeep standalone [--data-dir DIR | --store URL] [--port 8080] [--host 127.0.0.1]``: the REST
API plus the functions worker that runs every created function on Spark
(:mod:`statekeep.functions.admin.worker`).

``--data-dir DIR`` (the default, ``./.statekeep-data``) keeps everything in the embedded store
``local://DIR``, with Spark checkpoints in ``DIR/checkpoints``. ``--store URL`` serves any backend
(``zk://``, ``etcd://``, ...): several such servers, on one host or many, share one registry and one
state; each function runs on exactly one of their workers at a time and moves to another when its
worker dies. Spark checkpoints must then be where every server reaches them, so ``--store`` needs
``--checkpoint-dir`` (a shared directory or a Hadoop-compatible URL) unless ``--no-worker``.
A worker is known as ``ADVERTISED_ADDRESS:PORT`` (in ``functions status`` and the REST status).

``--follow T/N/F[@LEADER_URL][?prefix=P]`` (repeatable) also serves a read-only follower of that function
(leader default: this server's own store) under ``/admin/v3/followers/T/N/F``, its copy in
``DIR/followers/T.N.F`` (with ``--store``: under ``--followers-dir``); with ``prefix``, of the keys
starting with ``P`` only (URL-encoded; other query parameters stay with the leader's URL)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode

from statekeep.errors import InvalidArgumentError

if TYPE_CHECKING:
    from statekeep.functions.admin.worker import SparkWorker
    from statekeep.server.worker import NullWorker

DEFAULT_DATA_DIR = "./.statekeep-data"
DEFAULT_FOLLOWERS_DIR = "./.statekeep-followers"


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = groups.add_parser("standalone", help="run the REST API and functions worker (embedded store or --store)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--data-dir", default=None,
                       help=f"data directory, used as local://DIR (default: $STATEKEEP_DATA_DIR or {DEFAULT_DATA_DIR})")
    where.add_argument("--store", default=None, metavar="URL",
                       help="metadata store shared by every server of a cluster, e.g. zk://HOST:2181/statekeep or "
                            "etcd://HOST:2379/statekeep (needs --checkpoint-dir)")
    parser.add_argument("--checkpoint-dir", default=None, metavar="DIR_OR_URL",
                        help="Spark checkpoints: a directory or Hadoop-compatible URL every server reaches "
                             "(default with --data-dir: DATA_DIR/checkpoints; required with --store)")
    parser.add_argument("--state-dir", default=None, metavar="URL",
                        help="functions created here keep partition-owned state durable under URL (a shared "
                             "directory or s3://bucket/prefix, hdfs://...): the way to scale out on a cluster")
    parser.add_argument("--port", type=int, default=8080, help="HTTP port (default: %(default)s; 0: any free port)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    parser.add_argument("--advertised-address", default=None,
                        help="this server's name in worker ids (default: --host, or the host name if --host is "
                             "a wildcard address)")
    parser.add_argument("--tokens-file", default=None,
                        help='JSON {"TOKEN": {"superuser": true} | {"tenants": [...]}}: turns bearer-token auth on')
    parser.add_argument("--access-log", action="store_true", help="log every request")
    parser.add_argument("--spark-master", default="local[*,4]",
                        help="Spark master for functions, e.g. spark://HOST:7077 (default: %(default)s)")
    add_spark_conf_option(parser)
    parser.add_argument("--no-worker", action="store_true", help="serve the REST API only; run no functions")
    parser.add_argument("--follow", action="append", default=[], metavar="T/N/F[@LEADER_URL][?prefix=P]",
                        help="serve a read-only follower of function T/N/F of LEADER_URL (default: this store); "
                             "?prefix=P: of the keys starting with P only")
    parser.add_argument("--followers-dir", default=None,
                        help="followers' local copies (default: DATA_DIR/followers; "
                             f"with --store {DEFAULT_FOLLOWERS_DIR})")
    from statekeep.cli.topics import add_topics_dir_option

    add_topics_dir_option(parser)
    parser.set_defaults(run=_run)


def add_spark_conf_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the driver, e.g. spark.cores.max=2 when several servers share a "
                             "Spark cluster (repeatable)")


def spark_conf(items: list[str]) -> dict[str, str]:
    """``--spark-conf KEY=VALUE`` options as a dict; InvalidArgumentError for anything else."""
    conf = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip().startswith("spark."):
            raise InvalidArgumentError(f"--spark-conf takes spark.KEY=VALUE, not {item!r}")
        conf[key.strip()] = value
    return conf


def resolve_location(location: str) -> str:
    """A checkpoint or output location as every process sees it: a URL (``scheme://...``) unchanged,
    a local path made absolute (relative paths would otherwise depend on each process's directory)."""
    return location if "://" in location else os.path.abspath(location)


def _layout(args: argparse.Namespace) -> tuple[str, str | None, str | None]:
    """(metadata URL, checkpoint root, data dir or None) from the options; InvalidArgumentError for a
    combination that cannot work."""
    if args.store is not None:
        if "://" not in args.store:
            raise InvalidArgumentError(f"--store takes a URL such as zk://HOST:PORT/ROOT or etcd://HOST:PORT/PREFIX, "
                                       f"not {args.store!r} (for a directory use --data-dir)")
        if args.checkpoint_dir is None and not args.no_worker:
            raise InvalidArgumentError(
                "--store needs --checkpoint-dir: a directory or Hadoop-compatible URL (hdfs://, s3a://, ...) that "
                "every server reaches, so a function moved to another server resumes from its checkpoint")
        checkpoints = resolve_location(args.checkpoint_dir) if args.checkpoint_dir else None
        return args.store, checkpoints, None
    data_dir = os.path.abspath(args.data_dir or os.environ.get("STATEKEEP_DATA_DIR") or DEFAULT_DATA_DIR)
    checkpoints = (resolve_location(args.checkpoint_dir) if args.checkpoint_dir
                   else os.path.join(data_dir, "checkpoints"))
    return f"local://{data_dir}", checkpoints, data_dir


def advertised_address(args: argparse.Namespace) -> str:
    if args.advertised_address:
        return str(args.advertised_address)
    return socket.gethostname() if args.host in ("", "0.0.0.0", "::") else str(args.host)


def build_worker(args: argparse.Namespace, metadata_url: str, checkpoint_root: str | None) -> NullWorker | SparkWorker:
    """The functions worker of ``standalone`` on the store and checkpoints of :func:`_layout`: runs every
    registered function on Spark (``--no-worker``: the REST API only). Its ``worker_id`` is set once the port
    is known."""
    from statekeep.server.worker import NullWorker

    if args.no_worker:
        return NullWorker()
    from statekeep.functions.admin.worker import SparkWorker

    # _layout refuses a store without --checkpoint-dir unless --no-worker, handled above
    assert checkpoint_root is not None
    return SparkWorker(metadata_url, checkpoint_root, master=args.spark_master, spark_conf=spark_conf(args.spark_conf))


def _run(args: argparse.Namespace) -> int:
    metadata_url, checkpoints, data_dir = _layout(args)  # bad options fail before anything starts
    spark_conf(args.spark_conf)
    from statekeep.cli.topics import use_topics_dir

    use_topics_dir(args, data_dir)  # the server's triggers and its functions' executors use it
    # raises MissingDependencyError naming the extra to install
    from statekeep.server import ServerConfig, create_app

    if data_dir is not None:
        os.makedirs(data_dir, exist_ok=True)
    import uvicorn  # after statekeep.server, which names the extra to install if it is missing

    followers_dir = os.path.abspath(args.followers_dir) if args.followers_dir else None
    worker = build_worker(args, metadata_url, checkpoints)
    app = create_app(ServerConfig(metadata_url=metadata_url, tokens_file=args.tokens_file, worker=worker,
                                  followers=follower_specs(args.follow, data_dir, leader=metadata_url,
                                                           followers_dir=followers_dir),
                                  state_dir=args.state_dir))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    config = uvicorn.Config(app, host=args.host, port=args.port, access_log=args.access_log, log_level="info")
    sock = config.bind_socket()  # the port first (it may be 0): it is part of the worker's id
    # bind_socket leaves proto 0, so asyncio would not set TCP_NODELAY on accepted connections
    # (Nagle + delayed ACK: ~40 ms per keep-alive request); give it the protocol
    sock = socket.socket(sock.family, sock.type, socket.IPPROTO_TCP, fileno=sock.detach())
    port = sock.getsockname()[1]
    if hasattr(worker, "worker_id"):
        worker.worker_id = f"{advertised_address(args)}:{port}"
    logging.getLogger(__name__).info(
        "statekeep standalone: store %s, checkpoints %s, worker %s, auth %s", _redact(metadata_url),
        checkpoints or "-", getattr(worker, "worker_id", "off"), "on" if args.tokens_file else "off")
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def _redact(url: str) -> str:
    """A store URL for the log, without credentials (``user:password@``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, path = rest.partition("/")
    return f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"


def follower_specs(follow: list[str], data_dir: str | None, *, leader: str | None = None,
                   followers_dir: str | None = None) -> list[dict[str, str | None]]:
    """``T/N/F[@LEADER_URL][?prefix=P]`` options as ``ServerConfig.followers`` entries. The leader defaults
    to ``leader`` (else ``local://DATA_DIR``), each local copy goes to ``FOLLOWERS_DIR/T.N.F``
    (default ``DATA_DIR/followers``); ``prefix`` becomes the entry's ``key_prefix``."""
    default_leader = leader or (f"local://{data_dir}" if data_dir else None)
    if followers_dir is None:
        followers_dir = os.path.join(data_dir, "followers") if data_dir else os.path.abspath(DEFAULT_FOLLOWERS_DIR)
    specs: list[dict[str, str | None]] = []
    for item in follow:
        function, _, from_leader = item.partition("@")
        key_prefix = None
        if not from_leader and "?" in function:
            function, _, query = function.partition("?")
            key_prefix, rest = _take_prefix(query)
            if rest:
                raise InvalidArgumentError(f"--follow {item!r}: only ?prefix=P is an option of a follower")
        elif "?" in from_leader:  # the leader URL's own options (e.g. ?max_value_size=) stay with it
            from_leader, _, query = from_leader.partition("?")
            key_prefix, rest = _take_prefix(query)
            from_leader += f"?{rest}" if rest else ""
        parts = function.split("/")
        if len(parts) != 3 or not all(parts):
            raise InvalidArgumentError(f"--follow takes TENANT/NAMESPACE/NAME[@LEADER_URL], not {item!r}")
        specs.append({"tenant": parts[0], "namespace": parts[1], "name": parts[2],
                      "leader": from_leader or default_leader,
                      "local_dir": os.path.join(followers_dir, ".".join(parts))})
        if key_prefix is not None:
            specs[-1]["key_prefix"] = key_prefix
    return specs


def _take_prefix(query: str) -> tuple[str | None, str]:
    """(the ``prefix`` parameter of ``query``, the query without it)."""
    pairs = parse_qsl(query, keep_blank_values=True)
    prefixes = [v for k, v in pairs if k == "prefix"]
    if len(prefixes) > 1:
        raise InvalidArgumentError(f"--follow takes one ?prefix=, not {len(prefixes)}")
    return (prefixes[0] if prefixes else None), urlencode([(k, v) for k, v in pairs if k != "prefix"])
