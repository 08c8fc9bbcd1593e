"""``statekeep functions create|update|get|list|delete|querystate|putstate``, shaped like pulsar-admin.

Each command works against a running server (``--url http://HOST:PORT``, ``$STATEKEEP_URL``; with
``--token`` or ``$STATEKEEP_TOKEN`` when auth is on) or directly on a store (``--data-dir DIR`` for
``local://DIR``, or ``--store URL``; default ``$STATEKEEP_STORE`` or ``local://./.statekeep-data``).
Both paths give the same JSON: the server's is printed as received, the direct one comes from the
same :mod:`statekeep.functions.service` code the server runs.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from statekeep import errors
from statekeep.cli import default_store_url, print_json
from statekeep.errors import InvalidArgumentError

# HTTP status -> the error the CLI reports (the inverse of statekeep.server.errors.STATUS)
_HTTP_ERRORS = {400: errors.InvalidArgumentError, 401: errors.UnauthorizedError, 403: errors.ForbiddenError,
                404: errors.NotFoundError, 409: errors.BadVersionError, 413: errors.ValueTooLargeError}


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("functions", help="manage functions and their state (like pulsar-admin functions)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run, help: str, *, named: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help)
        sub.add_argument("--tenant", default="public", help="tenant (default: %(default)s)")
        sub.add_argument("--namespace", default="default", help="namespace (default: %(default)s)")
        if named:
            sub.add_argument("--name", required=True, help="function name")
        where = sub.add_mutually_exclusive_group()
        where.add_argument("--url", default=None, help="a running server, e.g. http://127.0.0.1:8080 ($STATEKEEP_URL)")
        where.add_argument("--data-dir", default=None, help="work directly on the store local://DIR")
        where.add_argument("--store", default=None, help="work directly on this metadata store URL")
        sub.add_argument("--token", default=os.environ.get("STATEKEEP_TOKEN"),
                         help="bearer token for --url ($STATEKEEP_TOKEN)")
        sub.set_defaults(run=run)
        return sub

    for name, run, help in (("create", _create, "register a function"),
                            ("update", _update, "change a function's config or code")):
        sub = command(name, run, help)
        sub.add_argument("--py", help="the function's Python file (defines process(input, context))")
        sub.add_argument("--inputs", help="comma-separated input sources")
        sub.add_argument("--output", help="output destination")
        sub.add_argument("--classname", help="entry point (default: process)")
        sub.add_argument("--parallelism", type=int, help="number of partitions")
        sub.add_argument("--user-config", help="JSON object passed to the function")
        sub.add_argument("--key-field", help="input field that partitions records")
        sub.add_argument("--input-format", help="format of the inputs (e.g. json, text)")
        sub.add_argument("--output-format", help="format of the output")
    command("get", _get, "print a function's config (JSON)")
    ls = command("list", _list, "list the functions of a namespace", named=False)
    ls.add_argument("--json", action="store_true", help="print a JSON array")
    command("delete", _delete, "delete a function and all its state")
    query = command("querystate", _querystate, "print a state key as FunctionState JSON")
    query.add_argument("--key", required=True, help="state key")
    put = command("putstate", _putstate, "write a state key from FunctionState JSON")
    put.add_argument("--key", help="state key (default: the key in --state)")
    put.add_argument("--state", required=True,
                     help='FunctionState JSON, e.g. \'{"key": "k", "stringValue": "v"}\' or {"numberValue": 5}')

    from statekeep.cli import run, snapshots

    run.register(command)
    snapshots.register(command)


# ---- the two ways of reaching functions ----------------------------------------------------------


class _Http:
    """The REST API through urllib (no extra dependency for the CLI)."""

    def __init__(self, url: str, token: str | None) -> None:
        self.base = url.rstrip("/") + "/admin/v3/functions"
        self.token = token

    def request(self, method: str, path: list[str], body: bytes | None = None,
                content_type: str | None = None, query: dict | None = None) -> Any:
        url = self.base + "".join("/" + _quote(p) for p in path)
        if query:
            url += "?" + urllib.parse.urlencode(query)
        req = urllib.request.Request(url, data=body, method=method)
        if content_type:
            req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=60) as response:
                raw = response.read()
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                reason = json.loads(raw)["reason"]
            except (ValueError, KeyError, TypeError):
                reason = raw.decode("utf-8", "replace") or e.reason
            cls = _HTTP_ERRORS.get(e.code, errors.StoreUnavailableError if e.code >= 500 else errors.StatekeepError)
            raise cls(f"HTTP {e.code}: {reason}") from None
        except (urllib.error.URLError, OSError) as e:
            raise errors.StoreUnavailableError(f"cannot reach {self.base}: {getattr(e, 'reason', e)}") from None
        return json.loads(raw) if raw else None

    def upload(self, method: str, path: list[str], config: dict, code: bytes | None, filename: str) -> Any:
        parts = [("functionConfig", None, "application/json", json.dumps(config).encode())]
        if code is not None:
            parts.append(("data", filename, "application/octet-stream", code))
        body, content_type = _multipart(parts)
        return self.request(method, path, body, content_type)


def _quote(segment: str) -> str:
    # '.' too, so keys like "." or ".." are never taken for dot segments of the URL
    return urllib.parse.quote(segment, safe="").replace(".", "%2E")


def _multipart(parts: list[tuple[str, str | None, str, bytes]]) -> tuple[bytes, str]:
    """Encode parts as pulsar-admin does: one form-data part per field, each with its content type."""
    boundary = uuid.uuid4().hex
    out = bytearray()
    for name, filename, content_type, data in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += (f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
                f"Content-Type: {content_type}\r\n\r\n").encode() + data + b"\r\n"
    out += f"--{boundary}--\r\n".encode()
    return bytes(out), f"multipart/form-data; boundary={boundary}"


def _direct(args: argparse.Namespace):
    from statekeep.functions.service import FunctionService

    url = f"local://{os.path.abspath(args.data_dir)}" if args.data_dir else args.store or default_store_url()
    return FunctionService.open(url)


def _remote(args: argparse.Namespace) -> _Http | None:
    url = args.url or (None if args.data_dir or args.store else os.environ.get("STATEKEEP_URL"))
    return _Http(url, args.token) if url else None


# ---- commands --------------------------------------------------------------------------------


def _config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    config: dict[str, Any] = {"tenant": args.tenant, "namespace": args.namespace, "name": args.name}
    if args.inputs is not None:
        config["inputs"] = [s.strip() for s in args.inputs.split(",") if s.strip()]
    if args.user_config is not None:
        try:
            config["userConfig"] = json.loads(args.user_config)
        except ValueError as e:
            raise InvalidArgumentError(f"--user-config is not valid JSON: {e}") from None
    for option, field in (("py", "py"), ("output", "output"), ("classname", "className"),
                          ("parallelism", "parallelism"), ("key_field", "keyField"),
                          ("input_format", "inputFormat"), ("output_format", "outputFormat")):
        if getattr(args, option) is not None:
            config[field] = getattr(args, option)
    return config


def _read_py(args: argparse.Namespace) -> bytes | None:
    if args.py is None:
        return None
    try:
        return Path(args.py).read_bytes()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read --py {args.py}: {e.strerror}") from None


def _create(args: argparse.Namespace) -> int:
    return _write(args, create=True)


def _update(args: argparse.Namespace) -> int:
    return _write(args, create=False)


def _write(args: argparse.Namespace, create: bool) -> int:
    config, code = _config_from_args(args), _read_py(args)
    if create and code is None:
        raise InvalidArgumentError("create needs --py FILE")
    if args.py:
        config["py"] = Path(args.py).name
    remote = _remote(args)
    if remote:
        remote.upload("POST" if create else "PUT", [args.tenant, args.namespace, args.name], config, code,
                      Path(args.py).name if args.py else "function.py")
    else:
        with _direct(args) as service:
            if create:
                service.registry.create(config, code)
            else:
                service.registry.update(args.tenant, args.namespace, args.name, config, code)
    print("Created successfully" if create else "Updated successfully")
    return 0


def _get(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if remote:
        print_json(remote.request("GET", [args.tenant, args.namespace, args.name]))
    else:
        with _direct(args) as service:
            print_json(service.registry.get(args.tenant, args.namespace, args.name).to_json())
    return 0


def _list(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if remote:
        names = remote.request("GET", [args.tenant, args.namespace])
    else:
        with _direct(args) as service:
            names = service.registry.list(args.tenant, args.namespace)
    if args.json:
        print_json(names)
    else:
        for name in names:
            print(name)
    return 0


def _delete(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if remote:
        remote.request("DELETE", [args.tenant, args.namespace, args.name])
    else:
        with _direct(args) as service:
            service.registry.delete(args.tenant, args.namespace, args.name)
    print("Deleted successfully")
    return 0


def _querystate(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if remote:
        print_json(remote.request("GET", [args.tenant, args.namespace, args.name, "state", args.key]))
    else:
        with _direct(args) as service:
            print_json(service.query_state(args.tenant, args.namespace, args.name, args.key))
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
    remote = _remote(args)
    if remote:
        body, content_type = _multipart([("state", None, "application/json", json.dumps(state).encode())])
        out = remote.request("POST", [args.tenant, args.namespace, args.name, "state", key], body, content_type)
    else:
        with _direct(args) as service:
            out = service.put_state(args.tenant, args.namespace, args.name, key, state)
    print_json(out)
    return 0

