"""What the ``statekeep functions`` commands share: naming the function (``--fqfn`` or ``--tenant``,
``--namespace``, ``--name``), the function config flags and config file, reaching functions (one
:class:`~statekeep.cli.functions_client.FunctionsClient`, to a server or a store directly; a store for the
direct-only commands), and printing JSON. The command modules (:mod:`.functions`,
:mod:`.lifecycle`, :mod:`.run`, :mod:`.snapshots`) import from here, never from each other.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from statekeep.cli.client import direct_store_url, open_remote
from statekeep.cli.functions_client import DirectFunctions, FunctionsClient, RemoteFunctions
from statekeep.cli.timeflags import add_time_flags, apply_time_flags
from statekeep.errors import InvalidArgumentError, MissingDependencyError

if TYPE_CHECKING:
    from statekeep.functions.config.service import FunctionService


def print_json(data: object) -> None:
    """Print ``data`` as JSON on stdout, as every command does."""
    json.dump(data, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def print_result(args: argparse.Namespace, data: object, lines: Iterable[str]) -> int:
    """``data`` as JSON with ``--json``, else ``lines``, one a line (what a listing or report prints); 0."""
    if args.json:
        print_json(data)
    else:
        for line in lines:
            print(line)
    return 0


def utc_time(ms: int, timespec: str = "seconds") -> str:
    """A time in ms since the epoch as ISO 8601 UTC, as the commands print times."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(timespec=timespec)


PROCESSING_GUARANTEES = ("ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE", "MANUAL")  # Pulsar's enum
WATCH_INTERVAL_S = 1.0  # pulsar-admin's querystate --watch polls once a second

Handler = Callable[[argparse.Namespace], int]
#: ``command(name, handler, help, *, named=True)``: adds a subcommand with the naming and where-to flags
CommandAdder = Callable[..., argparse.ArgumentParser]


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


def interval_ms(text: str) -> int:
    """``--trigger-interval``: ``0``, or a number with its unit, ``ms`` or ``s`` (``250ms``, ``1.5s``), as ms."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s)?\s*", text)
    if not match or (match[2] is None and float(match[1]) != 0):
        raise argparse.ArgumentTypeError(f"expected 0 or a duration such as 250ms or 2s, not {text!r}")
    return round(float(match[1]) * (1000 if match[2] == "s" else 1))


def add_config_flags(sub: argparse.ArgumentParser) -> None:
    """The function config flags of ``create``, ``update`` and ``localrun`` (pulsar-admin's names)."""
    sub.add_argument("--function-config-file", default=None, metavar="YAML",
                     help="a YAML file of FunctionConfig fields (flags override it)")
    sub.add_argument("--py", help="the function's Python file: process(input, context), process(input), "
                     "process_batch(records, context) or a pulsar.Function class (see --classname)")
    sub.add_argument("-i", "--inputs", help="comma-separated inputs: Kafka topics (kafka://HOST:PORT/TOPIC), "
                     "a Pulsar broker's topics (pulsar://HOST:PORT/persistent://T/N/TOPIC[?admin=URL]), statekeep's "
                     "file topics (persistent://T/N/TOPIC), files or directories (JSON lines, text, CSV, "
                     "Parquet), rate, or statekeep://T/N/F (a function's changelog)")
    sub.add_argument("-o", "--output", help="where results go: a Kafka topic (kafka://HOST:PORT/TOPIC, exactly "
                     "once), a Pulsar broker's topic (pulsar://HOST:PORT/persistent://T/N/TOPIC, effectively once: "
                     "the namespace must deduplicate), a file topic (persistent://T/N/TOPIC), a directory or fsspec "
                     "URL (JSON lines, or Parquet with --output-format parquet), or 'console' (default: none)")
    sub.add_argument("--classname", help="entry point: process, module.process or module.Class (default: process)")
    sub.add_argument("--parallelism", type=int, help="Spark partitions (Pulsar's instances) of the function's query")
    sub.add_argument("--user-config", help="JSON object passed to the function")
    sub.add_argument("--secrets", help="JSON object: secret name -> how the secrets provider finds it")
    sub.add_argument("--custom-serde-inputs", metavar="JSON",
                     help='JSON object: input topic -> its pulsar.SerDe class, e.g. {"in": "mymodule.MySerDe"}')
    sub.add_argument("--custom-schema-inputs", metavar="JSON",
                     help='JSON object: input topic -> a pulsar.schema.Record class its JSON messages decode into')
    sub.add_argument("--output-serde-classname", metavar="MODULE.CLASS",
                     help="the pulsar.SerDe class serializing the function's results")
    sub.add_argument("--log-topic", help="where the function's log records also go (a Kafka or Pulsar topic, or "
                     "a directory)")
    sub.add_argument("--dead-letter-topic", help="where records that keep failing go (a Kafka or Pulsar topic, or "
                     "a directory)")
    sub.add_argument("--max-message-retries", type=int, help="retries of a failing record before it is skipped "
                     "or sent to the dead-letter topic")
    sub.add_argument("--timeout-ms", type=int, help="a record taking longer than this fails (a user exception)")
    sub.add_argument("--processing-guarantees", choices=PROCESSING_GUARANTEES, default=None,
                     help="delivery semantics (statekeep's state is exactly-once: EFFECTIVELY_ONCE)")
    sub.add_argument("--key-field", help="input field that partitions records (one key's records reach one task)")
    sub.add_argument("--input-format", help="json, text, csv, parquet, rate or statekeep-changelog (default: "
                     "from the first input's name; else Pulsar messages)")
    sub.add_argument("--output-format", help="jsonl or parquet, for a directory output (default: jsonl)")
    pulsar = sub.add_argument_group(
        "pulsar-admin's other flags", "Taken as pulsar-admin takes them. Most need a Pulsar broker or another runtime "
        "and are refused with the reason; boolean ones accept only the value statekeep always behaves as. The docs' "
        "guide 'Coming from Pulsar Functions' has the table.")
    for flag, (field, kind) in PULSAR_FLAGS.items():
        # what statekeep does with each is FunctionConfig's to say (REFUSED, FIXED), not imported here: the
        # model costs every command a tenth of a second
        what = f"sets FunctionConfig's {field}"
        if kind == "bool":  # pulsar-admin's boolean flags: alone (true) or with true/false
            pulsar.add_argument(flag, nargs="?", const=True, type=_bool, default=None, metavar="true|false",
                                help=what)
        else:
            pulsar.add_argument(flag, type={"int": int, "float": float}.get(kind, str), default=None,
                                metavar="JSON" if kind == "json" else kind.upper(), help=what)
    sub.add_argument("--trigger-interval", type=interval_ms, metavar="DURATION", help="time between the starts of "
                     "micro-batches, e.g. 500ms or 2s (triggerIntervalMs; default 0: as soon as possible)")
    sub.add_argument("--changelog-topic", metavar="kafka://HOST:PORT/TOPIC", help="a compacted Kafka topic that also "
                     "carries the function's state changes, as a Kafka Streams changelog (changelogTopic)")
    sub.add_argument("--changelog-format", choices=("json", "msgpack"), default=None,
                     help="how --changelog-topic carries typed state values (changelogFormat; default: json)")
    sub.add_argument("--state-dir", metavar="URL", help="keep the function's state partition-owned, durable under "
                     "URL: a shared directory or an fsspec URL (s3://bucket/prefix, hdfs://...)")
    add_time_flags(sub)


# ---- naming the function ----------------------------------------------------------------------


def identified(run: Handler, named: bool, args: argparse.Namespace) -> int:
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


def functions_client(args: argparse.Namespace) -> FunctionsClient:
    """Where the command in ``args`` goes, as a :class:`FunctionsClient`: a server (:class:`RemoteFunctions`)
    or a store directly (:class:`DirectFunctions`), by the precedence of :mod:`statekeep.cli.client`.

    Raises :class:`InvalidArgumentError` for a bad client config, :class:`MissingDependencyError` for a
    server without the client extra; a store is only opened when the client is first used."""
    http = open_remote(args)
    return RemoteFunctions(http) if http is not None else DirectFunctions(direct_store_url(args))


def direct(args: argparse.Namespace) -> FunctionService:
    """The :class:`FunctionService` on the store a direct-only command (localrun, snapshot, ...) works on."""
    from statekeep.functions.config.service import FunctionService

    return FunctionService.open(direct_store_url(args))


def print_answer(args: argparse.Namespace) -> int:
    """``get``, ``timers``, ``status`` and ``stats``: the client's JSON answer of the command's name (of
    ``--instance-id``'s instance where the command has it)."""
    instance = (args.instance_id,) if "instance_id" in args else ()
    with functions_client(args) as client:
        print_json(getattr(client, args.command)(args.tenant, args.namespace, args.name, *instance))
    return 0


def json_flag(args: argparse.Namespace, option: str) -> Any:
    text = getattr(args, option)
    try:
        value = json.loads(text)
    except ValueError as e:
        raise InvalidArgumentError(f"--{option.replace('_', '-')} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"--{option.replace('_', '-')} must be a JSON object")
    return value


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The FunctionConfig JSON: the config file's fields, then the flags given, then the function's name."""
    config: dict[str, Any] = dict(getattr(args, "file_config", None) or {})
    config.update({"tenant": args.tenant, "namespace": args.namespace, "name": args.name})
    if args.inputs is not None:
        config["inputs"] = [s.strip() for s in args.inputs.split(",") if s.strip()]
    for option, field in (("user_config", "userConfig"), ("secrets", "secrets"),
                          ("custom_serde_inputs", "customSerdeInputs"), ("custom_schema_inputs", "customSchemaInputs")):
        if getattr(args, option, None) is not None:
            config[field] = json_flag(args, option)
    for flag, (field, kind) in PULSAR_FLAGS.items():
        value = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        if value is None:
            continue
        if kind == "json":
            value = json_flag(args, flag.lstrip("-").replace("-", "_"))
        if "." in field:  # --cpu/--ram/--disk: fields of resources
            config.setdefault(field.partition(".")[0], {})[field.partition(".")[2]] = value
        else:
            config[field] = value
    for option, field in (("py", "py"), ("output", "output"), ("classname", "className"),
                          ("parallelism", "parallelism"), ("key_field", "keyField"),
                          ("input_format", "inputFormat"), ("output_format", "outputFormat"),
                          ("processing_guarantees", "processingGuarantees"), ("log_topic", "logTopic"),
                          ("output_serde_classname", "outputSerdeClassName"), ("dead_letter_topic", "deadLetterTopic"),
                          ("max_message_retries", "maxMessageRetries"), ("timeout_ms", "timeoutMs"),
                          ("trigger_interval", "triggerIntervalMs"), ("changelog_topic", "changelogTopic"),
                          ("changelog_format", "changelogFormat")):
        if getattr(args, option, None) is not None:
            config[field] = getattr(args, option)
    if getattr(args, "state_dir", None):
        from statekeep.state.partitioned import state_storage

        config["stateStorage"] = state_storage(args.state_dir)
    apply_time_flags(args, config)
    return config


def code_path(args: argparse.Namespace) -> str | None:
    """The function's file: ``--py``, else the config file's ``py`` (a path, as pulsar-admin reads it)."""
    if args.py is not None:
        return str(args.py)
    py = (getattr(args, "file_config", None) or {}).get("py")
    return str(py) if isinstance(py, str) and py else None


def read_py(args: argparse.Namespace) -> bytes | None:
    path = code_path(args)
    if path is None:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise InvalidArgumentError(f"cannot read --py {path}: {e.strerror}") from None
