"""statekeep's own state API, independent of any backend: key encoding, the provider registry and the error
tree (these ran once per backend inside the shipped contract suites, which now test backends only)."""

from __future__ import annotations

import pytest

from statekeep.errors import (AlreadyExistsError, BadVersionError, CounterOverflowError, InvalidArgumentError,
                              InvalidPathError, NotEmptyError, NotFoundError, StatekeepError, StoreClosedError,
                              ValueTooLargeError)
from statekeep.state import StateStoreProvider, decode_key, encode_key, open_provider, provider_names, register_provider
from statekeep.state.metadata import MetadataStateStoreProvider
from statekeep.testing.contract.state import KEYS, utf8_order


@pytest.mark.parametrize("key", KEYS)
def test_key_encoding_round_trips_to_one_segment(key):
    segment = encode_key(key)
    assert "/" not in segment and segment not in (".", "..") and segment.isascii() and segment.isprintable()
    assert decode_key(segment) == key


@pytest.mark.parametrize("segment", ["!41", "!0a", "!4", "~C3", "~FF", "~c3~a9", "a/b", "a.b", "é", "x!", "~E9"])
def test_decoding_refuses_every_segment_the_encoder_cannot_give(segment):
    """A byte coded needlessly or in lower case, a cut code word, bytes that are not UTF-8 (a lone lead byte, a
    latin-1 byte), a raw ``/``, ``.``, ``!`` or non-ASCII character: each is refused (a foreign child of the
    state subtree), where a decoder that only reads code words would give some key."""
    with pytest.raises(InvalidArgumentError, match="not an encoded state key"):
        decode_key(segment)
    assert decode_key("~C3~A9") == "é" and decode_key(".2E") == "." and decode_key("a-b:c") == "a-b:c"


def _documented_code(key: str) -> str:
    """The module docstring's table, byte by byte: the reference the encoder's fast paths must agree with."""
    def one(b: int) -> str:
        if b <= 0x21:
            return f"!{b:02X}"
        if b in (0x2E, 0x2F):
            return f".{b:02X}"
        return f"~{b:02X}" if b >= 0x7E else chr(b)
    return "".join(one(b) for b in key.encode())


def test_key_encoding_is_the_documented_code_on_every_path():
    """Each ASCII character alone and all together (the ASCII path), non-ASCII and letters-and-digits keys."""
    for key in [*map(chr, range(128)), "".join(map(chr, range(128))), "\x00v7:map1000m\x00sé", "user.count",
                "a/b", "é", "plain123", "x" * 240]:
        assert encode_key(key) == _documented_code(key), repr(key)


def test_key_encoding_preserves_order_and_prefixes():
    keys = utf8_order(KEYS)
    assert [encode_key(k) for k in keys] == sorted(encode_key(k) for k in keys)
    for a in KEYS:
        for b in KEYS:
            assert encode_key(b).startswith(encode_key(a)) == b.startswith(a)


def test_provider_registry():
    assert "metadata" in provider_names()
    with pytest.raises(InvalidArgumentError, match="unknown state provider"):
        open_provider("nope", {})
    with pytest.raises(InvalidArgumentError):
        open_provider("metadata", {})
    with pytest.raises(InvalidArgumentError):
        open_provider("metadata", {"metadata_url": "memory://", "bogus": 1})

    class Custom(MetadataStateStoreProvider):
        name = "custom"

    register_provider("custom-test", Custom)
    p = open_provider("custom-test", {"metadata_url": "memory://"})
    assert isinstance(p, Custom) and isinstance(p, StateStoreProvider)
    p.close()
    with pytest.raises(InvalidArgumentError):
        register_provider("bad", dict)


def test_errors_share_one_root():
    for error in (NotFoundError, BadVersionError, AlreadyExistsError, InvalidPathError, ValueTooLargeError,
                  NotEmptyError, StoreClosedError, CounterOverflowError):
        assert issubclass(error, StatekeepError)
