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
