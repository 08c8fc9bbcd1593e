"""The one retry policy: bounds by count and by deadline (driven by an injected clock), full-jitter
waits within their cap, bad settings refused; and the compare-and-set loops that use it."""

from __future__ import annotations

import pytest

from statekeep.cache import MetadataCache
from statekeep.errors import BadVersionError, InvalidArgumentError
from statekeep.retry import DEFAULT, RetryPolicy


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_count_bound_and_waits():
    clock = FakeClock()
    policy = RetryPolicy(max_attempts=6, first_delay=0.001, max_delay=0.004, immediate=1)
    assert list(policy.attempts(sleep=clock.sleep, clock=clock)) == [0, 1, 2, 3, 4, 5]
    # the first retry is immediate; the others wait full-jitter within min(cap, first * 2**n)
    assert len(clock.slept) == 4
    for n, waited in enumerate(clock.slept, start=1):
        assert 0 <= waited <= min(0.004, 0.001 * 2 ** n)


def test_deadline_bound_uses_the_clock():
    clock = FakeClock()
    seen = []
    for attempt in RetryPolicy(deadline=10.0).attempts(sleep=clock.sleep, clock=clock):
        seen.append(attempt)
        clock.now += 3  # each attempt takes 3 s
    assert seen == [0, 1, 2, 3]  # the fourth attempt ends after 12 s > 10 s: no fifth


def test_bounded_keeps_the_backoff_shape():
    policy = DEFAULT.bounded(attempts=3)
    assert (policy.max_attempts, policy.deadline) == (3, None)
    assert (policy.first_delay, policy.max_delay, policy.immediate) == (
        DEFAULT.first_delay, DEFAULT.max_delay, DEFAULT.immediate)
    assert list(policy.attempts(sleep=lambda s: None)) == [0, 1, 2]


@pytest.mark.parametrize("kwargs", [{}, {"max_attempts": 0}, {"max_attempts": True}, {"deadline": -1},
                                    {"max_attempts": 1, "first_delay": "1"}, {"max_attempts": 1, "immediate": -1}])
def test_bad_settings(kwargs):
    with pytest.raises(InvalidArgumentError):
        RetryPolicy(**kwargs)


def test_cache_update_gives_up_after_its_bound(store):
    cache = MetadataCache(store, max_retries=2)
    try:
        store.put("/k", b'{"n": 0}')
        calls = []

        def bump(value):
            calls.append(value)
            store.put("/k", b'{"n": %d}' % (len(calls) * 10))  # a concurrent writer wins every round
            return {"n": value["n"] + 1}

        with pytest.raises(BadVersionError):
            cache.read_modify_update("/k", bump)
        assert len(calls) == 3  # max_retries + 1 attempts
    finally:
        cache.close()
