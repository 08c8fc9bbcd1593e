"""The time methods of a function's ``context``: timers, the watermark and the current window.

Timers belong to a key: the current record's key (``--key-field``; records without one share one
key), or inside ``on_timer`` the key whose timer fired. ``register_timer(ms)`` is idempotent per
(key, time, domain); a timer fires once, at the end of the batch in which the watermark (event time)
or the clock (processing time) reaches it, calling the function's ``on_timer(key, timestamp_ms,
context)``, whose return value is an output record and whose state changes commit with the batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statekeep.errors import InvalidArgumentError
from statekeep.state.timekeeping import DOMAINS

if TYPE_CHECKING:
    from statekeep.state.transaction import KeyedTransaction
    from statekeep.state.timekeeping import TimeState
    from statekeep.functions.windowing.windowtypes import Window


class TimeMethods:
    """Mixed into :class:`statekeep.functions.executor.context.Context`."""

    _time: TimeState | None = None
    _window: Window | None = None
    _txn: KeyedTransaction  # the Context's: it checks a timer's key and applies the time state's TTL

    def keep_time(self, time: TimeState) -> None:
        """Give the context its run's time state (the runtime, for a function keeping time)."""
        self._time = time
        self._txn.keep_time(time)

    def in_window(self, window: Window | None) -> None:
        """Set the window :meth:`get_window` returns (the runtime, while a window is processed; None after)."""
        self._window = window

    def _time_state(self, op: str) -> TimeState:
        if self._time is None:
            raise InvalidArgumentError(f"{op}: this function keeps no time state (define on_timer, a windowConfig "
                                       "or stateTtlSeconds)")
        return self._time

    def register_timer(self, timestamp_ms: int, domain: str = "event", *, key: str | None = None) -> None:
        """Fire ``on_timer(key, timestamp_ms, context)`` once ``domain``'s time (``"event"``: the watermark,
        ``"processing"``: the clock) reaches ``timestamp_ms``; ``key`` defaults to the current key.
        :class:`InvalidArgumentError` for a non-int time or one more than ten years from now."""
        time = self._time_state("register_timer")
        time.register(self._txn.timer_key(key), time.check_timestamp(timestamp_ms, domain), DOMAINS[domain])

    def delete_timer(self, timestamp_ms: int, domain: str = "event", *, key: str | None = None) -> bool:
        """Remove a registered timer; False if there was none."""
        time = self._time_state("delete_timer")
        if domain not in DOMAINS:
            raise InvalidArgumentError(f"a timer's domain is 'event' or 'processing', not {domain!r}")
        return time.delete(self._txn.timer_key(key), timestamp_ms, DOMAINS[domain])

    def list_timers(self, *, key: str | None = None) -> list[tuple[int, str]]:
        """The key's registered timers as ``(timestamp_ms, domain)``, oldest first (windows' own timers
        show with domain ``"window"``)."""
        time = self._time_state("list_timers")
        return time.timers(self._txn.timer_key(key))

    def get_current_watermark(self) -> int | None:
        """The event-time watermark (ms) as this batch found it; None before any event time was seen."""
        return self._time.watermark if self._time is not None else None

    def get_current_processing_time(self) -> int:
        """The batch's processing time (ms since the epoch), the same for its every record."""
        return self._time_state("get_current_processing_time").now

    def get_window(self) -> Window | None:
        """While a windowed function processes a window: its key, start, end and size (records); else None."""
        return self._window

