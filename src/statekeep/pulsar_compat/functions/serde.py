"""``pulsar.functions.serde``: SerDe classes, for functions that import them."""

from __future__ import annotations

import contextlib
import pickle
from abc import abstractmethod
from typing import Any


class SerDe:
    @abstractmethod
    def serialize(self, input: Any) -> bytes: ...

    @abstractmethod
    def deserialize(self, input_bytes: bytes) -> Any: ...


class IdentitySerDe(SerDe):
    """Pulsar's default serde, as pulsar-client's: UTF-8 text becomes an int, float, complex or str
    (the first that parses), other bytes stay bytes; those types serialize as their text."""

    _types = (int, float, complex, str)

    def serialize(self, input: Any) -> bytes:
        if type(input) in self._types:
            return str(input).encode("utf-8")
        if type(input) is bytes:
            return input
        raise TypeError(f"IdentitySerde cannot serialize object of type {type(input)}")

    def deserialize(self, input_bytes: bytes) -> Any:
        for kind in self._types:
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                return kind(input_bytes.decode("utf-8"))
        return input_bytes


class PickleSerDe(SerDe):
    def serialize(self, input: Any) -> bytes:
        return pickle.dumps(input)

    def deserialize(self, input_bytes: bytes) -> Any:
        return pickle.loads(input_bytes)  # noqa: S301 - as Pulsar's PickleSerDe
