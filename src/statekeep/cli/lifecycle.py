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
other commands act on the workers that run functions, so they need a server. Each command makes one call
on a :class:`~statekeep.cli.functions_client.FunctionsClient`; the direct one refuses what needs a server.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from statekeep.cli import common
from statekeep.cli.common import CommandAdder, print_answer
from statekeep.errors import InvalidArgumentError


def register(command: CommandAdder) -> None:
    """Add the commands through the functions group's ``command`` helper."""
    for name, run, help in (
            ("status", print_answer, "a function's status (Pulsar's FunctionStatus; directly: statekeep's record)"),
            ("stats", print_answer, "a function's stats (Pulsar's FunctionStats)"),
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


_DONE = {"start": "Started successfully", "stop": "Stopped successfully", "restart": "Restarted successfully"}


def _lifecycle(args: argparse.Namespace) -> int:
    with common.functions_client(args) as client:
        client.act(args.command, args.tenant, args.namespace, args.name, args.instance_id)
    print(_DONE[args.command])
    return 0


def _trigger(args: argparse.Namespace) -> int:
    file_name = None
    if args.trigger_file is not None:
        try:
            value = Path(args.trigger_file).read_bytes()
        except OSError as e:
            raise InvalidArgumentError(f"cannot read --trigger-file {args.trigger_file}: {e.strerror}") from None
        file_name = Path(args.trigger_file).name
    else:
        value = args.trigger_value.encode()
    with common.functions_client(args) as client:
        out = client.trigger(args.tenant, args.namespace, args.name, value, file_name=file_name, topic=args.topic)
    # the function's output: a text as it is, anything else as JSON (pulsar-admin prints the string)
    print(out if isinstance(out, str) else json.dumps(out))
    return 0
