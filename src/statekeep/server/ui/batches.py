"""Records per micro-batch, for the console's live plot.

The runtime records no per-batch history: after each micro-batch it rewrites the function's status at
``STATUS_ROOT/T/N/F`` with running totals (``processed``, ``skipped``, ``batches``, ``last_batch``,
``updated_ms``; see :func:`statekeep.functions.driver.spark.run_registered`). :class:`BatchHistory` listens to
the store's notifications for those keys and turns consecutive totals into one entry per status change:
``{"batch", "records", "batches", "seconds", "rate"}`` where ``records`` is the growth of
processed + skipped, ``batches`` how many micro-batches that covers (more than 1 if notifications were
merged) and ``rate`` records per second over the time between the two status writes. History starts
when the server starts (the first status seen is a baseline) and keeps the newest ``keep`` entries.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any

from fastapi import Request

from statekeep import jsonrecords
from statekeep.background import Consumer
from statekeep.functions.driver.spark import STATUS_ROOT
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.types import Notification, NotificationType

log = logging.getLogger(__name__)


class BatchHistory:
    """Per-function batch entries derived from status notifications. Thread-safe."""

    def __init__(self, store: MetadataStore, keep: int = 240) -> None:
        self.store = store
        self.keep = keep
        self._lock = threading.Lock()
        self._last: dict[str, dict[str, Any]] = {}
        self._history: dict[str, collections.deque[dict[str, Any]]] = {}
        self._watchers: list[Callable[[str, dict[str, Any]], None]] = []
        # status paths; the store's dispatcher thread only enqueues: reading the store from it could hold
        # up every listener (a store error is logged by the consumer; the next notification retries)
        self._paths: Consumer[str] = Consumer("statekeep-ui-batches", self._record, what="batch history", log=log)
        self._subscription = store.add_listener(self._on_notification)

    def close(self) -> None:
        self._subscription.close()
        self._paths.stop(timeout=0)

    def history(self, fqfn: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._history.get(fqfn, ()))

    def watch(self, callback: Callable[[str, dict[str, Any]], None]) -> Callable[[], None]:
        """Call ``callback(fqfn, entry)`` for every new entry (on this class's thread); returns the remover."""
        with self._lock:
            self._watchers.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._watchers:
                    self._watchers.remove(callback)
        return remove

    def _on_notification(self, n: Notification) -> None:
        if n.path.startswith(STATUS_ROOT + "/") and n.type in (NotificationType.Created, NotificationType.Modified):
            self._paths.put(n.path)

    def _record(self, path: str) -> None:
        fqfn = path[len(STATUS_ROOT) + 1:]
        if fqfn.count("/") != 2:
            return
        result = self.store.get(path)
        if result is None:
            return
        status = jsonrecords.decode(result.value, path, "function status")
        with self._lock:
            previous = self._last.get(fqfn)
            self._last[fqfn] = status
            entry = _entry(previous, status)
            if entry is None:
                return
            self._history.setdefault(fqfn, collections.deque(maxlen=self.keep)).append(entry)
            watchers = list(self._watchers)
        for callback in watchers:
            callback(fqfn, entry)


def _entry(previous: dict[str, Any] | None, status: dict[str, Any]) -> dict[str, Any] | None:
    """The batch entry between two status writes, or None if no batch completed between them."""
    if previous is None:
        return None
    batches = int(status.get("batches") or 0) - int(previous.get("batches") or 0)
    if batches <= 0:  # a restart (totals reset) or a status write without a batch (start, stop)
        return None
    records = (int(status.get("processed") or 0) + int(status.get("skipped") or 0)
               - int(previous.get("processed") or 0) - int(previous.get("skipped") or 0))
    seconds = max(0.0, (int(status.get("updated_ms") or 0) - int(previous.get("updated_ms") or 0)) / 1000)
    return {"batch": status.get("last_batch"), "records": records, "batches": batches, "seconds": seconds,
            "rate": records / seconds if seconds > 0 else None, "atMs": status.get("updated_ms")}


_history_lock = threading.Lock()


def batch_history(request: Request) -> BatchHistory:
    """The app's :class:`BatchHistory`, started on the console's first request (a server whose console
    is never opened pays nothing for it); closed with the store."""
    state = request.app.state
    with _history_lock:
        history: BatchHistory | None = getattr(state, "ui_batch_history", None)
        if history is None:
            history = state.ui_batch_history = BatchHistory(state.ctx.store)
        return history
