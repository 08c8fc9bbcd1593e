"""Coordination recipes over the metadata contract (after Pulsar PIP-45): locks with expiry,
leader election and unique counters. See :class:`CoordinationService` and :class:`ResourceLock`.

    coord = CoordinationService(store)
    lock = coord.acquire_lock("/locks/job-1", b"worker-7")      # LockBusyError if held elsewhere
    leadership = coord.become_leader("/leader", b"me").result()  # waits for the current leader to go
    n = coord.next_counter_value("/counters/ids")                # unique across processes
"""

from statekeep.coordination.locks import ResourceLock
from statekeep.coordination.service import CoordinationService

__all__ = ["CoordinationService", "ResourceLock"]
