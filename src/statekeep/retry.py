"""One retry policy for every compare-and-set loop in statekeep, and for every write that is safe to repeat.

A compare-and-set loop reads a key, computes the new value and writes it conditionally on the version it
read; when another writer got there first it reads again. Every such loop (counters, the metadata cache,
the metadata state provider, state handles, the etcd backend's transactions) iterates over
:meth:`RetryPolicy.attempts` of a policy derived from :data:`DEFAULT`, so the backoff shape is configured
here, once, and each caller only chooses its bound (a number of attempts or a deadline)::

    for attempt in DEFAULT.bounded(attempts=100).attempts():
        current = store.get(path)
        try:
            return store.put(path, change(current), expected_version=current.stat.version)
        except BadVersionError:
            continue  # lost a race: read again
    raise BadVersionError(f"{path}: lost 100 races in a row")

Background loops that lost their store (a watch, a follower) wait :data:`RECONNECT`'s delays
between their retries instead. Only lost races are retried by the caller; an unreachable store
(:class:`StoreUnavailableError`) is not caught, so it propagates at once. When the bound is reached
the loop simply ends and the caller raises its own error (or returns its own result, e.g. ``False``
for a lock it did not get): losing is a result of the operation, not of the policy.

A write that is safe to repeat (applying it twice leaves what applying it once does: a plain overwrite of
a whole value) rides out an unavailable store, such as an etcd or ZooKeeper leader change, through
:meth:`RetryPolicy.repeat` of :data:`OUTAGE`::

    OUTAGE.repeat(lambda: store.put(path, value))  # no expected_version: a plain overwrite

A compare-and-set is never repeated that way: when its outcome is unknown, whether it applied decides what
comes next, so its caller reads again (the loop above) or reports the error.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from statekeep.errors import InvalidArgumentError, StoreUnavailableError
from statekeep.validate import check_int, check_number

__all__ = ["DEFAULT", "OUTAGE", "RECONNECT", "RetryPolicy"]

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Jittered exponential backoff between attempts, bounded by a count and/or a deadline.

    ``max_attempts``: attempts in all (``None``: no count bound). ``deadline``: seconds after the first
    attempt after which no new attempt starts (``None``: no time bound); at least one bound is required.
    The first ``immediate`` retries start at once (a single lost race is common and cheap); after that
    the n-th wait is uniform in ``[0, min(max_delay, first_delay * 2**n)]`` ("full jitter"), which
    spreads contenders out so that one of them wins each round.

    Raises :class:`InvalidArgumentError` on a negative or non-numeric setting, or no bound.
    """

    max_attempts: int | None = None
    deadline: float | None = None
    first_delay: float = 0.0005
    max_delay: float = 0.05
    immediate: int = 1

    def __post_init__(self) -> None:
        if self.max_attempts is None and self.deadline is None:
            raise InvalidArgumentError("a retry policy needs max_attempts or a deadline")
        check_int(self.max_attempts, "max_attempts", minimum=1, optional=True)
        for name in ("deadline", "first_delay", "max_delay"):
            check_number(getattr(self, name), name, minimum=0, unit=" of seconds", optional=name == "deadline")
        check_int(self.immediate, "immediate", minimum=0)

    def bounded(self, *, attempts: int | None = None, seconds: float | None = None) -> RetryPolicy:
        """This policy's backoff with another bound: ``attempts`` in all and/or ``seconds``."""
        return dataclasses.replace(self, max_attempts=attempts, deadline=seconds)

    def delay(self, retry: int) -> float:
        """The wait before retry number ``retry`` (1 for the first retry): 0 for the immediate ones."""
        if retry <= self.immediate:
            return 0.0
        return random.uniform(0, min(self.max_delay, self.first_delay * 2 ** min(retry - self.immediate, 30)))

    def attempts(self, *, sleep: Callable[[float], object] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> Iterator[int]:
        """Yields the attempt number (0, 1, ...) before each attempt, waiting :meth:`delay` in between;
        ends without raising once ``max_attempts`` attempts were made or ``deadline`` seconds have
        passed since the first. ``sleep`` and ``clock`` are injectable (tests drive them)."""
        limit, deadline = self.max_attempts, self.deadline
        start = clock() if deadline is not None else 0.0
        attempt = 0
        while True:
            yield attempt
            attempt += 1
            if limit is not None and attempt >= limit:
                return
            if deadline is not None and clock() - start > deadline:
                return
            if attempt > self.immediate:
                sleep(self.delay(attempt))

    def repeat(self, operation: Callable[[], T], *, sleep: Callable[[float], object] = time.sleep,
               clock: Callable[[], float] = time.monotonic) -> T:
        """``operation()``'s result, calling it again after each :class:`StoreUnavailableError` (a
        :class:`PossibleInconsistentStateError` too: a write may have been applied, and applying it again
        changes nothing) within this policy's bound; once the bound is reached, that error is raised. Any
        other error (:class:`StoreClosedError`, :class:`BadVersionError`, ...) propagates at once. Only for
        an operation that is safe to repeat (a read, a plain overwrite): never a compare-and-set (see the
        module docstring). ``sleep`` and ``clock`` as for :meth:`attempts`."""
        failure: StoreUnavailableError | None = None
        for _ in self.attempts(sleep=sleep, clock=clock):
            try:
                return operation()
            except StoreUnavailableError as e:
                failure = e
        assert failure is not None  # attempts() yields at least once
        raise failure


#: The backoff of every compare-and-set loop; callers choose the bound with :meth:`RetryPolicy.bounded`.
DEFAULT = RetryPolicy(max_attempts=100, first_delay=0.0005, max_delay=0.05, immediate=1)

#: The waits of a background loop whose store failed under it (an etcd watch, a follower's poll):
#: ``RECONNECT.delay(n)`` before its n-th retry in a row, from 0.1 s doubling to at most 2 s, jittered.
#: Such loops retry for as long as they run, so the policy has no bound.
RECONNECT = RetryPolicy(deadline=math.inf, first_delay=0.1, max_delay=2.0, immediate=0)

#: The waits of a write that is safe to repeat while its store is unavailable (:meth:`RetryPolicy.repeat`):
#: RECONNECT's delays, for up to 60 s after the first attempt (each attempt taking up to the store's own
#: timeout). That rides out a leader change, where writes the old leader held time out (etcd's request
#: timeout is 7 s by default) and an election follows, but not a store that stays down.
OUTAGE = RECONNECT.bounded(seconds=60.0)
