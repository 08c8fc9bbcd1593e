"""The record a function's ``context`` is on: where a (batch, partition)'s records came from (:class:`RecordSource`:
rows, lines, or messages as :class:`~statekeep.functions.messaging.columns.MessageColumns`) and the per-record
methods of Pulsar's Context (:class:`RecordMethods`, mixed into
:class:`~statekeep.functions.executor.context.Context`), which read the record the context's cursor points at."""

from __future__ import annotations

import json
from typing import Any

from statekeep.functions.config.spec import RecordFormat
from statekeep.functions.messaging.columns import MessageColumns


class RecordSource:
    """Where the records of one (batch, partition) came from, for the per-record Context methods.
    ``records`` (raw lines, JSON documents or row dicts; messages: a :class:`MessageColumns`, or message records
    made into one), ``keys`` (the key field's value per record, or None; a message's own key where it has none)
    and ``topics`` (the input each record came from, or None when there is one input) are aligned by position;
    the context reads them only when a metadata method is called, so a function that calls none costs one
    attribute store per record. :attr:`records` is what the record loop decodes: a message's payload bytes."""

    __slots__ = ("batch_id", "records", "keys", "topics", "inputs", "event_time_field", "format", "messages")

    def __init__(self, batch_id: int | str, records: Any, keys: list[Any] | None = None,
                 topics: list[Any] | None = None, inputs: list[str] | None = None,
                 event_time_field: str | None = None, format: RecordFormat = RecordFormat()) -> None:
        self.batch_id = batch_id
        self.messages: MessageColumns | None = None
        if format.message:
            self.messages = records if isinstance(records, MessageColumns) else MessageColumns.of(records)
            records = self.messages.values
            own = self.messages.keys  # a message without a key field's value has its own key
            keys = own if keys is None else [k if k is not None else m for k, m in zip(keys, own)]
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

    def get_message_id(self) -> Any:
        """A Pulsar message's own id (a ``pulsar.MessageId``, as Pulsar's runtime gives it); a Kafka message's
        ``TOPIC:PARTITION:OFFSET`` (TOPIC its input's name); for any other record ``BATCH:INSTANCE:POSITION``."""
        source, position = self._source, self.position
        if source is None or position < 0:
            return None
        messages = source.messages
        if messages is not None and messages.ids is not None:
            ident = messages.message_id(position)
            if ident is not None:
                return ident
        if messages is not None and messages.offsets is not None and messages.offsets[0][position] is not None:
            return f"{self.get_current_message_topic_name()}:{messages.offsets[0][position]}:" \
                   f"{messages.offsets[1][position]}"  # where the message is in Kafka
        return f"{source.batch_id}:{self._instance_id}:{position}"

    def get_message_key(self) -> str | None:
        source, position = self._source, self.position
        if source is None or position < 0:
            return None
        keys = source.keys  # resolved once per batch (RecordSource): read per record, by every output too
        return keys[position] if keys is not None and position < len(keys) else None

    get_partition_key = get_ordering_key = get_message_key

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
