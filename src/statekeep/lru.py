"""The bounded memos of statekeep, two policies for two jobs:

- :class:`BoundedLRU`: at most ``maxsize`` entries, the least recently used dropped when full; for memos
  of values worth keeping (per-function handles) keyed by arbitrary hashables. Thread-safe: every method
  holds one lock for O(1) work.
- :func:`remember`: a plain ``dict`` that empties itself when full; for hot-path memos read on every
  operation (valid paths, encoded keys, the last read of a key), where a hit must stay one exact-dict
  subscript (CPython specializes it) and a miss only costs rebuilding the value.

A pure function is memoized with ``functools.lru_cache``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

from statekeep.validate import check_int

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["BoundedLRU", "remember"]


def remember(memo: dict[K, V], key: K, value: V, maxsize: int) -> V:
    """Store ``value`` at ``key`` in the hot-path memo ``memo`` (emptied first if it holds ``maxsize``
    entries); returns ``value``. Readers use ``memo`` as a dict (a lost entry is only a miss)."""
    if len(memo) >= maxsize:
        memo.clear()
    memo[key] = value
    return value


class BoundedLRU(Generic[K, V]):
    """At most ``maxsize`` entries; :meth:`get` and :meth:`put` mark an entry most recently used.

    ``get`` of an unhashable key returns the default (such a key is never stored); ``put`` of one
    raises ``TypeError``. :class:`InvalidArgumentError` if ``maxsize`` is not a positive int.
    """

    def __init__(self, maxsize: int) -> None:
        check_int(maxsize, "maxsize", minimum=1)
        self.maxsize = maxsize
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key`` (now most recently used), else ``default``."""
        with self._lock:
            try:
                self._data.move_to_end(key)
            except (KeyError, TypeError):  # absent, or unhashable and so never stored
                return default
            return self._data[key]

    def put(self, key: K, value: V) -> V:
        """Store ``value`` under ``key`` (most recently used), evicting the least recently used entry
        if full; returns ``value``."""
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            if len(self._data) > self.maxsize:
                self._data.popitem(last=False)
        return value
