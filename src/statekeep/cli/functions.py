"""``statekeep functions ...``, shaped like pulsar-admin functions.

Like pulsar-admin, the commands talk to a server by default (``--url``, ``$STATEKEEP_URL``, the client
config file's ``webServiceUrl``, else ``http://localhost:8080``; see :mod:`statekeep.cli.client` for
the whole order and the token), and say so in one line when none answers. ``--data-dir DIR`` (the
store ``local://DIR``) or ``--store URL`` work on a store directly instead, with the same JSON: the
server's is printed as received, the direct one comes from the same
:mod:`statekeep.functions.service` code the server runs.

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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statekeep.cli import print_json
from statekeep.cli.client import Http, direct_store_url, open_remote
from statekeep.cli.timeflags import add_time_flags, apply_time_flags
from statekeep.errors import InvalidArgumentError, MissingDependencyError, NotFoundError

if TYPE_CHECKING:
    from statekeep.functions.service import FunctionService

PROCESSING_GUARANTEES = ("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE", "MANUAL")  # Pulsar's enum
WATCH_INTERVAL_S = 1.0  # pulsar-admin's querystate --watch polls once a second

Handler = Callable[[argparse.Namespace], int]
#: ``command(name, handler, help, *, named=True)``: adds a subcommand with the naming and where-to flags
CommandAdder = Callable[..., argparse.ArgumentParser]


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = groups.add_parser("functions", help="manage functions and their state (like pulsar-admin functions)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Handler, help: str, *, named: bool = True) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help)
        if named:
            sub.add_argument("--fqfn", default=None, metavar="TENANT/NAMESPACE/NAME",
                             help="the fully qualified function name (instead of --tenant, --namespace, --name)")
        sub.add_argument("--tenant", default=None, help="tenant (default: public)")
        sub.add_argument("--namespace", default=None, help="namespace (default: default)")
        if named:
            sub.add_argument("--name", default=None, help="function name")
        where = sub.add_mutually_exclusive_group()
        where.add_argument("--url", default=None,
                           help="the server (default: $STATEKEEP_URL, client.conf's webServiceUrl, "
                                "else http://localhost:8080)")
        where.add_argument("--data-dir", default=None, help="work directly on the store local://DIR")
        where.add_argument("--store", default=None, help="work directly on this metadata store URL")
        sub.add_argument("--token", default=None,
                         help="bearer token for the server (default: $STATEKEEP_TOKEN, client.conf's authParams)")
        sub.set_defaults(run=functools.partial(_identified, run, named))
        return sub

    for name, handler, help in (("create", _create, "register a function"),
                                ("update", _update, "change a function's config or code")):
        add_config_flags(command(name, handler, help))
    command("get", _get, "print a function's config (JSON)")
    ls = command("list", _list, "list the functions of a namespace", named=False)
    ls.add_argument("--json", action="store_true", help="print a JSON array")
    command("delete", _delete, "delete a function and all its state")
    query = command("querystate", _querystate, "print a state key as FunctionState JSON")
    query.add_argument("-k", "--key", required=True, help="state key")
    query.add_argument("-w", "--watch", action="store_true",
                       help="keep watching the key: print it (one JSON object per line) each time it changes")
    command("timers", _timers, "print a function's timers and watermark (JSON)")
    put = command("putstate", _putstate, "write a state key from FunctionState JSON")
    put.add_argument("-k", "--key", help="state key (default: the key in --state)")
    put.add_argument("-s", "--state", required=True,
                     help='FunctionState JSON, e.g. \'{"key": "k", "stringValue": "v"}\' or {"numberValue": 5}')

    from statekeep.cli import lifecycle, snapshots
    from statekeep.cli import run as localrun

    localrun.register(command)
    lifecycle.register(command)
    snapshots.register(command)


#: pulsar-admin's other ``functions create`` flags: flag -> (FunctionConfig field, how its value is read). They
#: are taken as pulsar-admin takes them and go to the config, whose validation (FunctionConfig: REFUSED and
#: FIXED) says why statekeep refuses a value, in one place for the CLI, REST and config files alike.
PULSAR_FLAGS: dict[str, tuple[str, str]] = {
    "--jar": ("jar", "str"), "--go": ("go", "str"), "--function-type": ("functionType", "str"),
    "--topics-pattern": ("topicsPattern", "str"), "--producer-config": ("producerConfig", "json"),
    "--schema-type": ("outputSchemaType", "str"), "--input-specs": ("inputSpecs", "json"),
    "--input-type-class-name": ("inputTypeClassName", "str"),
    "--output-type-class-name": ("outputTypeClassName", "str"),
    "--retain-ordering": ("retainOrdering", "bool"), "--retain-key-ordering": ("retainKeyOrdering", "bool"),
    "--batch-builder": ("batchBuilder", "str"),
    "--forward-source-message-property": ("forwardSourceMessageProperty", "bool"),
    "--subs-name": ("subName", "str"), "--subs-position": ("subscriptionPosition", "str"),
    "--skip-to-latest": ("skipToLatest", "bool"), "--auto-ack": ("autoAck", "bool"),
    "--cleanup-subscription": ("cleanupSubscription", "bool"),
    "--custom-runtime-options": ("customRuntimeOptions", "str"), "--runtime-flags": ("runtimeFlags", "str"),
    "--max-pending-async-requests": ("maxPendingAsyncRequests", "int"),
    "--expose-pulsar-admin-client-enabled": ("exposePulsarAdminClientEnabled", "bool"),
    "--cpu": ("resources.cpu", "float"), "--ram": ("resources.ram", "int"), "--disk": ("resources.disk", "int"),
}


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return text.lower() == "true"


def add_config_flags(sub: argparse.ArgumentParser) -> None:
    """The function config flags of ``create``, ``update`` and ``localrun`` (pulsar-admin's names)."""
    sub.add_argument("--function-config-file", default=None, metavar="YAML",
                     help="a YAML file of FunctionConfig fields (flags override it)")
    sub.add_argument("--py", help="the function's Python file (defines process(input, context))")
    sub.add_argument("-i", "--inputs", help="comma-separated input sources")
    sub.add_argument("-o", "--output", help="output destination (a directory, or 'console')")
    sub.add_argument("--classname", help="entry point: process, module.process or module.Class (default: process)")
    sub.add_argument("--parallelism", type=int, help="number of partitions")
    sub.add_argument("--user-config", help="JSON object passed to the function")
    sub.add_argument("--secrets", help="JSON object: secret name -> how the secrets provider finds it")
    sub.add_argument("--custom-serde-inputs", metavar="JSON",
                     help='JSON object: input topic -> its pulsar.SerDe class, e.g. {"in": "mymodule.MySerDe"}')
    sub.add_argument("--custom-schema-inputs", metavar="JSON",
                     help='JSON object: input topic -> a pulsar.schema.Record class its JSON messages decode into')
    sub.add_argument("--output-serde-classname", metavar="MODULE.CLASS",
                     help="the pulsar.SerDe class serializing the function's results")
    sub.add_argument("--log-topic", help="where the function's log records also go (a topic or a directory)")
    sub.add_argument("--dead-letter-topic", help="where records that keep failing go (a topic or a directory)")
    sub.add_argument("--max-message-retries", type=int, help="retries of a failing record before it is skipped "
                     "or sent to the dead-letter topic")
    sub.add_argument("--timeout-ms", type=int, help="a record taking longer than this fails (a user exception)")
    sub.add_argument("--processing-guarantees", choices=PROCESSING_GUARANTEES, default=None,
                     help="delivery semantics (statekeep's state is exactly-once: EFFECTIVELY_ONCE)")
    sub.add_argument("--key-field", help="input field that partitions records")
    sub.add_argument("--input-format", help="format of the inputs (e.g. json, text)")
    sub.add_argument("--output-format", help="format of the output")
    pulsar = sub.add_argument_group("pulsar-admin's other flags (taken; the config check says what statekeep does "
                                    "with them, see the README)")
    for flag, (field, kind) in PULSAR_FLAGS.items():
        if kind == "bool":  # pulsar-admin's boolean flags: alone (true) or with true/false
            pulsar.add_argument(flag, nargs="?", const=True, type=_bool, default=None, metavar="true|false")
        else:
            pulsar.add_argument(flag, type={"int": int, "float": float}.get(kind, str), default=None,
                                metavar="JSON" if kind == "json" else kind.upper())
    sub.add_argument("--state-dir", metavar="URL", help="keep the function's state partition-owned, durable under "
                     "URL: a shared directory or an fsspec URL (s3://bucket/prefix, hdfs://...)")
    add_time_flags(sub)


# ---- naming the function ----------------------------------------------------------------------


def _identified(run: Handler, named: bool, args: argparse.Namespace) -> int:
    """Fill ``args.tenant``, ``args.namespace`` and ``args.name`` (from ``--fqfn``, the flags, a config
    file's fields, then the defaults), as pulsar-admin does, then run the command."""
    file_config = load_config_file(args.function_config_file) if getattr(args, "function_config_file", None) else {}
    args.file_config = file_config
    if named and args.fqfn is not None:
        if args.tenant is not None or args.namespace is not None or args.name is not None:
            raise InvalidArgumentError("give either --fqfn or --tenant/--namespace/--name, not both")
        parts = args.fqfn.split("/")
        if len(parts) != 3 or not all(parts):
            raise InvalidArgumentError(f"--fqfn must be tenant/namespace/name, not {args.fqfn!r}")
        args.tenant, args.namespace, args.name = parts
    args.tenant = args.tenant or file_config.get("tenant") or "public"
    args.namespace = args.namespace or file_config.get("namespace") or "default"
    if named:
        args.name = args.name or file_config.get("name")
        if not args.name:
            raise InvalidArgumentError("name the function with --name NAME or --fqfn TENANT/NAMESPACE/NAME")
    return int(run(args) or 0)


def load_config_file(path: str) -> dict[str, Any]:
    """A YAML function config file (Pulsar's FunctionConfig fields) as a dict.

    Raises :class:`MissingDependencyError` without PyYAML, :class:`InvalidArgumentError` for a file that
    cannot be read, is not YAML or is not a mapping."""
    try:
        import yaml  # type: ignore[import-untyped, unused-ignore]
    except ImportError as e:
        raise MissingDependencyError("--function-config-file needs PyYAML, in the client extra: "
                                     "pip install 'statekeep[client]'") from e
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read --function-config-file {path}: {e.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InvalidArgumentError(f"--function-config-file {path} is not valid YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidArgumentError(f"--function-config-file {path} must hold a mapping of FunctionConfig fields, "
                                   f"not a {type(data).__name__}")
    return data


# ---- the two ways of reaching functions ----------------------------------------------------------


def _direct(args: argparse.Namespace) -> FunctionService:
    """The :class:`FunctionService` on the store the command works on directly."""
    from statekeep.functions.service import FunctionService

    return FunctionService.open(direct_store_url(args))


def _remote(args: argparse.Namespace) -> Http | None:
    return open_remote(args)


# ---- commands --------------------------------------------------------------------------------


def _json_flag(args: argparse.Namespace, option: str) -> Any:
    text = getattr(args, option)
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidArgumentError(f"--{option.replace('_', '-')} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"--{option.replace('_', '-')} must be a JSON object")
    return value


def _config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The FunctionConfig JSON: the config file's fields, then the flags given, then the function's name."""
    config: dict[str, Any] = dict(getattr(args, "file_config", None) or {})
    config.update({"tenant": args.tenant, "namespace": args.namespace, "name": args.name})
    if args.inputs is not None:
        config["inputs"] = [s.strip() for s in args.inputs.split(",") if s.strip()]
    if args.user_config is not None:
        config["userConfig"] = _json_flag(args, "user_config")
    if getattr(args, "secrets", None) is not None:
        config["secrets"] = _json_flag(args, "secrets")
    for flag, (field, kind) in PULSAR_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value is None:
            continue
        if kind == "json":
            value = _json_flag(args, flag.lstrip("-").replace("-", "_"))
        if "." in field:  # --cpu/--ram/--disk: fields of resources
            config.setdefault(field.partition(".")[0], {})[field.partition(".")[2]] = value
        else:
            config[field] = value
    if getattr(args, "custom_serde_inputs", None) is not None:
        config["customSerdeInputs"] = _json_flag(args, "custom_serde_inputs")
    if getattr(args, "custom_schema_inputs", None) is not None:
        config["customSchemaInputs"] = _json_flag(args, "custom_schema_inputs")
    for option, field in (("py", "py"), ("output", "output"), ("classname", "className"),
                          ("parallelism", "parallelism"), ("key_field", "keyField"),
                          ("input_format", "inputFormat"), ("output_format", "outputFormat"),
                          ("processing_guarantees", "processingGuarantees"), ("log_topic", "logTopic"),
                          ("output_serde_classname", "outputSerdeClassName"), ("dead_letter_topic", "deadLetterTopic"),
                          ("max_message_retries", "maxMessageRetries"), ("timeout_ms", "timeoutMs")):
        if getattr(args, option, None) is not None:
            config[field] = getattr(args, option)
    if getattr(args, "state_dir", None):
        from statekeep.state.partitioned import state_storage

        config["stateStorage"] = state_storage(args.state_dir)
    apply_time_flags(args, config)
    return config


def _code_path(args: argparse.Namespace) -> str | None:
    """The function's file: ``--py``, else the config file's ``py`` (a path, as pulsar-admin reads it)."""
    if args.py is not None:
        return str(args.py)
    py = (getattr(args, "file_config", None) or {}).get("py")
    return str(py) if isinstance(py, str) and py else None


def _read_py(args: argparse.Namespace) -> bytes | None:
    path = _code_path(args)
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read --py {path}: {e.strerror}") from None


def _create(args: argparse.Namespace) -> int:
    return _write(args, create=True)


def _update(args: argparse.Namespace) -> int:
    return _write(args, create=False)


def _write(args: argparse.Namespace, create: bool) -> int:
    config, code = _config_from_args(args), _read_py(args)
    if create and code is None:
        raise InvalidArgumentError("create needs --py FILE (or py: in --function-config-file)")
    path = _code_path(args)
    if path:
        config["py"] = Path(path).name
    remote = _remote(args)
    if remote:
        with remote:
            remote.upload("POST" if create else "PUT", [args.tenant, args.namespace, args.name], config, code,
                          Path(path).name if path else "function.py")
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
        with remote:
            print_json(remote.request("GET", [args.tenant, args.namespace, args.name]))
    else:
        with _direct(args) as service:
            print_json(service.registry.get(args.tenant, args.namespace, args.name).to_json())
    return 0


def _list(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if remote:
        with remote:
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
        with remote:
            remote.request("DELETE", [args.tenant, args.namespace, args.name])
    else:
        with _direct(args) as service:
            service.registry.delete(args.tenant, args.namespace, args.name)
    print("Deleted successfully")
    return 0


def _timers(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if remote:
        with remote:
            print_json(remote.request("GET", [args.tenant, args.namespace, args.name, "timers"]))
            return 0
    with _direct(args) as service:
        print_json(service.list_timers(args.tenant, args.namespace, args.name))
    return 0


def _querystate(args: argparse.Namespace) -> int:
    remote = _remote(args)
    if remote:
        with remote:
            def fetch() -> Any:
                return remote.request("GET", [args.tenant, args.namespace, args.name, "state", args.key])
            return _query(args, fetch)
    with _direct(args) as service:
        return _query(args, lambda: service.query_state(args.tenant, args.namespace, args.name, args.key))


def _query(args: argparse.Namespace, fetch: Callable[[], Any]) -> int:
    """Print the key once, or with ``--watch`` each time it changes (one JSON object per line; a missing
    key is said once on stderr and watched on), until interrupted, as pulsar-admin's querystate -w."""
    if not args.watch:
        print_json(fetch())
        return 0
    last: object = None
    while True:
        try:
            state: object = fetch()
        except NotFoundError as e:
            state = e.__class__
            if last is not state:
                print(f"statekeep: not found: {e}", file=sys.stderr, flush=True)
        else:
            if state != last:
                print(json.dumps(state), flush=True)
        last = state
        time.sleep(WATCH_INTERVAL_S)


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
        with remote:
            out = remote.request("POST", [args.tenant, args.namespace, args.name, "state", key],
                                 files={"state": (None, json.dumps(state).encode(), "application/json")})
    else:
        with _direct(args) as service:
            out = service.put_state(args.tenant, args.namespace, args.name, key, state)
    print_json(out)
    return 0
