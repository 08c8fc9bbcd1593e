"""loads_at, the per-record JSON decode: the value json.loads gives, or its error, for every input."""

from __future__ import annotations

import json
import random

import pytest

from statekeep.functions.messaging.jsonscan import dumps, loads_at

DOCUMENTS = [
    '{"word": "w1"}', ' {"a": [1, 2.5e-3, true, null]} ', '"\\u00e9"', '{"a": "\\ud83d\\ude00"}', '0.1e1', '-0.0',
    '18446744073709551616', '-9223372036854775809', '1.7976931348623157e309', 'NaN', '[Infinity, -Infinity]',
    '"\\ud800"', '{"a": 1, "a": 2}', '[[[[1]]]]', 'é', b'{"bytes": 1}',
]
MALFORMED = ['[1,]', '1 2', '{"a": ', '', '{"a": 1}}', 'nul']


@pytest.mark.parametrize("text", DOCUMENTS)
def test_a_document_decodes_as_json_loads_decodes_it(text):
    try:
        expected = json.loads(text)
    except json.JSONDecodeError:
        with pytest.raises(json.JSONDecodeError):
            loads_at(text)
        return
    found = loads_at(text)
    assert repr(found) == repr(expected)  # NaN, -0.0 and types alike
    if isinstance(text, str):
        assert repr(loads_at("x" + text, 1)) == repr(expected)  # a line's document after its first character


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_input_raises_json_loads_own_error(text):
    with pytest.raises(json.JSONDecodeError) as raised:
        json.loads(text)
    with pytest.raises(json.JSONDecodeError) as ours:
        loads_at(text)
    assert str(ours.value) == str(raised.value)
    with pytest.raises(json.JSONDecodeError) as after_one:
        loads_at("x" + text, 1)  # a message record's line
    assert str(after_one.value) == str(raised.value)


class _Label(str):
    pass


VALUES = [
    {"auction": 1004, "bidder": 1006, "url": "https://x/y?a=1&b=2", "extra": "", "ok": True, "none": None},
    {"f": 0.1, "g": -0.0, "h": 1e-05, "i": 1e16, "j": 123456789.123, "k": float("nan"), "l": float("-inf")},
    {"big": 2**70, "neg": -(2**64), "é": "ü", "emoji": "😀", "del": "a\x7fb", "ctl": "\x00\x1f\n\t\"\\/"},
    {"lone": "\ud800", 1: "int key", None: "none key"}, {"nested": {"a": [1, 2.5e-7, {"b": None}]}},
    {"set": {1}, "tuple": (1, "x"), "bytes": b"raw", "label": _Label("sub")}, [1, "two", 3.0], (4, 5),
    "plain", "ünïcode", "\x7f", 42, 2**100, 3.5, 1e300, float("nan"), True, None, _Label("x"), {}, {"e": 1e-4},
]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_dumps_writes_json_dumps_text(value):
    assert dumps(value) == json.dumps(value, separators=(",", ":"), default=str)


def test_dumps_random_flat_records_as_json_dumps():
    rng = random.Random(5)
    pool = ["", "a", "é", "\x7f", "\x1f", "z" * 40, 0, -1, 2**63, 2**65, True, False, None, 0.5, 1e-05, 7e22, 1.25e-3,
            float("inf")]
    for _ in range(5000):
        record = {f"k{i}": rng.choice(pool) for i in range(rng.randrange(8))}
        assert dumps(record) == json.dumps(record, separators=(",", ":"), default=str)


def test_dumps_raises_json_dumps_error():
    looped: dict = {}
    looped["self"] = looped
    with pytest.raises(ValueError, match="Circular reference"):
        dumps(looped)
