"""Background threads, two shapes for every use (after tooz's ``Heart``): a :class:`Periodic` loop and a
queue :class:`Consumer`. Both are daemon threads that end when stopped, never die of an exception from
the work they run (it is logged, and the loop goes on), and can be stopped from their own thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
_STOP = object()


class Periodic:
    """Calls ``tick()`` on a daemon thread every ``interval`` seconds, and at once on :meth:`wake`, until
    :meth:`stop`. ``immediately``: the first tick runs at start instead of after one interval. ``paced``:
    ``tick`` returns the seconds to wait before the next one (0: at once; None: ``interval``), for a loop
    whose pace depends on what a tick found (a poll that found work, a backoff). An exception from
    ``tick`` is logged (``what`` names the loop) and the next tick runs after ``interval``."""

    def __init__(self, name: str, interval: float, tick: Callable[[], object], *, what: str,
                 log: logging.Logger, immediately: bool = False, paced: bool = False) -> None:
        self.name, self.interval, self.what = name, interval, what
        self._tick, self._log, self._immediately, self._paced = tick, log, immediately, paced
        self._stopping, self._wake = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (a no-op once started)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Run the next tick now (or as soon as the one under way returns)."""
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop: no tick starts after this; waits up to ``timeout`` s for one under way (not from the
        loop's own thread)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def _run(self) -> None:
        if not self._immediately:
            self._wake.wait(self.interval)
            self._wake.clear()
        while not self._stopping.is_set():
            delay = self.interval
            try:
                result = self._tick()
                if self._paced and result is not None:
                    delay = float(result)  # type: ignore[arg-type]  # a paced tick returns seconds
            except Exception:  # never let the thread die: the next tick may work
                self._log.exception("%s failed", self.what)
            if delay > 0:
                self._wake.wait(delay)
            self._wake.clear()


class Consumer(Generic[T]):
    """Hands each item :meth:`put` on its queue to ``handle(item)`` on a daemon thread, in order.
    ``maxsize`` > 0 bounds the queue (``put`` then waits for room). With ``idle_after``: when no item
    arrives within ``idle_after()`` seconds (asked before each wait, so it can name a deadline),
    ``handle(idle)`` runs as if ``idle`` had been put (a periodic re-check in the consumer's thread). An exception from
    ``handle`` is logged (``what`` names the work) and the next item goes on. :meth:`stop` lets the
    items put before it be handled, then ends the thread."""

    def __init__(self, name: str, handle: Callable[[T], object], *, what: str, log: logging.Logger,
                 maxsize: int = 0, idle: T | None = None, idle_after: Callable[[], float] | None = None) -> None:
        self.what = what
        self._handle, self._log = handle, log
        self._idle, self._idle_after = idle, idle_after
        # unbounded: a SimpleQueue, whose put is reentrant (a backend's callback may post from anywhere)
        self._queue: queue.Queue[object] | queue.SimpleQueue[object] = (
            queue.Queue(maxsize) if maxsize > 0 else queue.SimpleQueue())
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def put(self, item: T) -> None:
        self._queue.put(item)

    def stop(self, timeout: float | None = 5.0) -> None:
        """End the thread after the items already put; waits up to ``timeout`` s (``None``: for as long as
        it takes) unless called from the consumer's own thread."""
        self._queue.put(_STOP)
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)

    def _run(self) -> None:
        while (item := self._next()) is not _STOP:
            try:
                self._handle(item)  # type: ignore[arg-type]  # every item but _STOP came through put(T)
            except Exception:  # one item's failure must not end the thread
                self._log.exception("%s failed on %r", self.what, item)

    def _next(self) -> object:
        if self._idle_after is None:
            return self._queue.get()
        try:
            return self._queue.get(timeout=max(0.0, self._idle_after()))
        except queue.Empty:
            return self._idle
