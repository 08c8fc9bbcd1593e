"""A progress display for long copies: a rich bar on a terminal, a plain line every few seconds otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

from statekeep.metadata.base import Closing


class Progress(Closing):
    """``update(done)`` with the number of records handled so far; ``close()`` at the end.
    Writes to ``stream`` (stderr by default) only; ``enabled=False`` shows nothing."""

    def __init__(self, label: str, total: int, *, enabled: bool = True, stream: TextIO | None = None,
                 every: float = 2.0) -> None:
        self.label, self.total, self.enabled = label, total, enabled
        self.stream = stream or sys.stderr
        self.every = every
        self.started = self._last = time.monotonic()
        self.done = 0
        self._rich = None
        if enabled and self.stream.isatty():
            try:
                from rich.console import Console
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn,
                                           TimeElapsedColumn, TimeRemainingColumn)
            except ImportError:  # rich is optional: fall back to plain lines
                pass
            else:
                self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                          TextColumn("{task.fields[rate]} rec/s"), TimeElapsedColumn(),
                                          TimeRemainingColumn(), console=Console(file=self.stream))
                self._task = self._rich.add_task(label, total=total, rate="-")
                self._rich.start()

    def update(self, done: int) -> None:
        self.done = max(done, self.done)
        if not self.enabled:
            return
        now = time.monotonic()
        rate = f"{self.done / max(now - self.started, 1e-6):,.0f}"
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, rate=rate)
        elif now - self._last >= self.every:
            self._last = now
            share = f" ({100 * self.done / self.total:.0f}%)" if self.total else ""
            print(f"{self.label}: {self.done:,}/{self.total:,} records{share}, {rate} records/s",
                  file=self.stream, flush=True)

    def close(self) -> None:
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done)
            self._rich.stop()
        else:
            elapsed = time.monotonic() - self.started
            print(f"{self.label}: {self.done:,}/{self.total:,} records in {elapsed:.1f}s", file=self.stream,
                  flush=True)
