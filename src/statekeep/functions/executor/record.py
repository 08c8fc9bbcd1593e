"""The record a function's ``context`` is on: where a (batch, partition)'s records came from (:class:`RecordSource`),
a batch of messages as columns (:class:`MessageColumns`), and the per-record methods of Pulsar's Context
(:class:`RecordMethods`, mixed into :class:`~statekeep.functions.executor.context.Context`), which read the record
the context's cursor points at."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from statekeep.functions.config.spec import RecordFormat

#: a message's headers (Kafka's) or properties (Pulsar's) as one value of the ``__props`` column: (name, bytes) pairs
Properties = Sequence[Any]


class MessageColumns:
    """A (batch, partition)'s messages as columns, as Spark's sources give them (the message columns of
    :func:`statekeep.functions.driver.inputs.message_columns`): ``values`` the payloads (bytes), ``keys`` the
    message keys (str or None), ``properties`` each message's ``{"key", "value"}`` pairs or None (None for the
    whole column: no message has any), ``times`` the event times in ms (None: none has one), ``json`` whether a
    payload is a JSON file's line (decoded as JSON, not by the serde): one bool for the batch, or one per message.
    Every per-record method of the Context reads them by position; nothing is parsed until asked for."""

    __slots__ = ("values", "keys", "properties", "times", "json")

    def __init__(self, values: list[bytes], keys: list[str | None] | None = None,
                 properties: list[Properties | None] | None = None, times: list[int | None] | None = None,
                 json: bool | list[bool] = False) -> None:
        self.values, self.properties, self.times, self.json = values, properties, times, json
        self.keys = keys if keys is not None else [None] * len(values)

    def __len__(self) -> int:
        return len(self.values)

    @classmethod
    def from_arrow(cls, table: Any) -> MessageColumns:
        """The messages of a table of the message columns (``__value``, ``__mkey``, ``__props``, ``__time``,
        ``__json``)."""
        import pyarrow.compute as pc

        def column(name: str) -> Any:
            data = table.column(name)
            return None if data.null_count == len(data) else data.to_pylist()

        flags = table.column("__json")
        every = pc.all(flags).as_py() if len(flags) else False
        json_lines: bool | list[bool] = every if every or not pc.any(flags).as_py() else flags.to_pylist()
        return cls(table.column("__value").to_pylist(), column("__mkey"), column("__props"), column("__time"),
                   json_lines)

    @classmethod
    def of(cls, records: Sequence[Any]) -> MessageColumns:
        """Messages from message records (a topic file's JSON lines, or their dicts: see
        :mod:`statekeep.functions.messaging.messages`), for a caller without Spark's columns (a trigger, a test)."""
        from statekeep.functions.messaging.messages import payload, record_of

        values: list[bytes] = []
        keys: list[str | None] = []
        properties: list[Properties | None] = []
        times: list[int | None] = []
        flags: list[bool] = []
        for raw in records:
            record = record_of(raw)
            flags.append(record.get("format") == "json")
            values.append(payload(record))
            key = record.get("key")
            keys.append(key if isinstance(key, str) else None)
            found = record.get("properties")
            properties.append([{"key": str(k), "value": str(v).encode()} for k, v in found.items()]
                              if isinstance(found, dict) else None)
            event = record.get("eventTime")
            times.append(event if isinstance(event, int) and not isinstance(event, bool) else None)
        return cls(values, keys, properties if any(p is not None for p in properties) else None,
                   times if any(t is not None for t in times) else None, flags if any(flags) else False)

    def is_json(self, position: int) -> bool:
        flags = self.json
        return flags if flags.__class__ is bool else flags[position]  # type: ignore[index]

    def properties_at(self, position: int) -> dict[str, str]:
        found = self.properties[position] if self.properties is not None else None
        return {p["key"]: (p["value"] or b"").decode("utf-8", "replace") for p in found} if found else {}

    def time_at(self, position: int) -> int | None:
        return self.times[position] if self.times is not None else None

    def record(self, position: int) -> dict[str, Any]:
        """The message at ``position`` as a message record (the shape a topic's file keeps; a JSON file's line as
        ``{"value": LINE, "format": "json"}``)."""
        value = self.values[position]
        record: dict[str, Any] = {} if self.keys[position] is None else {"key": self.keys[position]}
        try:
            record["value"] = value.decode("utf-8")
        except UnicodeDecodeError:
            record["valueBase64"] = base64.b64encode(value).decode()
        if self.is_json(position):
            record["format"] = "json"
        properties = self.properties_at(position)
        if properties:
            record["properties"] = properties
        if self.time_at(position) is not None:
            record["eventTime"] = self.time_at(position)
        return record


class RecordSource:
    """Where the records of one (batch, partition) came from, for the per-record Context methods.
    ``records`` (raw lines, JSON documents or row dicts; messages: a :class:`MessageColumns`, or message records
    made into one), ``keys`` (the key field's value per record, or None) and ``topics`` (the input each record came
    from, or None when there is one input) are aligned by position; the context reads them only when a metadata
    method is called, so a function that calls none costs one attribute store per record. :attr:`records` is
    what the record loop decodes: a message's payload bytes."""

    __slots__ = ("batch_id", "records", "keys", "topics", "inputs", "event_time_field", "format", "messages")

    def __init__(self, batch_id: int | str, records: Any, keys: list[Any] | None = None,
                 topics: list[Any] | None = None, inputs: list[str] | None = None,
                 event_time_field: str | None = None, format: RecordFormat = RecordFormat()) -> None:
        self.batch_id = batch_id
        self.messages: MessageColumns | None = None
        if format.message:
            self.messages = records if isinstance(records, MessageColumns) else MessageColumns.of(records)
            records = self.messages.values
        self.records = records
        self.keys = keys
        self.topics = topics
        self.inputs = list(inputs or [])
        self.event_time_field = event_time_field
        self.format = format


class RecordMethods:
    """Mixed into :class:`statekeep.functions.executor.context.Context`: its message id, key, event time,
    properties and topic name of the current record (``position`` in ``_source``)."""

    _source: RecordSource | None
    _inputs: list[str]
    _instance_id: int
    position: int

    # the record being processed
    def _at(self, column: str) -> Any:
        source, position = self._source, self.position
        values = getattr(source, column) if source is not None else None
        if values is None or not 0 <= position < len(values):
            return None
        return values[position]

    def get_message_id(self) -> str | None:
        if self._source is None or self.position < 0:
            return None
        return f"{self._source.batch_id}:{self._instance_id}:{self.position}"

    def _key(self) -> str | None:
        key: str | None = self._at("keys")  # the key column: a str per record (null without a key field)
        if key is None and self._source is not None and self._source.messages is not None:
            key = self._source.messages.keys[self.position] if self.position >= 0 else None  # the message's own
        return key

    def get_message_key(self) -> str | None:
        return self._key()

    def get_partition_key(self) -> str | None:
        return self._key()

    def get_ordering_key(self) -> str | None:
        return self._key()

    def _document(self) -> dict[str, Any] | None:
        raw = self._at("records")
        if isinstance(raw, dict):
            return raw
        source = self._source
        if source is None or source.format.text_lines or raw is None:
            return None
        if source.messages is not None and not source.messages.is_json(self.position):
            return None  # a message's payload is a document only where it is a JSON file's line
        try:
            document = json.loads(raw)
        except (TypeError, ValueError):
            return None
        return document if isinstance(document, dict) else None

    def get_message_eventtime(self) -> int | None:
        source, position = self._source, self.position
        if source is None or position < 0:
            return None
        if source.messages is not None:
            event_time = source.messages.time_at(position)
            if event_time is not None:
                return event_time
        if not source.event_time_field:
            return None
        value = (self._document() or {}).get(source.event_time_field)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def get_message_properties(self) -> dict[str, str]:
        source, position = self._source, self.position
        if source is None or position < 0:
            return {}
        if source.messages is not None:
            return source.messages.properties_at(position)
        if not source.format.changelog:
            return {}
        document = self._document() or {}
        return {k: str(document[k]) for k in ("offset", "kind", "version") if document.get(k) is not None}

    def get_current_message_topic_name(self) -> str | None:
        if self._source is None or self.position < 0:
            return None
        if self._source.topics is None:
            return self._inputs[0] if self._inputs else None
        return input_of(self._at("topics"), self._inputs)


def input_of(file: str | None, inputs: list[str]) -> str | None:
    """The entry of ``inputs`` a file read by Spark (``file:///a/b/x.json``) belongs to: the longest
    input whose path it is, or lies under; the file itself if none matches."""
    if file is None:
        return None
    path = file.removeprefix("file://")
    best = None
    for entry in inputs:
        plain = entry.removeprefix("file://").rstrip("/")
        if (path == plain or path.startswith(plain + "/")) and (best is None or len(plain) > len(best[1])):
            best = (entry, plain)
    return best[0] if best else file
