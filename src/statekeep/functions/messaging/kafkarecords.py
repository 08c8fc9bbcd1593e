"""Kafka records as statekeep keeps and delivers them (a pyarrow Table of :data:`COLUMNS`), a Kafka record as the
message record a function reads, and a function's state changes as records of its KIP-813 changelog topic in the byte
forms Kafka Streams' serdes read (see :mod:`statekeep.functions.messaging.kafka`)."""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterable, Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.spec import CHANGELOG_FORMATS

# -- records -----------------------------------------------------------------------------------------------------

#: a (batch, partition)'s Kafka records as kept and delivered: one row per record (timestamp 0: the broker's time)
COLUMNS = ("topic", "key", "value", "headers", "timestamp")


#: a broker record as a function's output wrap makes it (:func:`~statekeep.functions.messaging.messages.
#: output_wrapper`): (payload, key, properties, event time), resolved once, read here without a message record
Record = tuple[str | bytes, str | None, dict[str, str] | None, int | None]


def records_table(records: Iterable[tuple[str, Any]]) -> Any:
    """``(topic, record)`` pairs as a pyarrow Table of :data:`COLUMNS`, in one pass. A record is a :data:`Record`
    tuple, or a message record (:meth:`~statekeep.functions.messaging.messages.Message.to_json`'s shape: a
    ``publish``, a log record, a dead letter); any other value is written as its text (a str) or JSON."""
    topics: list[str] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[tuple[str, bytes]] | None] = []
    times: list[int] = []
    any_headers = False
    for topic, record in records:
        if record.__class__ is not tuple:
            record = _record(record)
        value, key, properties, event_time = record
        topics.append(topic)
        keys.append(None if key is None else (key if key.__class__ is str else str(key)).encode("utf-8"))
        values.append(value.encode("utf-8") if value.__class__ is str else value)
        if properties:
            any_headers = True
            headers.append([(str(k), str(v).encode("utf-8")) for k, v in properties.items()])
        else:
            headers.append(None)
        times.append(event_time if event_time.__class__ is int else 0)
    return _table(topics, keys, values, headers if any_headers else None, times)


def _table(topics: list[str], keys: list[bytes | None], values: list[bytes | None],
           headers: list[Any] | None, times: list[int]) -> Any:
    """The Table of :data:`COLUMNS` of these columns (``headers`` None: no record has any)."""
    import pyarrow as pa

    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    names = {topic: topic.encode("utf-8") for topic in set(topics)}  # a few topics: each encoded once
    return pa.table({"topic": binary_column([names[t] for t in topics], pa.string()),
                     "key": binary_column(keys, pa.binary()), "value": binary_column(values, pa.binary()),
                     "headers": pa.nulls(len(times), header) if headers is None else pa.array(headers, header),
                     "timestamp": longs(times)})


def binary_column(items: list[bytes | None], kind: Any) -> Any:
    """``items`` (None: null) as an Arrow array of ``kind`` (binary, or string for UTF-8 bytes), made of one joined
    buffer. Arrow's conversions of Python values (``pa.array``, ``pa.scalar``, a Python value given to a compute
    function) import pandas: 0.3 s in each new Python worker with its bytecode cached, seconds without."""
    import array
    import itertools

    import pyarrow as pa

    given, validity = items, None
    if None in items:  # a record without a key, a tombstone
        bits = bytearray((len(items) + 7) // 8)
        for i, item in enumerate(items):
            if item is not None:
                bits[i >> 3] |= 1 << (i & 7)
        validity = pa.py_buffer(bits)
        items = [b"" if item is None else item for item in items]
    offsets = array.array("i", [0])
    try:
        offsets.extend(itertools.accumulate(map(len, items)))  # type: ignore[arg-type]  # none is None now
    except OverflowError:  # past 2 GiB: pa.array's chunks
        return pa.array(given, kind)
    return pa.Array.from_buffers(kind, len(items), [validity, pa.py_buffer(offsets),
                                                    pa.py_buffer(b"".join(items))])  # type: ignore[arg-type]


def longs(values: list[int]) -> Any:
    """``values`` as an Arrow int64 array, without converting a Python value (see :func:`binary_column`)."""
    import array

    import pyarrow as pa

    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(array.array("q", values))])


def _record(message: Any) -> Record:
    """A message record (or any other value: its text, or JSON) as a :data:`Record`."""
    import json

    if message.__class__ is not dict or ("value" not in message and "valueBase64" not in message):
        if not isinstance(message, Mapping) or not ({"value", "valueBase64"} & message.keys()):
            message = {"value": message if isinstance(message, str) else json.dumps(message, default=str)}
    if "valueBase64" in message:  # as columns.payload reads a message record
        data: str | bytes = base64.b64decode(message["valueBase64"])
    else:
        value = message.get("value")
        data = value if value.__class__ is str else json.dumps(value)
    return data, message.get("key"), message.get("properties"), message.get("eventTime")


def raw_table(topic: str, keys: list[bytes], values: list[bytes | None]) -> Any:
    """Records of ``topic`` with these key and value bytes (a None value: a tombstone), as a pyarrow Table of
    :data:`COLUMNS` (no headers, timestamp 0: the broker's time)."""
    return _table([topic] * len(keys), list(keys), values, None, [0] * len(keys))


# -- a function's changelog on a Kafka topic (KIP-813) -------------------------------------------------------------

def changelog_records(written: Mapping[str, tuple[bytes | None, int | None]], typed_format: str = "json"
                      ) -> tuple[list[bytes], list[bytes | None]]:
    """The Kafka records (keys, values) of a (batch, partition)'s state changes (``written``:
    :meth:`~statekeep.state.buffer.BufferedState.written`), in the byte forms Kafka Streams' serdes read:

    - key: the state key's UTF-8 bytes (``Serdes.String()``); a typed variable's entry is keyed by its state key
      (:mod:`statekeep.state.typed`: ``"\\0v" + len(key) + ":" + key + variable + "\\0="`` for a value state,
      ``...\\0l<16 hex digits>`` a list element, ``...\\0m<code>`` a map entry);
    - value: a byte value as it is (``Serdes.ByteArray()``, or ``Serdes.String()`` for text); a counter as 8 bytes,
      signed big-endian (``Serdes.Long()``); a typed value as UTF-8 JSON (``typed_format`` ``json``: a class as an
      object of its fields, bytes as base64 text) or as its MessagePack (``msgpack``, without the TTL statekeep
      keeps with it); a delete as a null value (a tombstone).

    Internal entries (statekeep's timers, windows, watermarks, TTL index, a list's bounds) are never records."""
    from statekeep.state import typed

    if typed_format not in CHANGELOG_FORMATS:
        raise InvalidArgumentError(f"a changelog's typed values are {' or '.join(CHANGELOG_FORMATS)}, "
                                   f"not {typed_format!r}")
    pack = _LONG.pack
    if not any(key[:1] == "\x00" or counter is None for key, (_, counter) in written.items()):  # counters only
        return [key.encode("utf-8") for key in written], [pack(counter) for _, counter in written.values()]
    keys: list[bytes] = []
    values: list[bytes | None] = []
    for key, (value, counter) in written.items():
        if key[:1] == "\x00":  # statekeep's own namespace: only user variables' entries are shared
            found = typed.entry_variable(key)
            if found is None or found[2][:1] == "#":
                continue
            if value is not None:
                payload = typed.entry_payload(value, 0)  # the value, without the expiry it may carry
                assert payload is not None  # an expiry at 0 never is past
                value = _json(typed.json_value(payload)) if typed_format == "json" else bytes(payload)
        elif counter is not None:
            value = pack(counter)
        keys.append(key.encode("utf-8"))
        values.append(value if value is None or isinstance(value, bytes) else bytes(value))
    return keys, values


_LONG = struct.Struct(">q")


def _json(data: Any) -> bytes:
    import json

    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def message_of(key: bytes | None, value: bytes | None, headers: Iterable[tuple[str, bytes | None]] | None,
               timestamp: int | None) -> dict[str, Any]:
    """A Kafka record as the message record a function's input decodes (key as text, value as text when it is
    UTF-8, else base64; headers as properties; the timestamp as event time)."""
    record: dict[str, Any] = {}
    if key is not None:
        record["key"] = key.decode("utf-8", "replace")
    data = value or b""
    try:
        record["value"] = data.decode("utf-8")
    except UnicodeDecodeError:
        record["valueBase64"] = base64.b64encode(data).decode()
    if headers:
        record["properties"] = {k: (v or b"").decode("utf-8", "replace") for k, v in headers}
    if timestamp is not None and timestamp >= 0:
        record["eventTime"] = timestamp
    return record
