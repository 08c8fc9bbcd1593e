"""``pulsar.functions.serde``: SerDe classes, for functions that import them."""

from __future__ import annotations

import pickle
import string
from abc import abstractmethod
from typing import Any


class SerDe:
    @abstractmethod
    def serialize(self, input: Any) -> bytes: ...

    @abstractmethod
    def deserialize(self, input_bytes: bytes) -> Any: ...


#: the ASCII characters a text that ``int``, ``float`` or ``complex`` accepts may begin with: digits, a sign, a
#: point, ``(`` (complex), the first letter of ``inf``/``infinity``/``nan`` and of ``j``, and Python's whitespace
#: (which those constructors strip, ``\x1c``-``\x1f`` included). A text beginning with any other ASCII character
#: is a str for all three, so it is given as one without trying them.
_MAY_BE_NUMBER = frozenset(string.digits + "+-.(iInNjJ" + "".join(c for c in map(chr, range(128)) if c.isspace()))


class IdentitySerDe(SerDe):
    """Pulsar's default serde, with pulsar-client's results: UTF-8 text becomes an int, float, complex or str
    (the first that parses), other bytes stay bytes; those types serialize as their text. A text that cannot be
    a number (a JSON object, a word) is known from its first character, without the three failed parses
    pulsar-client's loop pays for it."""

    _types = (int, float, complex, str)

    def serialize(self, input: Any) -> bytes:
        if type(input) in self._types:
            return str(input).encode("utf-8")
        if type(input) is bytes:
            return input
        raise TypeError(f"IdentitySerde cannot serialize object of type {type(input)}")

    def deserialize(self, input_bytes: bytes) -> Any:
        try:
            text = input_bytes.decode("utf-8")
        except UnicodeDecodeError:
            return input_bytes
        first = text[:1]
        if first.isascii() and first and first not in _MAY_BE_NUMBER:
            return text
        for kind in (int, float, complex):
            try:
                return kind(text)
            except Exception:  # noqa: BLE001 - as pulsar-client's (int of over 4,300 digits raises ValueError)
                pass
        return text


class PickleSerDe(SerDe):
    def serialize(self, input: Any) -> bytes:
        return pickle.dumps(input)

    def deserialize(self, input_bytes: bytes) -> Any:
        return pickle.loads(input_bytes)  # noqa: S301 - as Pulsar's PickleSerDe
