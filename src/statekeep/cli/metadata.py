"""``statekeep metadata get|put|ls|rm|watch PATH [--store URL] [--json]``. ``watch --json`` prints one
JSON object per line."""

from __future__ import annotations

import argparse
import base64
import json
import sys
import threading
from collections.abc import Callable

from statekeep.cli.common import print_json, print_result, utc_time
from statekeep.errors import NotFoundError
from statekeep.metadata import GetResult, Notification, Stat, open_store
from statekeep.metadata.registry import default_store_url


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = groups.add_parser("metadata", help="read and write the metadata store")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help)
        sub.add_argument("path", help="absolute key path, e.g. /config/a")
        sub.add_argument("--store", default=default_store_url(),
                         help="metadata store URL (default: $STATEKEEP_STORE or %(default)s)")
        sub.add_argument("--json", action="store_true", help="print JSON")
        sub.set_defaults(run=run)
        return sub

    command("get", _get, "print a value and its version")
    put = command("put", _put, "write a value")
    put.add_argument("value", nargs="?", help="the value as text; '-' or absent: read bytes from stdin")
    put.add_argument("--version", type=int, default=None,
                     help="expected version (-1: must not exist); the put fails if it differs")
    command("ls", _ls, "list the children of a path")
    rm = command("rm", _rm, "delete a key")
    rm.add_argument("--version", type=int, default=None, help="expected version")
    rm.add_argument("-r", "--recursive", action="store_true", help="delete everything below too")
    watch = command("watch", _watch, "print notifications for PATH and below until interrupted")
    watch.add_argument("--count", type=int, default=None, help="exit after this many notifications")


def _stat_json(stat: Stat) -> dict[str, object]:
    return {"path": stat.path, "version": stat.version, "createdMs": stat.created_ms,
            "modifiedMs": stat.modified_ms, "ephemeral": stat.ephemeral}


def _value_json(value: bytes) -> dict[str, str]:
    try:
        return {"value": value.decode("utf-8")}
    except UnicodeDecodeError:
        return {"valueBase64": base64.b64encode(value).decode()}


def _get(args: argparse.Namespace) -> int:
    with open_store(args.store) as store:
        result: GetResult | None = store.get(args.path)
    if result is None:
        raise NotFoundError(args.path)
    if args.json:
        print_json({**_value_json(result.value), **_stat_json(result.stat)})
    else:
        shown = _value_json(result.value)
        print(shown.get("value", f"base64:{shown.get('valueBase64')}"))
        print(f"# version {result.stat.version}, modified {utc_time(result.stat.modified_ms, 'milliseconds')}"
              + (", ephemeral" if result.stat.ephemeral else ""), file=sys.stderr)
    return 0


def _put(args: argparse.Namespace) -> int:
    value = sys.stdin.buffer.read() if args.value in (None, "-") else args.value.encode()
    with open_store(args.store) as store:
        stat = store.put(args.path, value, args.version)
    return print_result(args, _stat_json(stat), [f"{stat.path}: version {stat.version}"])


def _ls(args: argparse.Namespace) -> int:
    with open_store(args.store) as store:
        children = store.get_children(args.path)
    return print_result(args, children, children)


def _rm(args: argparse.Namespace) -> int:
    with open_store(args.store) as store:
        if args.recursive:
            store.delete_recursive(args.path)
        else:
            store.delete(args.path, args.version)
    if args.json:
        print_json({"deleted": args.path})
    return 0


def _watch(args: argparse.Namespace) -> int:
    done = threading.Event()
    seen = 0
    prefix = args.path.rstrip("/") + "/"

    def on_event(event: Notification) -> None:
        nonlocal seen
        if done.is_set() or not (event.path == args.path or event.path.startswith(prefix) or args.path == "/"):
            return
        if args.json:  # one object per line (JSON Lines), so a reader can parse each event as it comes
            print(json.dumps({"type": event.type.value, "path": event.path}))
        else:
            print(f"{event.type.value:16} {event.path}")
        sys.stdout.flush()
        seen += 1
        if args.count is not None and seen >= args.count:
            done.set()

    with open_store(args.store) as store:
        store.add_listener(on_event)
        print(f"# watching {args.path} on {args.store}", file=sys.stderr, flush=True)
        done.wait()
    return 0
