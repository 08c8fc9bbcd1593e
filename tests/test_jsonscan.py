"""loads_at, the per-record JSON decode: the value json.loads gives, or its error, for every input."""

from __future__ import annotations

import json

import pytest

from statekeep.functions.messaging.jsonscan import loads_at

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
