"""Typed state variables: value, list and map state of a record's key, with a schema, a codec and a TTL each
(after Spark's ``transformWithState`` and Flink's keyed state).

A function opens a variable through its Context (``context.value_state("count", int)``,
``context.list_state("bids", Bid, ttl=3600)``, ``context.map_state("seen", str, int)``); the variable is
scoped to the key of the record being processed. This module holds what does not depend on the runtime:

- **Types** (:func:`state_type`): ``int``, ``float``, ``str``, ``bytes``, ``bool``, a dataclass or a
  ``msgspec.Struct`` whose fields are of these types, ``X | None``, ``list[X]``, ``dict[str, X]`` or another
  such class. Values are encoded with msgspec's MessagePack codec (``benchmarks/typed_codec.py``: 13-25x
  JSON's speed for a dataclass, encoded and decoded), a class as a map of its field names, so a value written
  under an older schema decodes under a newer one.
- **Schemas** (:meth:`Variable.schema`, JSON) and their evolution (:func:`check_evolution`): adding a field
  with a default, removing a field and widening ``int`` to ``float`` are accepted; anything else raises
  :class:`StateSchemaError` naming the variable and the field.
- **Where entries live**: under statekeep's reserved key namespace, embedding the record's key, so a key's
  variables are in its key group (partition-owned state keeps them with the key) and no ``put_state`` can
  forge one. For a key ``k`` and a variable ``v``, with ``P = "\\0v" + len(k) + ":" + k + v + "\\0"``:
  ``P=`` a value; ``P#`` a list's bounds and ``Pl<16 hex digits>`` its elements in append order; ``Pm<code>``
  a map's entries (:func:`map_key_code`). A list or map is one entry per element, read by a prefix scan in
  key order, so one element is written without reading the others.
- **TTL** (:func:`encode_entry`): an entry written with a TTL carries its own expiry (ms since the epoch) before
  its value; a read at or after it finds the entry absent, entry by entry for lists and maps. The function's TTL
  index (:mod:`statekeep.state.timestate`) lists it too, so the batch after its expiry deletes it, read or not.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
import time
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from statekeep.errors import InvalidArgumentError
from statekeep.state.keys import encode_key

if TYPE_CHECKING:
    from statekeep.state.buffer import BufferedState

#: the first two characters of every typed variable's entries
PREFIX = "\x00v"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
_SCALARS: dict[Any, str] = {int: "int", float: "float", str: "str", bytes: "bytes", bool: "bool"}
MAP_KEY_TYPES = (str, int, bool, bytes)


class StateSchemaError(InvalidArgumentError):
    """A variable opened with a schema its recorded one cannot evolve into (or a type no codec takes);
    ``variable`` and ``field`` (None: the variable's type as a whole) name what does not fit."""

    def __init__(self, message: str, variable: str = "", field: str | None = None) -> None:
        super().__init__(message)
        self.variable, self.field = variable, field


# ---- types and schemas --------------------------------------------------------------------------------

def _is_class(tp: Any) -> bool:
    return isinstance(tp, type) and (dataclasses.is_dataclass(tp) or issubclass(tp, msgspec.Struct))


def _fields(tp: type) -> list[tuple[str, Any, bool]]:
    """(name, type, has a default) of a dataclass's or Struct's fields."""
    hints = typing.get_type_hints(tp)
    if dataclasses.is_dataclass(tp):
        return [(f.name, hints[f.name], f.default is not dataclasses.MISSING
                 or f.default_factory is not dataclasses.MISSING) for f in dataclasses.fields(tp)]
    info = msgspec.structs.fields(tp)
    return [(f.name, hints[f.name], f.required is False) for f in info]


def type_schema(tp: Any, where: str = "") -> Any:
    """The JSON form of a state type: ``"int"`` ... ``"bool"``, ``{"optional": T}``, ``{"list": T}``,
    ``{"map": [K, V]}`` or ``{"struct": name, "fields": [{"name", "type", "default"}]}``.
    :class:`StateSchemaError` for a type no codec takes (``where`` names the variable and field)."""
    if tp in _SCALARS:
        return _SCALARS[tp]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and len(args) == 2 and type(None) in args:
        return {"optional": type_schema(next(a for a in args if a is not type(None)), where)}
    if origin is list and len(args) == 1:
        return {"list": type_schema(args[0], where)}
    if origin is dict and len(args) == 2 and args[0] in (str, int):
        return {"map": [type_schema(args[0], where), type_schema(args[1], where)]}
    if _is_class(tp):
        return {"struct": tp.__qualname__,
                "fields": [{"name": name, "type": type_schema(ftype, f"{where}.{name}" if where else name),
                            "default": default} for name, ftype, default in _fields(tp)]}
    raise StateSchemaError(f"state type {tp!r}{f' (at {where})' if where else ''} is not one statekeep encodes: "
                           "int, float, str, bytes, bool, a dataclass or msgspec.Struct of them, X | None, list[X], "
                           "dict[str, X]", where.partition(".")[0], where.partition(".")[2] or None)


def _evolves(old: Any, new: Any, variable: str, field: str | None) -> None:
    """Whether a value written as ``old`` reads as ``new``; :class:`StateSchemaError` naming the field if not."""
    if old == new or (old, new) == ("int", "float"):
        return
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        if "struct" in old:
            previous = {f["name"]: f["type"] for f in old["fields"]}
            for f in new["fields"]:
                name = f["name"] if field is None else f"{field}.{f['name']}"
                if f["name"] in previous:
                    _evolves(previous[f["name"]], f["type"], variable, name)
                elif not f["default"]:
                    raise StateSchemaError(f"state variable {variable!r}: new field {name!r} has no default, so the "
                                           "values already stored cannot be read under the new schema",
                                           variable, name)
            return  # a removed field is skipped when an old value is read
        key = next(iter(old))
        if key == "map":
            _evolves(old["map"][0], new["map"][0], variable, field)
            _evolves(old["map"][1], new["map"][1], variable, field)
            return
        if key in ("optional", "list"):
            _evolves(old[key], new[key], variable, field)
            return
    if new == {"optional": old}:
        return  # a value now also may be None
    where = f"field {field!r}" if field else "its type"
    raise StateSchemaError(f"state variable {variable!r}: {where} was {_show(old)}, cannot become {_show(new)} "
                           "(accepted: adding a field with a default, removing a field, int to float)",
                           variable, field)


def _show(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if "struct" in schema:
        return str(schema["struct"])
    key = next(iter(schema))
    return f"{key}[{', '.join(map(_show, schema[key]))}]" if key == "map" else f"{key}[{_show(schema[key])}]"


def check_evolution(variable: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Nothing if the variable's stored entries (``old``, a :meth:`Variable.schema`) read under ``new``;
    :class:`StateSchemaError` naming the variable and field otherwise (a changed kind, a narrowed or changed
    type, a new field without a default, another map key type). A changed TTL is no schema change."""
    if old["kind"] != new["kind"]:
        raise StateSchemaError(f"state variable {variable!r} is {old['kind']} state, not {new['kind']} state",
                               variable)
    if old["kind"] == "map":
        _evolves(old["key"], new["key"], variable, "<map key>")
    _evolves(old["type"], new["type"], variable, None)


_encoder = msgspec.msgpack.Encoder()
_encode = _encoder.encode


class StateType:
    """One type's codec: :meth:`encode` to bytes, :meth:`decode` back (a value written under a schema its own
    evolved from decodes too). :meth:`check` refuses a value of another type before anything is written."""

    def __init__(self, tp: Any, where: str = "") -> None:
        self.type, self.schema = tp, type_schema(tp, where)
        self._decoder = msgspec.msgpack.Decoder(tp)
        self.decode = self._decoder.decode  # type: ignore[method-assign,assignment]  # the decoder's own: no call between
        self._where = where
        self._scalar = tp if tp in _SCALARS else None  # int, float, str, bytes, bool: a value of this class is one

    def encode(self, value: Any) -> bytes:
        if value.__class__ is not self._scalar:  # the common case needs no other check
            self.check(value)
        return _encode(value)

    def check(self, value: Any) -> None:
        """:class:`InvalidArgumentError` unless ``value`` is of this type."""
        tp = self.type
        if value.__class__ is self._scalar:
            return
        ok = (isinstance(value, tp) and not (tp is int and isinstance(value, bool))) if isinstance(tp, type) \
            else True  # a generic type: msgspec checks it by decoding what it encoded
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise InvalidArgumentError(f"state variable {self._where!r} holds {_show(self.schema)}, "
                                       f"not {type(value).__name__}")
        if not isinstance(tp, type) or _is_class(tp):
            try:
                self._decoder.decode(_encoder.encode(value))
            except (msgspec.ValidationError, TypeError) as e:
                raise InvalidArgumentError(f"state variable {self._where!r}: {e}") from None

    def decode(self, raw: bytes | memoryview) -> Any:
        return self._decoder.decode(raw)


@dataclasses.dataclass(frozen=True)
class Variable:
    """A state variable as opened: its ``name``, ``kind`` (value, list or map), value type, map key type (maps)
    and TTL in ms (None: none)."""

    name: str
    kind: str
    value: StateType
    key: StateType | None = None
    ttl_ms: int | None = None

    def schema(self) -> dict[str, Any]:
        schema = {"kind": self.kind, "type": self.value.schema}
        if self.key is not None:
            schema["key"] = self.key.schema
        return schema


def variable(name: object, kind: str, value_type: Any, key_type: Any = None, ttl: object = None) -> Variable:
    """A :class:`Variable`, checked: :class:`InvalidArgumentError` for a bad name (letters, digits, ``_.-``, at
    most 64, not starting with a digit), TTL (seconds > 0) or map key type (str, int, bool or bytes);
    :class:`StateSchemaError` for a type no codec takes."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgumentError(f"a state variable's name is letters, digits, '_', '.' or '-' (at most 64, not "
                                   f"starting with a digit or '.'), not {name!r}")
    ttl_ms = None
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
            raise InvalidArgumentError(f"state variable {name!r}: ttl is seconds > 0, not {ttl!r}")
        ttl_ms = max(1, int(ttl * 1000))
    key = None
    if kind == "map":
        if key_type not in MAP_KEY_TYPES:
            raise InvalidArgumentError(f"state variable {name!r}: a map's keys are str, int, bool or bytes, "
                                       f"not {key_type!r}")
        key = StateType(key_type, name)
    return Variable(name, kind, StateType(value_type, name), key, ttl_ms)


# ---- where entries live -------------------------------------------------------------------------------

def variables_prefix(key: str) -> str:
    """The prefix of every variable entry of the record key ``key``."""
    return f"{PREFIX}{len(key)}:{key}"


def variable_prefix(key: str, name: str) -> str:
    return f"{PREFIX}{len(key)}:{key}{name}\x00"


def owner(internal: str) -> str | None:
    """The record key a variable entry embeds (its key group is that key's); None if ``internal`` is not one."""
    if not internal.startswith(PREFIX):
        return None
    length, colon, rest = internal[2:].partition(":")
    if not colon or not length.isdigit() or len(rest) < int(length):
        return None
    return rest[:int(length)]


def map_key_code(key: Any) -> str:
    """A map key as the end of its entry's state key: reversible (:func:`decode_map_key`), and distinct for
    keys of different types."""
    if isinstance(key, bool):
        return "t" if key else "f"
    if isinstance(key, int):
        return f"i{key}"
    if isinstance(key, str):
        return "s" + key
    if isinstance(key, bytes):
        return "b" + key.hex()
    raise InvalidArgumentError(f"a map key is str, int, bool or bytes, not {type(key).__name__}")


def decode_map_key(code: str) -> Any:
    tag, body = code[:1], code[1:]
    if tag == "s":
        return body
    if tag == "i":
        return int(body)
    if tag == "b":
        return bytes.fromhex(body)
    return tag == "t"


_NO_MAP_KEY = object()


def checked_key(state_key: str, variable: str, map_key: object = _NO_MAP_KEY) -> str:
    """``state_key`` if the store takes it; :class:`InvalidArgumentError` naming the state ``variable`` (and the
    ``map_key``) otherwise: the record key and the variable are part of it, and a key has at most
    :data:`statekeep.state.keys.MAX_SEGMENT` characters encoded."""
    try:
        encode_key(state_key)
    except InvalidArgumentError as e:
        what = f"state variable {variable!r}" + ("" if map_key is _NO_MAP_KEY else f", map key {map_key!r}")
        raise InvalidArgumentError(f"{what}: its state key is too long (the record key, the variable's name and "
                                   f"the map key together): {e}") from None
    return state_key


# ---- entries: the value, or a mark, an expiry and the value -------------------------------------------

_EXPIRY = struct.Struct(">q")
#: 0xc1 is the one byte MessagePack never uses: an entry starting with it carries an expiry
EXPIRING = 0xC1


def encode_entry(payload: bytes, expires_ms: int | None) -> bytes:
    """An entry as stored: the value's MessagePack as it is, or ``0xc1``, its expiry (8 bytes, ms) and the value."""
    return payload if expires_ms is None else b"\xc1" + _EXPIRY.pack(expires_ms) + payload


def entry_payload(raw: bytes, now_ms: int) -> bytes | memoryview | None:
    """The value of a stored entry, or None if it expired at ``now_ms``."""
    if raw[0] != EXPIRING:
        return raw
    if _EXPIRY.unpack_from(raw, 1)[0] <= now_ms:
        return None
    return memoryview(raw)[9:]


def entry_expiry(raw: bytes | None) -> int | None:
    """The expiry (ms) a stored entry carries; None for an absent entry or one without a TTL."""
    if not raw or raw[0] != EXPIRING:
        return None
    expiry: int = _EXPIRY.unpack_from(raw, 1)[0]
    return expiry


def list_bounds(raw: bytes | None, now_ms: int | None = None) -> tuple[int, int]:
    """A list's (first, next) element numbers from its ``#`` entry ((0, 0): empty, never written). A bounds entry
    carries the expiry of the list's newest element (:func:`encode_entry`): expired at ``now_ms``, every element has,
    and the list is empty from its next number on."""
    if not raw:
        return 0, 0
    first, end = struct.unpack_from(">qq", raw, 9 if raw[0] == EXPIRING else 0)
    if now_ms is not None and raw[0] == EXPIRING and _EXPIRY.unpack_from(raw, 1)[0] <= now_ms:
        return end, end
    return first, end


def encode_bounds(first: int, end: int) -> bytes:
    return struct.pack(">qq", first, end)


def element_key(prefix: str, number: int) -> str:
    return f"{prefix}l{number:016x}"


# ---- lists: numbered elements under a prefix, whose bounds their owner keeps -------------------------------
# (ListState in a ``#`` entry of its own; a key's windows in the key's window entry: statekeep.functions.windowing)


def read_elements(state: BufferedState, prefix: str, first: int, end: int) -> list[tuple[str, Any]]:
    """Elements ``first`` to ``end`` - 1 of the list ``prefix`` as (state key, stored entry or None), in order,
    read in one bulk read."""
    keys = [element_key(prefix, n) for n in range(first, end)]
    state.prefetch(keys)
    return [(key, state.get(key)) for key in keys]


def delete_elements(state: BufferedState, prefix: str, first: int, end: int) -> None:
    """Delete elements ``first`` to ``end`` - 1 of the list ``prefix`` (with the batch)."""
    put = state.put
    for number in range(first, end):
        put(element_key(prefix, number), None)


# ---- reading them back, decoded to JSON -----------------------------------------------------------------

def json_value(payload: bytes | memoryview) -> Any:
    """An entry's value as JSON data, decoded without its type (a class as an object of its fields, bytes as
    base64 text)."""
    return msgspec.to_builtins(msgspec.msgpack.decode(payload))


def entry_variable(state_key: str) -> tuple[str, str, str] | None:
    """``(record key, variable, rest)`` of a user variable's entry (``rest``: ``=`` a value, ``#`` a list's
    bounds, ``l...`` an element, ``m...`` a map entry); None for any other key (statekeep's own, such as a
    time window's records, or not a variable's at all)."""
    key = owner(state_key)
    if key is None:
        return None
    name, _, rest = state_key[len(variables_prefix(key)):].partition("\x00")
    return (key, name, rest) if _NAME.fullmatch(name) and rest[:1] in ("=", "#", "l", "m") else None


def _map_key_text(code: str) -> str:
    map_key = decode_map_key(code)
    return map_key if isinstance(map_key, str) else json.dumps(msgspec.to_builtins(map_key))


def decoded_entry(state_key: str, raw: bytes | None, now_ms: int) -> dict[str, Any] | None:
    """One typed entry (or a changelog record of one: ``raw`` None for a delete) as JSON data: ``{"key",
    "variable"}``, with ``"element"`` (its number) for a list's element or ``"mapKey"`` (as text, as
    :func:`decoded_variables` gives map keys) for a map's entry, and ``"value"`` decoded unless deleted.
    None for a key no user variable's, a list's bounds, or an entry expired at ``now_ms``."""
    found = entry_variable(state_key)
    if found is None or found[2][:1] == "#":
        return None
    key, name, rest = found
    out: dict[str, Any] = {"key": key, "variable": name}
    if rest[:1] == "l":
        out["element"] = int(rest[1:], 16)
    elif rest[:1] == "m":
        out["mapKey"] = _map_key_text(rest[1:])
    if raw is not None:
        payload = entry_payload(raw, now_ms)
        if payload is None:
            return None
        out["value"] = json_value(payload)
    return out


def decoded_variables(entries: Iterable[tuple[str, bytes]], now_ms: int) -> Iterator[tuple[str, str, Any]]:
    """``(record key, variable, value)`` per variable from typed entries in key order (``(state key, value)``, as
    a scan of :data:`PREFIX` or :func:`variables_prefix` gives them), decoded to JSON: a value state's value, a
    list's elements in order, a map as an object (keys as text: a str as it is, others in their JSON form).
    Expired entries are left out, and a variable with none live is not given."""
    current: tuple[str, str] | None = None
    value: Any = None
    for state_key, raw in entries:
        entry = decoded_entry(state_key, raw, now_ms)
        if entry is None:
            continue
        if (entry["key"], entry["variable"]) != current:
            if current is not None and value is not None:
                yield (*current, value)
            current, value = (entry["key"], entry["variable"]), None
        if "element" in entry:
            value = [] if value is None else value
            value.append(entry["value"])
        elif "mapKey" in entry:
            value = {} if value is None else value
            value[entry["mapKey"]] = entry["value"]
        else:
            value = entry["value"]
    if current is not None and value is not None:
        yield (*current, value)


def read_variables(store: Any, *, key: str | None = None, prefix: str = "",
                   now_ms: int | None = None) -> Iterator[tuple[str, str, Any]]:
    """What every reader of a function's state shows of its typed variables: :func:`decoded_variables` of
    ``store`` (any readable state: a leader's, a follower's), for one record ``key`` (one prefix scan of its
    entries) or for every key starting with ``prefix`` (a scan of all typed entries; others' are skipped
    undecoded). ``now_ms`` (default: the wall clock) decides what has expired."""
    now = int(time.time() * 1000) if now_ms is None else now_ms  # timestate's clock: it imports this module
    if key is not None:
        return decoded_variables(store.scan(variables_prefix(key)), now)
    entries = store.scan(PREFIX)
    if prefix:
        entries = ((k, v) for k, v in entries if (o := owner(k)) is not None and o.startswith(prefix))
    return decoded_variables(entries, now)


def key_variables(store: Any, key: str, now_ms: int | None = None) -> dict[str, Any]:
    """``{variable: value}`` of the record key ``key`` in ``store`` (:func:`read_variables`); empty if none."""
    return {name: value for _, name, value in read_variables(store, key=key, now_ms=now_ms)}
