"""CPython's cyclic garbage collector during a partition's run: :func:`young_generation_only`.

A run holds its batch in memory until its commit (the records, the state buffer, the windows' open records), and
frees it all at the end. To a generational collector those are survivors: they reach the oldest generation, and
every full collection the run's own allocations set off traverses all of them again, with everything else the
process holds. ``benchmarks/partition_run.py`` measures it: the 1M events of ``benchmarks/windows.py`` through its
records-kept windows, in one process, took 10.9 s with the default thresholds and 5.9 s with only the youngest
generation collected during each run.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: the older generations' thresholds during a run: never reached within one
_NEVER = 1 << 30
_lock = threading.Lock()
_runs = 0
_saved = gc.get_threshold()


@contextmanager
def young_generation_only() -> Iterator[None]:
    """Within the block, the collector collects only its youngest generation automatically (cyclic garbage made
    and dropped within it is still freed as before); the older generations wait until the block ends, when the
    thresholds set before it apply again. Blocks may overlap (nested, or in threads: a trigger beside a run): the
    thresholds come back when the last one ends. An explicit ``gc.collect()`` still collects everything."""
    global _runs, _saved
    with _lock:
        if _runs == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(_saved[0], _NEVER, _NEVER)
        _runs += 1
    try:
        yield
    finally:
        with _lock:
            _runs -= 1
            if _runs == 0:
                gc.set_threshold(*_saved)
