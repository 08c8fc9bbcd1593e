"""Changelog compaction (KIP-813, as Kafka compacts a changelog topic): keep the newest record per key.

    compact(state, tombstone_retention_s=3600)            # one pass, up to the newest offset
    compactor = Compactor(lambda: [state_a, state_b], interval_s=60).start()
    ...
    compactor.stop()

What compaction guarantees (each provider's ``compact_changelog`` implements it):

- the newest record of every key stays, except a tombstone older than the retention, which is
  dropped; the newest dropped tombstone's offset is published as ``purged_offset`` in the same write;
- nothing above the compaction point (``upto_offset``) is touched. :class:`Compactor` compacts up to
  the newest offset it saw on its *previous* pass, so records younger than one interval (the head
  that live readers are working through) are never removed;
- writers are never blocked for long: compaction runs in small writes (thousands of records).

Why a follower still converges: records carry absolute values, so a reader resuming from offset N
misses only records that a later record of the same key supersedes, and it reads that later record.
The exception is a dropped tombstone after N: a reader whose applied offset is below
``purged_offset`` may have missed a delete, and must start again from a snapshot (or a full read of
the state) instead of resuming; :class:`~statekeep.changelog.FollowerStore` does this by itself.
Kafka's rule holds too: a reader that keeps up within the tombstone retention never has to.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from statekeep.background import Periodic
from statekeep.errors import NotFoundError, StatekeepError
from statekeep.state.base import Capability, CompactionResult, StateStore

log = logging.getLogger(__name__)

DEFAULT_TOMBSTONE_RETENTION_S = 24 * 3600.0  # Kafka's delete.retention.ms default


def compact(state: StateStore, tombstone_retention_s: float = DEFAULT_TOMBSTONE_RETENTION_S, *,
            upto_offset: int | None = None, now_ms: int | None = None) -> CompactionResult:
    """One compaction pass over ``state``'s changelog up to ``upto_offset`` (default: its newest offset).
    ``now_ms`` (default: the clock) is the time tombstone ages are measured at.
    :class:`UnsupportedCapabilityError` for a provider without :attr:`Capability.COMPACTION`."""
    state.require(Capability.COMPACTION)
    if upto_offset is None:
        upto_offset = state.changelog_position().last_offset
    if upto_offset < 0:
        return CompactionResult(0, 0, 0, upto_offset)
    return state.compact_changelog(upto_offset, tombstone_retention_s, now_ms=now_ms)


class Compactor:
    """Compacts the changelogs of ``states()`` every ``interval_s`` seconds on a daemon thread.

    ``states`` returns the stores to compact each pass (so functions created later are picked up).
    A pass over a function compacts up to the newest offset seen on the previous pass (see the module
    docstring); functions whose provider compacts on its own (no :attr:`Capability.COMPACTION`) are
    skipped. Errors are logged, never raised into the caller; ``last_results`` keeps the latest
    result per function. Call :meth:`stop` (or use it as a context manager)."""

    def __init__(self, states: Callable[[], Iterable[StateStore]] | Iterable[StateStore], *,
                 interval_s: float = 60.0, tombstone_retention_s: float = DEFAULT_TOMBSTONE_RETENTION_S) -> None:
        self._states = states if callable(states) else (lambda fixed=list(states): fixed)
        self.interval_s = interval_s
        self.tombstone_retention_s = tombstone_retention_s
        self.last_results: dict[str, CompactionResult] = {}
        self._points: dict[str, tuple[str | None, int]] = {}  # function -> (epoch, newest offset last pass)
        self._loop = Periodic("statekeep-compactor", interval_s, self.run_once, what="compaction pass", log=log)

    def run_once(self) -> dict[str, CompactionResult]:
        """One pass over every function now; returns what each compaction did."""
        results = {}
        for state in self._states():
            fqfn = f"{state.tenant}/{state.namespace}/{state.name}"
            if Capability.COMPACTION not in state.capabilities:
                continue
            try:
                position = state.changelog_position()
                epoch, point = self._points.get(fqfn, (position.epoch, -1))
                self._points[fqfn] = (position.epoch, position.last_offset)
                if epoch != position.epoch or point < 0:
                    continue  # first sight of this incarnation: its whole log is the head for now
                results[fqfn] = self.last_results[fqfn] = compact(state, self.tombstone_retention_s, upto_offset=point)
            except NotFoundError:
                self._points.pop(fqfn, None)
            except StatekeepError as e:
                log.warning("compaction of %s failed (retried next pass): %s", fqfn, e)
        return results

    def start(self) -> Compactor:
        self._loop.start()
        return self

    def stop(self) -> None:
        self._loop.stop(timeout=30)

    def __enter__(self) -> Compactor:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
