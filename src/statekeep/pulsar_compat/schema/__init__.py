"""``pulsar.schema`` for :mod:`statekeep.pulsar_compat`: typed records and the JSON schema, as a function
file imports them (``from pulsar.schema import Record, String, Integer, JsonSchema``).

A :class:`Record` subclass declares its fields as class attributes (``name = String()``); an instance
takes them as keyword arguments (a missing one is the field's default), nested records from dicts.
:class:`JsonSchema` encodes a record as a JSON object and decodes one into the record class, as
pulsar-client's does. ``AvroSchema`` needs pulsar-client's Avro support and is not provided here.
"""

from __future__ import annotations

import json
from typing import Any

_RESERVED = ("_default", "_required")


class Field:
    """A record field: its Python type and default (None unless given). ``required_default`` is taken as
    pulsar-client takes it; only Avro schemas, not provided here, use it."""

    python_type: tuple[type, ...] = (object,)

    def __init__(self, default: Any = None, required: bool = False, required_default: bool = False) -> None:
        self._default = default
        self._required = required

    def default(self) -> Any:
        return self._default

    def validate_type(self, name: str, value: Any) -> Any:
        if value is None and not self._required:
            return value
        if not isinstance(value, self.python_type) or isinstance(value, bool) and bool not in self.python_type:
            raise TypeError(f"invalid type {type(value).__name__} for field {name!r}")
        return value


class Null(Field):
    python_type = (type(None),)


class Boolean(Field):
    python_type = (bool,)


class Integer(Field):
    python_type = (int,)


class Long(Field):
    python_type = (int,)


class Float(Field):
    python_type = (float, int)


class Double(Field):
    python_type = (float, int)


class Bytes(Field):
    python_type = (bytes, str)


class String(Field):
    python_type = (str,)


class Array(Field):
    python_type = (list,)

    def __init__(self, array_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        super().__init__(default, required, required_default)
        self.array_type = array_type


class Map(Field):
    python_type = (dict,)

    def __init__(self, value_type: Any, default: Any = None, required: bool = False,
                 required_default: bool = False) -> None:
        super().__init__(default, required, required_default)
        self.value_type = value_type


class _RecordMeta(type):
    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> _RecordMeta:
        fields: dict[str, Any] = {}
        for base in bases:
            fields.update(getattr(base, "_fields", {}))
        for key, value in namespace.items():
            if isinstance(value, _RecordMeta):
                value = value()
            if isinstance(value, Field) or isinstance(type(value), _RecordMeta):
                fields[key] = value
        namespace["_fields"] = fields
        return super().__new__(mcs, name, bases, namespace)


class Record(metaclass=_RecordMeta):
    """A typed record (see the module docstring). Equal to another of the same class with equal fields."""

    _fields: dict[str, Any]

    def __init__(self, default: Any = None, required_default: bool = False, required: bool = False,
                 **kwargs: Any) -> None:
        self._default = default
        self._required = required
        unknown = set(kwargs) - set(self._fields)
        if unknown:
            raise AttributeError(f"{type(self).__name__} has no field {sorted(unknown)[0]!r}")
        for name, field in self._fields.items():
            value = kwargs.get(name, field if isinstance(field, Record) else field.default())
            if isinstance(field, Record) and isinstance(value, dict):
                value = type(field)(**value)
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        field = self._fields.get(name)
        if isinstance(field, Field):
            value = field.validate_type(name, value)
        object.__setattr__(self, name, value)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and _fields_of(self) == _fields_of(other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({_fields_of(self)})"

    def default(self) -> Any:
        return self._default

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The record's schema, Avro-shaped as pulsar-client's (name, type, fields)."""
        return {"type": "record", "name": cls.__name__,
                "fields": [{"name": n, "type": type(f).__name__.lower()} for n, f in cls._fields.items()]}


def _fields_of(record: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _RESERVED}


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return {k: _plain(v) for k, v in _fields_of(value).items()}
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Schema:
    """A schema: ``encode(obj) -> bytes`` and ``decode(bytes) -> obj``."""

    def __init__(self, record_cls: Any = None, schema_type: str = "BYTES") -> None:
        self._record_cls = record_cls
        self.schema_type = schema_type

    def encode(self, obj: Any) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes) -> Any:
        raise NotImplementedError


class BytesSchema(Schema):
    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, bytes):
            raise TypeError(f"BytesSchema takes bytes, not {type(obj).__name__}")
        return obj

    def decode(self, data: bytes) -> Any:
        return data


class StringSchema(Schema):
    def __init__(self) -> None:
        super().__init__(str, "STRING")

    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, str):
            raise TypeError(f"StringSchema takes a str, not {type(obj).__name__}")
        return obj.encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return data.decode("utf-8")


class JsonSchema(Schema):
    """Records as JSON objects, as pulsar-client's ``JsonSchema(record_cls)``."""

    def __init__(self, record_cls: Any) -> None:
        super().__init__(record_cls, "JSON")

    def encode(self, obj: Any) -> bytes:
        if not isinstance(obj, self._record_cls):
            raise TypeError(f"JsonSchema({self._record_cls.__name__}) cannot encode a {type(obj).__name__}")
        return json.dumps(_plain(obj)).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return self._record_cls(**json.loads(data))


__all__ = ["Array", "Boolean", "Bytes", "BytesSchema", "Double", "Field", "Float", "Integer", "JsonSchema", "Long",
           "Map", "Null", "Record", "Schema", "String", "StringSchema"]
