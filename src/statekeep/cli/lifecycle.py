"""``statekeep functions status|stats|start|stop|restart|trigger``, as pulsar-admin has them.

They call Pulsar's REST paths on the server (:mod:`statekeep.cli.client` says which server):
``GET .../{tenant}/{namespace}/{name}/status`` and ``/stats`` (with ``--instance-id N``:
``.../{name}/{N}/status|stats``), ``POST .../start|stop|restart`` (per instance likewise) and
``POST .../trigger`` (multipart ``data`` for ``--trigger-value``, ``dataStream`` for ``--trigger-file``,
``topic`` for ``--topic``), and print the answer: JSON as received, the trigger's output as text, and
pulsar-admin's "Started successfully" etc. for the lifecycle calls.

``status`` also works directly on a store (``--data-dir``/``--store``): it then prints statekeep's own
status record (``processed``, ``batches``, ``last_batch``, ``workerId``: the worker or localrun holding
the function's lock). ``stats`` directly on a store prints the same FunctionStats a server would. The
other commands act on the workers that run functions, so they need a server.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from statekeep.cli import common
from statekeep.cli.common import CommandAdder, print_json
from statekeep.cli.client import Http
from statekeep.errors import InvalidArgumentError


def register(command: CommandAdder) -> None:
    """Add the commands through the functions group's ``command`` helper."""
    for name, run, help in (
            ("status", _status, "a function's status (Pulsar's FunctionStatus; directly: statekeep's record)"),
            ("stats", _stats, "a function's stats (Pulsar's FunctionStats)"),
            ("start", _lifecycle, "start a stopped function (or one instance)"),
            ("stop", _lifecycle, "stop a function (or one instance); it stays stopped until started"),
            ("restart", _lifecycle, "restart a function (or one instance)")):
        sub = command(name, run, help)
        sub.add_argument("--instance-id", type=_instance_id, default=None,
                         help="one instance (default: every instance)")
    trigger = command("trigger", _trigger, "run a function on one value through its real state; print its output")
    value = trigger.add_mutually_exclusive_group(required=True)
    value.add_argument("--trigger-value", default=None, help="the input value")
    value.add_argument("--trigger-file", default=None, help="a file whose content is the input value")
    trigger.add_argument("--topic", default=None, help="the input the value is taken to come from")


def _instance_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"instance-id must be a number, not {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"instance-id must be >= 0, not {value}")
    return value


def _path(args: argparse.Namespace, action: str) -> list[str]:
    path = [args.tenant, args.namespace, args.name]
    if getattr(args, "instance_id", None) is not None:
        path.append(str(args.instance_id))
    return path + [action]


def _server(args: argparse.Namespace) -> Http:

    remote = common.remote(args)
    if remote is None:
        raise InvalidArgumentError(f"{args.command} acts through a server (--url, $STATEKEEP_URL or client.conf), "
                                   "not directly on a store (--data-dir, --store, $STATEKEEP_STORE)")
    return remote


def _status(args: argparse.Namespace) -> int:

    remote = common.remote(args)
    if remote is not None:
        with remote:
            print_json(remote.request("GET", _path(args, "status")))
        return 0
    if args.instance_id is not None:
        raise InvalidArgumentError("--instance-id needs a server; directly on a store, status is the function's")
    from statekeep.functions.worker import function_status

    with common.direct(args) as service:
        service.registry.get(args.tenant, args.namespace, args.name)  # NotFoundError for an unknown function
        status = function_status(service.registry.store, args.tenant, args.namespace, args.name)
    print_json(status)
    return 0


def _stats(args: argparse.Namespace) -> int:

    remote = common.remote(args)
    if remote is not None:
        with remote:
            print_json(remote.request("GET", _path(args, "stats")))
        return 0
    from statekeep.functions import lifecycle, stats
    from statekeep.functions.worker import function_status as read_function_status

    fqfn = f"{args.tenant}/{args.namespace}/{args.name}"
    with common.direct(args) as service:  # the same Pulsar FunctionStats the server composes, from the store
        cfg = service.registry.get(args.tenant, args.namespace, args.name)  # NotFoundError if unknown
        raw = read_function_status(service.registry.store, args.tenant, args.namespace, args.name)
        if lifecycle.is_stopped(service.registry, args.tenant, args.namespace, args.name):
            raw["running"] = False
    if args.instance_id is None:
        print_json(stats.function_stats(raw, cfg.parallelism))
    elif args.instance_id >= cfg.parallelism:
        raise InvalidArgumentError(f"{fqfn} has {cfg.parallelism} instance(s); there is no instance {args.instance_id}")
    else:
        print_json(stats.instance_stats(raw, args.instance_id))
    return 0


_DONE = {"start": "Started successfully", "stop": "Stopped successfully", "restart": "Restarted successfully"}


def _lifecycle(args: argparse.Namespace) -> int:
    with _server(args) as remote:
        remote.request("POST", _path(args, args.command))
    print(_DONE[args.command])
    return 0


def _trigger(args: argparse.Namespace) -> int:
    files: dict[str, tuple[Any, ...]] = {}
    if args.trigger_file is not None:
        try:
            data = Path(args.trigger_file).read_bytes()
        except OSError as e:
            raise InvalidArgumentError(f"cannot read --trigger-file {args.trigger_file}: {e.strerror}") from None
        files["dataStream"] = (Path(args.trigger_file).name, data, "application/octet-stream")
    else:
        files["data"] = (None, args.trigger_value.encode(), "text/plain")
    if args.topic is not None:
        files["topic"] = (None, args.topic.encode(), "text/plain")
    with _server(args) as remote:
        out = remote.request("POST", _path(args, "trigger"), files=files)
    # the function's output: a text as it is, anything else as JSON (pulsar-admin prints the string)
    print(out if isinstance(out, str) else json.dumps(out))
    return 0
