"""``pulsar.functions.serde``: SerDe classes, for functions that import them."""

from __future__ import annotations

import pickle
from abc import abstractmethod
from typing import Any


class SerDe:
    @abstractmethod
    def serialize(self, input: Any) -> bytes: ...

    @abstractmethod
    def deserialize(self, input_bytes: bytes) -> Any: ...


class IdentitySerDe(SerDe):
    """str and bytes unchanged, as Pulsar's default (text input is a str)."""

    def serialize(self, input: Any) -> bytes:
        return input.encode() if isinstance(input, str) else input

    def deserialize(self, input_bytes: bytes) -> Any:
        return input_bytes


class PickleSerDe(SerDe):
    def serialize(self, input: Any) -> bytes:
        return pickle.dumps(input)

    def deserialize(self, input_bytes: bytes) -> Any:
        return pickle.loads(input_bytes)  # noqa: S301 - as Pulsar's PickleSerDe
