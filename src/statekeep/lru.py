"""The bounded memos of statekeep, two policies for two jobs:

- :class:`BoundedLRU`: at most ``maxsize`` entries, the least recently used dropped when full; for memos
  of values worth keeping (per-function handles) keyed by arbitrary hashables. Thread-safe: every method
  holds one lock for O(1) work.
- :func:`remember`: a plain ``dict`` that empties itself when full; for hot-path memos read on every
  operation (valid paths, encoded keys, the last read of a key), where a hit must stay one exact-dict
  subscript (CPython specializes it) and a miss only costs rebuilding the value.

A pure function is memoized with ``functools.lru_cache``, registered with :func:`cached`.

Every module-level memo is made here (:func:`memo`, :class:`BoundedLRU`, :func:`cached`), so that one
:func:`reset` empties them all, for a test that needs a cold process. A forked child (Spark's Python workers) keeps
what its parent memoized: memos hold values, never connections or handles (the registries of open clients, stores
and LMDB environments close their own at a fork).
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from statekeep.validate import check_int

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

__all__ = ["BoundedLRU", "cached", "memo", "remember", "reset"]

_memos: list[dict[Any, Any]] = []  # every memo() made (module-level: they live as long as the process)
_lrus: weakref.WeakSet[BoundedLRU[Any, Any]] = weakref.WeakSet()
_caches: list[Any] = []  # functions made by cached()


def memo() -> dict[Any, Any]:
    """A new hot-path memo (a plain dict, filled with :func:`remember`), emptied by :func:`reset`."""
    made: dict[Any, Any] = {}
    _memos.append(made)
    return made


def cached(maxsize: int | None) -> Callable[[Callable[..., V]], Callable[..., V]]:
    """``functools.lru_cache(maxsize)``, emptied by :func:`reset`."""
    def wrap(function: Callable[..., V]) -> Callable[..., V]:
        made = functools.lru_cache(maxsize=maxsize)(function)
        _caches.append(made)
        return made

    return wrap


def reset() -> None:
    """Empty every memo made by :func:`memo`, :class:`BoundedLRU` and :func:`cached`."""
    for made in _memos:
        made.clear()
    for lru in list(_lrus):
        lru.clear()
    for function in _caches:
        function.cache_clear()


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
        _lrus.add(self)

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

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
