"""Pulsar messages on statekeep: serde classes, the message record kept in files, and topic names.

**Serde**, as Pulsar's Python runtime does it: an input message's bytes go through the input's
``pulsar.SerDe`` (``customSerdeInputs`` / ``inputSpecs.serdeClassName``; default
``serde.IdentitySerDe``, which gives an ``int``, ``float``, ``complex`` or ``str`` for UTF-8 text and
the bytes otherwise) before ``process`` sees them; a result goes through ``outputSerdeClassName``
and a ``publish`` through its ``serde_class_name``. A serde class name is resolved as Pulsar's
``import_class`` does: ``serde.X`` is ``pulsar.functions.serde.X`` (pulsar-client's, or statekeep's
stand-in), ``MODULE.X`` where MODULE is the function file's own module name is the class in that
file, anything else is imported. One instance per class and process.

**Message records**: a topic (see :mod:`statekeep.functions.messaging.topics`) holds JSON lines, one message
each: ``{"value": TEXT}`` or ``{"valueBase64": B64}`` (bytes that are not UTF-8), and optionally
``"key"``, ``"properties"`` (str -> str) and ``"eventTime"`` (ms), ``"publishTime"`` (ms). A function's
task gets its messages as columns (:class:`~statekeep.functions.messaging.columns.MessageColumns`): a Kafka
topic's as Spark's source has them, a topic's lines parsed by the JVM, a file input's line as the payload (a line
of a ``.json``/``.jsonl`` file flagged: decoded as JSON, not by the serde).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError
from statekeep.functions.messaging.columns import MessageColumns
from statekeep.functions.messaging.jsonscan import dumps, loads_at
from statekeep.functions.config.locations import is_broker
from statekeep.functions.config.loader import FunctionLoadError, execute_file
from statekeep.functions.messaging.sink import OutputSink
from statekeep.lru import memo

if TYPE_CHECKING:
    from statekeep.functions.config.spec import ExecutorSpec

DEFAULT_SERDE = "serde.IdentitySerDe"
#: the names of Pulsar's default serde, each decoded by statekeep's IdentitySerDe (Pulsar's results, none raised)
IDENTITY_SERDES = (DEFAULT_SERDE, "pulsar.functions.serde.IdentitySerDe")
_lock = threading.Lock()
_serdes: dict[tuple[str, str, str], Any] = memo()


@dataclass
class Message:
    """One message as a topic keeps it: the payload (str, or bytes that are not UTF-8) and its metadata."""

    value: str | bytes
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_time: int | None = None

    def to_json(self, published: int | None = None) -> dict[str, Any]:
        """The record written to a topic file (see the module docstring); ``published``: its publish time (ms;
        default now)."""
        return message_record(self.value, self.key, self.properties, self.event_time,
                              int(time.time() * 1000) if published is None else published)


def message_record(value: str | bytes, key: str | None, properties: dict[str, str] | None, event_time: int | None,
                   published: int) -> dict[str, Any]:
    """A message as the record a topic keeps (:meth:`Message.to_json`, written out for the per-record path)."""
    # the key first: a reader routing by key finds it without parsing the value (driver.inputs.with_json_key)
    record: dict[str, Any] = {} if key is None else {"key": key}
    if value.__class__ is str:
        record["value"] = value
    else:
        record["valueBase64"] = base64.b64encode(value).decode()  # type: ignore[arg-type]
    if properties:
        record["properties"] = dict(properties)
    if event_time is not None:
        record["eventTime"] = event_time
    record["publishTime"] = published
    return record


def text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def load_serde(class_name: str, source: str | None = None, filename: str | None = None, *,
               schema: bool = False) -> Any:
    """An instance of the serde class ``class_name`` (see the module docstring), created once per
    process; with ``schema``, ``class_name`` is a ``pulsar.schema.Record`` class and the serde is its
    JSON schema. Raises :class:`FunctionLoadError` naming the class when it cannot be found or made."""
    key = (class_name + ("#schema" if schema else ""), source or "", filename or "")
    with _lock:
        if key not in _serdes:
            _serdes[key] = _make_serde(class_name, source, filename, schema)
        return _serdes[key]


def _make_serde(class_name: str, source: str | None, filename: str | None, schema: bool = False) -> Any:
    import importlib

    from statekeep.pulsar_compat import install

    install()
    module_name, _, name = class_name.rpartition(".")
    if class_name in IDENTITY_SERDES:  # pulsar-client's gives the same results, at 30x the cost of a JSON text
        from statekeep.pulsar_compat.functions.serde import IdentitySerDe

        return IdentitySerDe()
    if not module_name or not name:
        raise FunctionLoadError(f"serde class {class_name!r} must be module.Class (e.g. serde.PickleSerDe)")
    own = os.path.splitext(os.path.basename(filename or ""))[0]
    try:
        if module_name in ("serde", "pulsar.functions.serde", "pulsar"):
            namespace = vars(importlib.import_module("pulsar.functions.serde" if module_name == "serde"
                                                     else module_name))
        elif source is not None and module_name == own:
            namespace = execute_file(source, filename or "<function>")
        else:
            namespace = vars(importlib.import_module(module_name))
    except ImportError as e:
        raise FunctionLoadError(f"serde class {class_name!r}: cannot import module {module_name!r}: {e}") from e
    cls = namespace.get(name)
    if schema:
        if not isinstance(cls, type) or not callable(getattr(cls, "schema", None)):
            raise FunctionLoadError(f"schema class {class_name!r}: {filename if module_name == own else module_name} "
                                    f"defines no pulsar.schema.Record class {name!r}")
        return JsonRecordSerDe(cls)
    if not isinstance(cls, type) or not callable(getattr(cls, "deserialize", None)) or not callable(
            getattr(cls, "serialize", None)):
        where = f"{filename} (module {own})" if module_name == own else f"module {module_name!r}"
        raise FunctionLoadError(f"serde class {class_name!r}: {where} defines no class {name!r} with "
                                "serialize and deserialize")
    try:
        return cls()
    except Exception as e:  # noqa: BLE001 - user code
        raise FunctionLoadError(f"serde class {class_name!r}: creating it failed: {type(e).__name__}: {e}") from e


def serialize(value: Any, serde: Any | None) -> str | bytes:
    """A result or published value as a message payload: through ``serde`` when one is named;
    without one, a str or bytes as it is, a number as its text (Pulsar's IdentitySerDe), and any
    other value as JSON (where Pulsar's IdentitySerDe would refuse it)."""
    if serde is not None:
        data = serde.serialize(value)
        if isinstance(data, str):
            return data
        if not isinstance(data, (bytes, bytearray)):
            raise InvalidArgumentError(f"{type(serde).__name__}.serialize returned {type(data).__name__}, not bytes")
        return text_or_bytes(bytes(data))
    if isinstance(value, (bytes, bytearray)):
        return text_or_bytes(bytes(value))
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float, complex)) and not isinstance(value, bool):
        return str(value)
    return dumps(value)


def input_serdes(spec: ExecutorSpec) -> tuple[Any, dict[str, Any]]:
    """(the default input serde, {input: its custom serde}) of an executor spec; an input with a
    ``customSchemaInputs`` record class gets a serde decoding its JSON into that record."""
    default = load_serde(DEFAULT_SERDE)
    custom = {topic: load_serde(name, spec.code, spec.py_name) for topic, name in spec.input_serdes.items()}
    for topic, name in spec.input_schemas.items():
        custom[topic] = load_serde(name, spec.code, spec.py_name, schema=True)
    return default, custom


class JsonRecordSerDe:
    """A ``pulsar.schema.Record`` class's JSON schema as a serde (``customSchemaInputs``)."""

    def __init__(self, record_cls: type) -> None:
        from pulsar.schema import JsonSchema  # pulsar-client's, or statekeep's stand-in

        self.schema = JsonSchema(record_cls)

    def deserialize(self, data: bytes) -> Any:
        return self.schema.decode(data)

    def serialize(self, value: Any) -> bytes:
        encoded: bytes = self.schema.encode(value)
        return encoded


def message_decoder(spec: ExecutorSpec, current_input: Callable[[], str | None], messages: MessageColumns,
                    position: Callable[[], int]) -> Callable[[bytes], Any]:
    """For the ``message`` input format: a function turning one message's payload (bytes, of ``messages``) into
    what ``process`` receives: through its input's serde (``current_input()`` names the input of the record being
    decoded, which picks a custom serde), or as JSON where it is a JSON file's line (``position()``: the record's).
    Chosen once per batch: without custom serdes, a batch of serde-decoded payloads is decoded by the default
    serde's method itself, a batch of JSON lines by the JSON decoder."""
    default, custom = input_serdes(spec)
    if not custom and messages.json is False:
        return default.deserialize  # type: ignore[no-any-return]
    if not custom and messages.json is True:
        return loads_at
    is_json = messages.is_json

    def decode(data: bytes) -> Any:
        serde = custom.get(current_input() or "") if custom else None
        if is_json(position()):
            value = loads_at(data)
            if serde is None:
                return value
            return serde.deserialize(value.encode("utf-8") if isinstance(value, str)
                                     else json.dumps(value).encode("utf-8"))
        return (serde or default).deserialize(data)

    return decode


def batch_lines(messages: MessageColumns) -> list[str]:
    """Messages as the JSON lines ``process_batch``'s table is built from (a JSON file's line as it is, any other
    payload as a JSON string: its text, or its base64 where it is not UTF-8)."""
    lines = []
    for position, value in enumerate(messages.values):
        text = text_or_bytes(value)
        if messages.is_json(position) and isinstance(text, str):
            lines.append(text)
        else:
            lines.append(json.dumps(text if isinstance(text, str) else base64.b64encode(text).decode()))
    return lines


def dead_letter_message(messages: MessageColumns, position: int) -> Any:
    """The message at ``position`` as the dead-letter output keeps it: a JSON file's line as its JSON value (as
    for JSON input), any other message as it came (payload, key, properties, event time), as Pulsar sends the
    original message to the dead-letter topic."""
    record = messages.record(position)
    if record.get("format") == "json":
        try:
            return json.loads(record["value"])
        except (KeyError, ValueError):
            return record.get("value", record.get("valueBase64"))
    return record


@dataclass
class Published:
    """One ``context.publish``: the message, the serde to send it with and Pulsar's ``message_conf``
    metadata (``properties``, ``partition_key``, ``event_timestamp``)."""

    message: Any
    serde_class_name: str = DEFAULT_SERDE
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_time: int | None = None


def published_by_target(published: list[tuple[str, Any]], spec: ExecutorSpec) -> dict[str, list[Any]]:
    """``context.publish`` messages grouped by the target named (a topic, or a path), each as the record
    written there: a message record for a topic, or for a path when the message has a key, properties or an
    event time; else the value as it is (through a serde, if named)."""
    from statekeep.functions.messaging.topics import is_topic

    targets: dict[str, list[Any]] = {}
    for topic, item in published:
        record: Any = item
        if isinstance(item, Published):
            custom = item.serde_class_name not in IDENTITY_SERDES
            serde = load_serde(item.serde_class_name, spec.code, spec.py_name) if custom else None
            message_target = is_topic(topic) or is_broker(topic)
            if message_target or item.key is not None or item.properties or item.event_time is not None:
                record = Message(serialize(item.message, serde), item.key, item.properties, item.event_time).to_json()
            elif serde is not None:
                record = _plain(serialize(item.message, serde))
            else:
                record = _plain(item.message)
        targets.setdefault(topic, []).append(record)
    return targets


def _plain(value: Any) -> Any:
    """A value written to a path as it is; bytes that are not UTF-8 as a message record."""
    if isinstance(value, (bytes, bytearray)):
        value = text_or_bytes(bytes(value))
        if isinstance(value, bytes):
            return Message(value).to_json()
    return value


def output_wrapper(spec: ExecutorSpec, context: Any) -> Callable[[Any], Any]:
    """What a result becomes in the function's output: for the DataFrame operator, a row of its output schema
    (:mod:`statekeep.functions.messaging.rows`); for a broker's topic, a
    :data:`~statekeep.functions.messaging.kafkarecords.Record` (the serialized result with the input message's key,
    properties and event time, as Pulsar's runtime sets them); for a statekeep topic, a message record of the same;
    else the value, through ``outputSerdeClassName`` if set. The input's properties are read per result: one that
    is not UTF-8 raises (the record's error)."""
    from statekeep.functions.messaging.topics import is_topic

    if spec.rows_schema is not None:  # the DataFrame operator's: a row of its output schema
        from statekeep.functions.messaging.rows import row_maker

        return row_maker(spec.rows_schema, context.get_message_key)
    name = spec.output_serde
    serde = load_serde(name, spec.code, spec.py_name) if name else None
    key, properties, event_time = (context.get_message_key, context.get_message_properties,
                                   context.get_message_eventtime)
    if is_broker(spec.output):  # the record table's own tuple (kafkarecords.Record): no message record to re-read
        source = context._source
        messages = source.messages if source is not None else None
        if messages is not None and messages.properties is None and not source.event_time_field:
            # messages without headers (Kafka's, mostly): key and time read by position, as the methods would
            keys, times = source.keys, messages.times

            def plain(result: Any) -> Any:
                position = context.position
                value = result if result.__class__ is str and serde is None else serialize(result, serde)
                if position < 0:  # a timer's or a window's: no current message
                    return value, None, None, None
                return value, keys[position], None, None if times is None else times[position]
            return plain

        def record(result: Any) -> Any:
            return (result if result.__class__ is str and serde is None else serialize(result, serde), key(),
                    properties() or None, event_time())
        return record
    if is_topic(spec.output):
        published = int(time.time() * 1000)  # the run's: its messages are published with its commit

        def message(result: Any) -> Any:
            value = result if result.__class__ is str and serde is None else serialize(result, serde)
            return message_record(value, key(), properties(), event_time(), published)
        return message
    if serde is not None:
        return lambda result: _plain(serialize(result, serde))
    return lambda result: result


class LogTopicHandler(logging.Handler):
    """Keeps a function's log records as messages for its log topic (Pulsar's log appender): the
    message text as the value, ``level``, ``function`` (fqfn), ``functionId``, ``instance`` and
    ``logger`` as properties, the record's time as the event time."""

    def __init__(self, fqfn: str, function_id: str, instance: int) -> None:
        super().__init__(logging.DEBUG)
        self.properties = {"function": fqfn, "functionId": function_id, "instance": str(instance)}
        self.records: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not fail the function
            text = str(record.msg)
        properties = {**self.properties, "level": record.levelname, "logger": record.name}
        self.records.append(Message(text, None, properties, int(record.created * 1000)).to_json())


def function_logger(spec: ExecutorSpec, instance: int) -> logging.Logger | None:
    """With a ``log_topic``: the function's logger (INFO and up) that also keeps its records for the
    log topic (records still propagate to ``statekeep.function.T.N.F``); None without one."""
    if not spec.log_topic:
        return None
    name = f"statekeep.function.{spec.tenant}.{spec.namespace}.{spec.name}"
    logger = logging.Logger(name, logging.INFO)
    logger.parent = logging.getLogger(name)
    logger.addHandler(LogTopicHandler(spec.fqfn, spec.function_id, instance))
    return logger


def log_records(logger: logging.Logger) -> list[dict[str, Any]]:
    """The log-topic records kept by a :func:`function_logger` (``[]`` for another logger)."""
    return [r for h in logger.handlers if isinstance(h, LogTopicHandler) for r in h.records]


def output_sink(spec: ExecutorSpec, name: str | None, kind: str = "out") -> OutputSink:
    """The one place a function's output name (``kind`` ``out``; ``dead`` for its dead letters, ``log`` for its
    log topic, ``pub`` for what it publishes) becomes where its records go: a topic name is the topic's
    directory under the spec's topics root, written as JSON lines (a topic holds message records); another
    name the path or URL as named, in ``output_format`` for the main output; no name or ``console`` nowhere."""
    from statekeep.functions.messaging.topics import is_topic, location

    if not name or name == "console":
        return OutputSink(None)
    if is_broker(name):  # no file: the commit hands its records to the broker (statekeep.functions.messaging.delivery)
        return OutputSink(None, topic=True)
    topic = is_topic(name)
    fmt = spec.output_format if kind == "out" and not topic else "jsonl"
    suffix = f"-{kind}-{spec.tenant}.{spec.namespace}.{spec.name}"
    return OutputSink(str(location(name, spec.topics_dir)), fmt, suffix, topic)


def published_targets(spec: ExecutorSpec, published: list[tuple[str, Any]],
                      logger: logging.Logger | None) -> dict[tuple[str, str], list[Any]]:
    """``context.publish`` messages (``pub``) and the log topic's records (``log``) by (target name, kind), as
    their files hold them. Raises what a publish's serde raises."""
    targets = {(name, "pub"): records for name, records in published_by_target(published, spec).items()}
    logs = log_records(logger) if logger is not None and spec.log_topic else []
    if logs and spec.log_topic:
        targets[(spec.log_topic, "log")] = logs
    return targets


def write_targets(spec: ExecutorSpec, targets: dict[tuple[str, str], list[Any]],
                  batch_id: int | None = None, partition: int = 0, origin: str = "trigger") -> None:
    """Write :func:`published_targets`: one file per (target, kind) of (batch, partition), or with no batch a new
    file each (named after ``origin``)."""
    for (name, kind), records in targets.items():
        sink = output_sink(spec, name, kind)
        if batch_id is None:
            sink.write_new(records, origin)
        else:
            sink.write(batch_id, partition, records)
