"""What a window is to a function and to its state: :class:`Window` (what ``context.get_window()`` gives), an
:class:`Aggregate` kept in place of its records, and the names of the lists that hold its records
(:func:`window_list`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from statekeep.state.typed import variable_prefix


class Window(NamedTuple):
    """What ``context.get_window()`` returns while a window is processed: its key (None without a key
    field), start and end in ms (end exclusive; for a count window the first and last record's event
    times) and how many records it holds (``size``)."""

    key: str | None
    start: int
    end: int
    size: int


Fired = list[tuple[Window, Any]]  # a window and its records (or its aggregate's result)


def window_list(key: str, start: int) -> str:
    """The prefix of the records of ``key``'s time window starting at ``start``: a list as typed state keeps one
    (:mod:`statekeep.state.typed`) under the key, named so that no user variable can be (it starts with a digit)."""
    return variable_prefix(key, f"{start}w")


def _list(key: str, name: str) -> str:
    """The prefix of a window list of ``key``: ``{start}w`` a time window's, ``{n}s`` a session's n-th, ``c`` the
    count windows'."""
    return variable_prefix(key, name)


class Aggregate(NamedTuple):
    """A time or session window's incremental aggregate (after Flink's ``AggregateFunction``), from the function's
    file or class: ``create_accumulator()``, ``add_to_accumulator(accumulator, record) -> accumulator``,
    ``get_result(accumulator)``, which the function's ``process`` receives instead of the window's records, and
    ``merge_accumulators(a, b) -> accumulator`` (``merge``; required by session windows: a record bridging two
    sessions joins them). The accumulator (JSON data) is kept in place of the records."""

    create: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]
    merge: Callable[[Any, Any], Any] | None = None
