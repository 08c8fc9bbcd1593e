"""The per-record fast paths of the function runtime give exactly what the plain code gives."""

from __future__ import annotations

import json

import pytest

from statekeep.errors import InvalidArgumentError, ValueTooLargeError
from statekeep.functions.executor.context import Context
from statekeep.state.buffer import BufferedState
from statekeep.state.transaction import KeyedTransaction
from statekeep.functions.config.loader import RECORD
from statekeep.functions.executor.path import RecordPath
from statekeep.functions.config.spec import ExecutorSpec


def record_decoder(input_format):
    """The decode step of the runtime's record path for ``input_format``."""
    spec = ExecutorSpec("t", "n", "f", input_format=input_format)
    return RecordPath(spec, 0, 0, KeyedTransaction(BufferedState(fetcher({}))), None, lambda value, context: value,
                      RECORD).decode

LINES = ['{"word": "a"}', ' {"word": "lead"}', '{"word": "trail"} ', '{"word": "crlf"}\r', '[1, 2.5, null]',
         '"s"', "3", "-0.0", "1e400", "NaN", "true", '{"k": {"n": [1, {"x": "\\u00e9\\ud83d\\ude00"}]}}',
         '{"a": 1, "a": 2}', "12345678901234567890123", b'{"bytes": 1}']
BAD = ["", " ", '{"word": "a"', '{"word": "a"} x', "1 2", "\ufeff1", '{"a": }', "[1,]", "nul", None, 1.5]


def test_json_fast_path_decodes_as_json_loads():
    decode = record_decoder("json")
    assert [decode(line) for line in LINES] == [json.loads(line) for line in LINES]
    assert [record_decoder("text")(v) for v in ("not json", 7)] == ["not json", 7]


@pytest.mark.parametrize("line", BAD)
def test_json_fast_path_raises_as_json_loads(line):
    with pytest.raises(Exception) as expected:
        json.loads(line)
    with pytest.raises(type(expected.value)) as got:
        record_decoder("json")(line)
    assert str(got.value) == str(expected.value)


def fetcher(base):
    return lambda keys: {k: base.get(k, (None, None)) for k in keys}


def test_counter_semantics():
    state = BufferedState(fetcher({"n": (b"\0" * 7 + b"\x05", 5), "b": (b"bytes", None)}))
    context = Context("t", "n", "f", state)
    assert context.incr_counter("n", 2) == 7 and context.get_counter("n") == 7
    assert context.incr_counter("new") == 1 and context.incr_counter("new", -3) == -2
    with pytest.raises(InvalidArgumentError, match="holds bytes"):  # as the store would, but per record
        context.incr_counter("b")
    with pytest.raises(InvalidArgumentError, match="holds bytes"):
        context.get_counter("b")
    context.del_counter("n")
    assert context.incr_counter("n", 4) == 4  # a delete then an increment restarts from zero
    assert state.puts == {"n": None} and state.counter_deltas == {"n": 4, "new": -2}

    class Key(str):
        pass

    assert context.incr_counter(Key("sub"), True + 1) == 2
    for key, amount in (("", 1), (None, 1), (3, 1), ("x" * 1000, 1), ("k", True), ("k", 1.0), ("k", "1")):
        with pytest.raises(InvalidArgumentError):
            context.incr_counter(key, amount)
    with pytest.raises(InvalidArgumentError):
        context.get_counter("")
    assert context.incr_counter("max", (1 << 63) - 1) == (1 << 63) - 1
    with pytest.raises(InvalidArgumentError):
        context.incr_counter("max", 1)
    assert context.get_counter("max") == (1 << 63) - 1  # the refused increment changed nothing


def test_put_state_takes_bytes_or_str_within_the_store_limit():
    state = BufferedState(fetcher({}), max_value_size=4)
    context = Context("t", "n", "f", state)
    context.put_state("s", "abcd")
    context.put_state("b", bytearray(b"xy"))
    for value, error, message in ((5, InvalidArgumentError, "bytes or str, not int"),
                                  (None, InvalidArgumentError, "bytes or str, not NoneType"),
                                  ("abcde", ValueTooLargeError, "5 bytes exceeds the limit of 4")):
        with pytest.raises(error, match=message):
            context.put_state("bad", value)
    assert state.puts == {"s": b"abcd", "b": b"xy"} and context.get_state("bad") is None
