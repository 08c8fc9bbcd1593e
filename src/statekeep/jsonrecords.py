"""The one decoder of the JSON records statekeep keeps in a store (function configs and status, partition
layouts and manifests, state handles, fences, time groups, follower positions, the migration journal).

Writers keep their own ``json.dumps`` (the bytes stored today stay byte-identical); every reader goes
through :func:`decode`, so a record that is not statekeep's raises one error naming where it is kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar, overload

from statekeep.errors import CorruptRecordError, StatekeepError

T = TypeVar("T")


@overload
def decode(raw: bytes | str, key: str, what: str = ...) -> dict[str, Any]: ...
@overload
def decode(raw: bytes | str, key: str, what: str, build: Callable[[dict[str, Any]], T]) -> T: ...


def decode(raw: bytes | str, key: str, what: str = "record",
           build: Callable[[dict[str, Any]], Any] | None = None) -> Any:
    """The JSON object stored at ``key`` (``what`` says what it is, for the message), passed through
    ``build`` when given (which turns it into the caller's type, reading its fields).

    Raises :class:`CorruptRecordError` naming ``key`` when ``raw`` is not JSON, not a JSON object, or
    ``build`` fails on it (a missing field, a wrong type: ``KeyError``, ``TypeError``, ``ValueError``,
    ``IndexError``, ``AttributeError``). A :class:`StatekeepError` raised by ``build`` passes unchanged."""
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        return data if build is None else build(data)
    except StatekeepError:
        raise
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as e:
        where = key if key.isprintable() else repr(key)  # statekeep's internal state keys hold NULs
        raise CorruptRecordError(key, f"the {what} at {where} is not statekeep's: {e!r}") from e
