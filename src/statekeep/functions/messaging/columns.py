"""A message in its two forms: a batch's messages as columns (:class:`MessageColumns`, as Spark's sources give them
to a task) and one message as a message record (the JSON a statekeep topic's file keeps per line: see
:mod:`statekeep.functions.messaging.messages`; :func:`payload`, :func:`record_of`)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

#: The first character of a message input's record that is a JSON file's line (the record separator
#: RFC 7464 puts before each JSON text), which follows as it is; never the first of a message record.
JSON_LINE = "\x1e"


#: a message's headers (Kafka's) or properties (Pulsar's) as one value of the ``__props`` column: (name, bytes) pairs
Properties = Sequence[Any]


class MessageColumns:
    """A (batch, partition)'s messages as columns, as Spark's sources give them (the message columns of
    :func:`statekeep.functions.driver.inputs.message_columns`): ``values`` the payloads (bytes), ``keys`` the
    message keys (str or None), ``properties`` each message's ``{"key", "value"}`` pairs or None (None for the
    whole column: no message has any), ``times`` the event times in ms (None: none has one), ``json`` whether a
    payload is a JSON file's line (decoded as JSON, not by the serde): one bool for the batch, or one per message;
    ``offsets`` their partitions and Kafka offsets (None: not from a broker), ``ids`` their Pulsar message ids,
    serialized (None: not from Pulsar).
    Every per-record method of the Context reads them by position; nothing is parsed until asked for."""

    __slots__ = ("values", "keys", "properties", "times", "json", "offsets", "ids")

    def __init__(self, values: list[bytes], keys: list[str | None] | None = None,
                 properties: list[Properties | None] | None = None, times: list[int | None] | None = None,
                 json: bool | list[bool] = False, offsets: tuple[list[Any], list[Any]] | None = None,
                 ids: list[bytes | None] | None = None) -> None:
        self.values, self.properties, self.times, self.json = values, properties, times, json
        self.keys = keys if keys is not None else [None] * len(values)
        #: (partitions, Kafka offsets) of the messages, where they came from a broker
        self.offsets = offsets
        #: the Pulsar message ids (``MessageId.serialize()``), where they came from Pulsar
        self.ids = ids

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

        props = table.column("__props")  # empty where a message has none (see inputs.no_properties)
        if len(props) == 0 or not pc.max(pc.list_value_length(props)).as_py():
            props = None

        flags = table.column("__json")
        every = pc.all(flags).as_py() if len(flags) else False
        json_lines: bool | list[bool] = every if every or not pc.any(flags).as_py() else flags.to_pylist()
        partitions = column("__kpart") if "__kpart" in table.column_names else None
        offsets = (partitions, table.column("__koffset").to_pylist()) if partitions is not None else None
        ids = column("__mid") if "__mid" in table.column_names else None
        return cls(table.column("__value").to_pylist(), column("__mkey"),
                   None if props is None else props.to_pylist(), column("__time"), json_lines, offsets, ids)

    @classmethod
    def of(cls, records: Sequence[Any]) -> MessageColumns:
        """Messages from message records (a topic file's JSON lines, or their dicts: see
        :mod:`statekeep.functions.messaging.messages`), for a caller without Spark's columns (a trigger, a test)."""
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

    def message_id(self, position: int) -> Any:
        """The Pulsar message id (a ``pulsar.MessageId``) of the message at ``position``, or None (not from
        Pulsar)."""
        found = self.ids[position] if self.ids is not None else None
        if found is None:
            return None
        import pulsar

        return pulsar.MessageId.deserialize(found)

    def where(self, position: int) -> str:
        """Where the message at ``position`` is in its topic (Kafka's partition and offset, Pulsar's partition and
        message id ``LEDGER:ENTRY:BATCH``), or its place in the batch."""
        if self.offsets is not None and self.offsets[0][position] is not None:
            ident = self.message_id(position)
            if ident is not None:
                return (f"partition {self.offsets[0][position]}, message id "
                        f"{ident.ledger_id()}:{ident.entry_id()}:{ident.batch_index()}")
            return f"partition {self.offsets[0][position]}, offset {self.offsets[1][position]}"
        return f"record {position}"

    def is_json(self, position: int) -> bool:
        flags = self.json
        return flags if flags.__class__ is bool else flags[position]  # type: ignore[index]

    def properties_at(self, position: int, errors: str = "strict") -> dict[str, str]:
        """The message's properties as text: a value that is not UTF-8 raises :class:`UnicodeDecodeError` (the
        record's error), unless ``errors`` says otherwise (as :meth:`bytes.decode`)."""
        found = self.properties[position] if self.properties is not None else None
        return {p["key"]: (p["value"] or b"").decode("utf-8", errors) for p in found} if found else {}

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
        properties = self.properties_at(position, "replace")  # a dead letter's: kept whatever its bytes
        if properties:
            record["properties"] = properties
        if self.time_at(position) is not None:
            record["eventTime"] = self.time_at(position)
        return record


def payload(record: Mapping[str, Any]) -> bytes:
    """A message record's payload bytes."""
    if "valueBase64" in record:
        return base64.b64decode(record["valueBase64"])
    value = record.get("value")
    return value.encode("utf-8") if isinstance(value, str) else json.dumps(value).encode("utf-8")


def record_of(raw: Any) -> dict[str, Any]:
    """The message record of a raw ``message`` input (``{}`` if it is none)."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str) and raw[:1] == JSON_LINE:
        return {"value": raw[1:], "format": "json"}
    try:
        record = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
