"""``statekeep functions ...``, shaped like pulsar-admin functions.

Like pulsar-admin, the commands talk to a server by default (``--url``, ``$STATEKEEP_URL``, the client
config file's ``webServiceUrl``, else ``http://localhost:8080``; see :mod:`statekeep.cli.client` for
the whole order and the token), and say so in one line when none answers. ``--data-dir DIR`` (the
store ``local://DIR``) or ``--store URL`` work on a store directly instead, with the same JSON: the
server's is printed as received, the direct one comes from the same
:mod:`statekeep.functions.config.service` code the server runs. Each command makes one call on a
:class:`~statekeep.cli.functions_client.FunctionsClient` (:func:`statekeep.cli.common.functions_client`
picks the server's or the store's), never branching on where it goes.

A function is named by ``--fqfn tenant/namespace/name`` or by ``--tenant`` (default ``public``),
``--namespace`` (default ``default``) and ``--name``, not both. ``create``/``update``/``localrun``
take the function config as pulsar-admin does: ``--function-config-file`` (YAML with Pulsar's
FunctionConfig fields, needs PyYAML: the ``client`` extra), overridden field by field by flags.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

from statekeep.cli import common, lifecycle, snapshots
from statekeep.cli import run as localrun
from statekeep.cli.common import WATCH_INTERVAL_S, Handler, add_config_flags, print_json
from statekeep.cli.functions_client import DEFAULT_CODE_NAME
from statekeep.errors import InvalidArgumentError, NotFoundError


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = groups.add_parser("functions", help="manage functions and their state (like pulsar-admin functions)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Handler, help: str, *, named: bool = True,
                direct: bool = False) -> argparse.ArgumentParser:
        """A subcommand with the naming flags and where it goes. ``direct``: it works on a store only
        (localrun, snapshots), so its help offers no ``--url`` or ``--token``; a ``--url`` given anyway is
        refused by the command, saying to use ``--data-dir`` or ``--store``."""
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help, description=help[:1].upper() + help[1:]
                                                           + ".")
        if named:
            sub.add_argument("--fqfn", default=None, metavar="TENANT/NAMESPACE/NAME",
                             help="the fully qualified function name (instead of --tenant, --namespace, --name)")
        sub.add_argument("--tenant", default=None, help="tenant (default: public)")
        sub.add_argument("--namespace", default=None, help="namespace (default: default)")
        if named:
            sub.add_argument("--name", default=None, help="function name")
        where = sub.add_mutually_exclusive_group()
        if direct:
            where.add_argument("--data-dir", default=None,
                               help="the store local://DIR (default: $STATEKEEP_STORE, else local://./.statekeep-data)")
            where.add_argument("--url", default=None, help=argparse.SUPPRESS)  # refused with a reason, not offered
        else:
            where.add_argument("--url", default=None,
                               help="the server (default: $STATEKEEP_URL, else client.conf's webServiceUrl, else "
                                    "http://localhost:8080; with only $STATEKEEP_STORE set, that store directly)")
            where.add_argument("--data-dir", default=None, help="work directly on the store local://DIR, not a server")
        where.add_argument("--store", default=None, metavar="URL",
                           help="work directly on this metadata store URL" + ("" if direct else ", not a server"))
        if not direct:
            sub.add_argument("--token", default=None,
                             help="bearer token for the server (default: $STATEKEEP_TOKEN, client.conf's authParams)")
        sub.set_defaults(run=functools.partial(common.identified, run, named))
        return sub

    for name, help in (("create", "register a function"), ("update", "change a function's config or code")):
        add_config_flags(command(name, functools.partial(_write, create=name == "create"), help))
    command("get", common.print_answer, "print a function's config (JSON)")
    ls = command("list", _list, "list the functions of a namespace", named=False)
    ls.add_argument("--json", action="store_true", help="print a JSON array")
    command("delete", _delete, "delete a function and all its state")
    query = command("querystate", _querystate, "print a state key as FunctionState JSON")
    query.add_argument("-k", "--key", required=True, help="state key")
    query.add_argument("-w", "--watch", action="store_true",
                       help="keep watching the key: print it (one JSON object per line) each time it changes")
    variables = command("variables", _variables, "print a key's typed state variables decoded to JSON")
    variables.add_argument("-k", "--key", required=True, help="the record key")
    command("timers", common.print_answer, "print a function's timers and watermark (JSON)")
    put = command("putstate", _putstate, "write a state key from FunctionState JSON")
    put.add_argument("-k", "--key", help="state key (default: the key in --state)")
    put.add_argument("-s", "--state", required=True,
                     help='FunctionState JSON, e.g. \'{"key": "k", "stringValue": "v"}\' or {"numberValue": 5}')

    localrun.register(command)
    lifecycle.register(command)
    snapshots.register(command)


# ---- commands --------------------------------------------------------------------------------


def _write(args: argparse.Namespace, create: bool) -> int:
    config, code = common.config_from_args(args), common.read_py(args)
    if create and code is None:
        raise InvalidArgumentError("create needs --py FILE (or py: in --function-config-file)")
    path = common.code_path(args)
    if path:
        config["py"] = Path(path).name
    code_name = Path(path).name if path else DEFAULT_CODE_NAME
    with common.functions_client(args) as client:
        write = client.create if create else client.update
        write(args.tenant, args.namespace, args.name, config, code, code_name)
    print("Created successfully" if create else "Updated successfully")
    return 0


def _list(args: argparse.Namespace) -> int:
    with common.functions_client(args) as client:
        names = client.list(args.tenant, args.namespace)
    return common.print_result(args, names, names)


def _delete(args: argparse.Namespace) -> int:
    with common.functions_client(args) as client:
        client.delete(args.tenant, args.namespace, args.name)
    print("Deleted successfully")
    return 0


def _querystate(args: argparse.Namespace) -> int:
    """Print the key once, or with ``--watch`` each time it changes (one JSON object per line; a missing
    key is said once on stderr and watched on), until interrupted, as pulsar-admin's querystate -w."""
    with common.functions_client(args) as client:
        if not args.watch:
            print_json(client.query_state(args.tenant, args.namespace, args.name, args.key))
            return 0
        last: object = None
        while True:
            try:
                state: object = client.query_state(args.tenant, args.namespace, args.name, args.key)
            except NotFoundError as e:
                state = e.__class__
                if last is not state:
                    print(f"statekeep: not found: {e}", file=sys.stderr, flush=True)
            else:
                if state != last:
                    print(json.dumps(state), flush=True)
            last = state
            time.sleep(WATCH_INTERVAL_S)


def _variables(args: argparse.Namespace) -> int:
    with common.functions_client(args) as client:
        print_json(client.key_variables(args.tenant, args.namespace, args.name, args.key))
    return 0


def _putstate(args: argparse.Namespace) -> int:
    try:
        state = json.loads(args.state)
    except ValueError as e:
        raise InvalidArgumentError(f"--state is not valid JSON: {e}") from None
    key = args.key or (state.get("key") if isinstance(state, dict) else None)
    if not isinstance(key, str) or not key:
        raise InvalidArgumentError("give the key with --key or as \"key\" in --state")
    if isinstance(state, dict):
        state.setdefault("key", key)
    with common.functions_client(args) as client:
        out = client.put_state(args.tenant, args.namespace, args.name, key, state)
    print_json(out)
    return 0
