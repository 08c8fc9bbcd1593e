"""The one retry policy: bounds by count and by deadline (driven by an injected clock), full-jitter
waits within their cap, bad settings refused; the compare-and-set loops that use it; writes safe to
repeat riding out an unavailable store (the driver's status write)."""

from __future__ import annotations

import pytest

from statekeep.cache import MetadataCache
from statekeep.errors import (BadVersionError, InvalidArgumentError, PossibleInconsistentStateError,
                              StoreClosedError, StoreUnavailableError)
from statekeep.retry import DEFAULT, OUTAGE, RetryPolicy


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


def test_repeat_rides_out_an_unavailable_store():
    clock, calls = FakeClock(), []

    def write() -> str:
        calls.append(clock.now)
        if len(calls) <= 3:
            raise (StoreUnavailableError if len(calls) % 2 else PossibleInconsistentStateError)("leader lost")
        return "written"

    assert OUTAGE.repeat(write, sleep=clock.sleep, clock=clock) == "written"
    assert len(calls) == 4
    assert all(0 <= waited <= OUTAGE.max_delay for waited in clock.slept)


def test_repeat_gives_up_at_its_bound_with_the_last_error():
    clock, calls = FakeClock(), []

    def write() -> None:
        calls.append(clock.now)
        clock.now += 4  # each attempt waits 4 s for an answer
        raise PossibleInconsistentStateError(f"attempt {len(calls)}")

    with pytest.raises(PossibleInconsistentStateError, match="attempt 3"):
        OUTAGE.bounded(seconds=10).repeat(write, sleep=clock.sleep, clock=clock)
    assert len(calls) == 3  # started at 0, 4+, 8+ s; none after 10 s


@pytest.mark.parametrize("error", [BadVersionError("lost a race"), StoreClosedError("closed"),
                                   InvalidArgumentError("bad")])
def test_repeat_never_repeats_another_error(error):
    calls = []

    def write() -> None:
        calls.append(1)
        raise error

    with pytest.raises(type(error)):
        OUTAGE.repeat(write, sleep=lambda s: None)
    assert calls == [1]  # a lost compare-and-set is a result, not an outage


@pytest.mark.parametrize("error, sent", [(StoreUnavailableError("etcd unavailable"), False),
                                         (PossibleInconsistentStateError("request timed out, possibly due to "
                                                                         "previous leader failure"), True)])
def test_a_status_write_failing_once_is_repeated(error, sent):
    """The driver's status write (issue 31, defect 6) is a plain overwrite: one failing while the store is
    unavailable, or whose answer was lost, is written again and the query goes on."""
    from statekeep.functions.driver.spark import STATUS_ROOT, FunctionQuery, read_status, status_saver
    from statekeep.metadata import open_store
    from statekeep.testing import faults

    with open_store("memory://") as store:
        query = FunctionQuery(None, {"tenant": "public", "namespace": "default", "name": "f"},  # type: ignore[arg-type]
                              ["in"], "checkpoint")
        query.status_saver = status_saver(store, query, "public", "default", "f")
        query.totals["batches"], query.worker_id = 3, "w1"
        failed = faults.fail(store, "put", error, sent=sent, matches=lambda path: path.startswith(STATUS_ROOT))
        query.save_status()
        assert failed == [f"{STATUS_ROOT}/public/default/f"]
        status = read_status(store, "public", "default", "f")
        assert status is not None and (status["batches"], status["workerId"]) == (3, "w1")


def test_a_status_computed_first_never_overwrites_one_computed_after_it():
    """Spark's listener thread saves the status after a micro-batch while the query's thread saves it at the end
    (seen on the cluster: a slow write of the listener's, computed before the last tasks' stats arrived, landed
    after the final one, and the stored status said 1,751 records processed of 2,000). Saves take turns, each
    computed in its turn: the last write is the newest status."""
    import json
    import threading

    from statekeep.functions.driver.spark import FunctionQuery, read_status, status_saver
    from statekeep.metadata import open_store

    with open_store("memory://") as store:
        query = FunctionQuery(None, {"tenant": "public", "namespace": "default", "name": "f"},  # type: ignore[arg-type]
                              ["in"], "checkpoint")
        save = status_saver(store, query, "public", "default", "f")
        computed, go_on = threading.Event(), threading.Event()

        def slow_first_save() -> None:  # the listener's: its status computed, then its write held back
            status = query.status()
            if threading.current_thread().name == "listener":
                computed.set()
                go_on.wait(10)
            store.put("/statekeep/status/public/default/f", json.dumps(status).encode())

        query.status_saver = slow_first_save
        query.totals["processed"] = 1751
        listener = threading.Thread(target=query.save_status, name="listener")
        listener.start()
        assert computed.wait(10)
        query.status_saver = save
        query.totals["processed"] = 2000  # the last tasks' stats, then the end's save
        final = threading.Thread(target=query.save_status)
        final.start()
        final.join(0.5)  # without turns it writes now and the listener's stale write lands after it
        go_on.set()
        listener.join(10)
        final.join(10)
        assert read_status(store, "public", "default", "f")["processed"] == 2000
