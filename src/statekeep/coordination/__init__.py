"""Coordination recipes over the metadata contract (after Pulsar PIP-45): locks with expiry,
leader election and unique counters. See :class:`CoordinationService` and :class:`ResourceLock`.

    coord = CoordinationService(store)
    lock = coord.acquire_lock("/locks/job-1", b"worker-7")      # LockBusyError if held elsewhere
    with coord.acquire_lock("/locks/job-2", b"w", blocking=True, timeout=10):  # waits, in arrival order
        ...                                                                      # released on exit
    leadership = coord.become_leader("/leader", b"me").result()  # fair: leaders in order of arrival
    n = coord.next_counter_value("/counters/ids")                # unique across processes
"""

from statekeep.coordination.locks import ResourceLock
from statekeep.coordination.service import CoordinationService

__all__ = ["CoordinationService", "ResourceLock"]
