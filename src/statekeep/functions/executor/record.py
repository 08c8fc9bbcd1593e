"""Where a (batch, partition)'s records came from (:class:`RecordSource`: rows, lines, or messages as
:class:`~statekeep.functions.messaging.columns.MessageColumns`), aligned by position with their keys and inputs:
what the per-record methods of :class:`~statekeep.functions.executor.context.Context` read at its cursor."""

from __future__ import annotations

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
