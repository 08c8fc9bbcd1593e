"""The register linearizability checker on known histories, then every backend under concurrent
clients (with injected ambiguous failures): zero violations."""

from __future__ import annotations

import json
import sys
import uuid

import pytest

from statekeep.metadata import open_store
from statekeep.testing.linearizability import (
    FAIL,
    UNKNOWN,
    Operation,
    check,
    from_json,
    record_register_history,
    to_json,
)
from support.coordination import go_when_ready, multi_process, run_workers


def op(client, kind, args, call, ret, result):
    return Operation(client, kind, args, call, ret, result)


class TestChecker:
    def test_sequential_history_is_linearizable(self):
        h = [op(0, "write", (b"a",), 0, 1, 0), op(0, "read", (), 2, 3, (b"a", 0)),
             op(0, "cas", (0, b"b"), 4, 5, 1), op(0, "cas", (0, b"c"), 6, 7, FAIL),
             op(0, "read", (), 8, 9, (b"b", 1))]
        result = check(h)
        assert result.ok and [o.call for o in result.order] == [0, 2, 4, 6, 8]

    def test_stale_read_after_completed_write_is_a_violation(self):
        h = [op(0, "write", (b"a",), 0, 1, 0), op(1, "read", (), 2, 3, None)]
        result = check(h)
        assert result.ok is False and result.stuck_at is h[1]

    def test_overlapping_ops_may_be_ordered_either_way(self):
        # the read overlaps the write: seeing the old state or the new one are both fine
        for seen in (None, (b"a", 0)):
            assert check([op(0, "write", (b"a",), 0, 10, 0), op(1, "read", (), 1, 2, seen)]).ok

    def test_two_cas_from_the_same_version_cannot_both_win(self):
        h = [op(0, "write", (b"a",), 0, 1, 0),
             op(1, "cas", (0, b"b"), 2, 5, 1), op(2, "cas", (0, b"c"), 3, 6, 1)]
        assert check(h).ok is False

    def test_read_cannot_go_back_in_time(self):
        # reads by one client see v1, then v0 again, with no write in between: not linearizable
        h = [op(0, "write", (b"a",), 0, 1, 0), op(1, "write", (b"b",), 2, 20, 1),
             op(2, "read", (), 3, 4, (b"b", 1)), op(2, "read", (), 5, 6, (b"a", 0))]
        assert check(h).ok is False

    def test_wrong_version_from_write_is_a_violation(self):
        assert check([op(0, "write", (b"a",), 0, 1, 0), op(0, "write", (b"b",), 2, 3, 5)]).ok is False

    def test_ambiguous_write_may_apply_late_or_never(self):
        lost = op(0, "write", (b"x",), 0, None, UNKNOWN)
        applied = [lost, op(1, "read", (), 5, 6, None), op(1, "read", (), 7, 8, (b"x", 0))]
        never = [lost, op(1, "read", (), 5, 6, None), op(1, "read", (), 7, 8, None)]
        assert check(applied).ok and check(never).ok

    def test_ambiguous_write_cannot_be_seen_before_its_call(self):
        h = [op(1, "read", (), 0, 1, (b"x", 0)), op(0, "write", (b"x",), 2, None, UNKNOWN)]
        assert check(h).ok is False

    def test_ambiguous_write_cannot_apply_twice(self):
        h = [op(0, "write", (b"x",), 0, None, UNKNOWN), op(1, "read", (), 1, 2, (b"x", 0)),
             op(1, "write", (b"y",), 3, 4, 1), op(1, "read", (), 5, 6, (b"x", 2))]
        assert check(h).ok is False

    def test_many_ambiguous_reads_and_failed_cas_are_checked_within_a_small_budget(self):
        """40 ops of unknown outcome that change nothing where they are tried (reads, a cas of a version long
        gone), among 200 sequential writes and reads: each is tried after everything else only, so the search
        stays linear (tried at every point, 2^40 sets of them). A stale read among them is still found."""
        h, t = [], 0
        for n in range(100):
            h += [op(0, "write", (b"%d" % n,), t, t + 1, n), op(0, "read", (), t + 2, t + 3, (b"%d" % n, n))]
            t += 4
        h += [op(1, "read", (), 3 + 10 * i, None, UNKNOWN) for i in range(20)]
        h += [op(2, "cas", (-1, b"late"), 5 + 10 * i, None, UNKNOWN) for i in range(20)]
        result = check(h, max_explored=50_000)
        assert result.ok and len(result.order) == len(h)
        stale = h + [op(3, "read", (), t, t + 1, (b"0", 0))]
        assert check(stale, max_explored=50_000).ok is False

    def test_budget_exhaustion_is_not_success(self):
        h = [op(c, "write", (b"%d" % c,), 0, 100, UNKNOWN if c % 2 else c) for c in range(12)]
        result = check(h, max_explored=5)
        assert result.ok is None and not result


@pytest.fixture
def history_for(store_url):
    """Records a history on ``store_url`` with one store (one session, one client) per thread."""
    shared = store_url if not store_url.startswith("memory://") else f"memory://{uuid.uuid4().hex}"

    def record(**options):
        return record_register_history(lambda client: open_store(shared), "/register", **options)

    # switch threads often: in-memory operations are so short that they would otherwise never overlap
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield record
    sys.setswitchinterval(interval)


def concurrent(history: list[Operation]) -> int:
    """How many completed ops overlap in time with a completed op of another client."""
    done = [o for o in history if o.ret is not None]
    return sum(any(a.client != b.client and a.call < b.ret and b.call < a.ret for b in done) for a in done)


def test_backend_register_is_linearizable(history_for):
    history = history_for(clients=4, ops_per_client=75, fault_rate=0.03, seed=1)
    ambiguous = sum(o.result == UNKNOWN for o in history)
    cas_won = sum(o.kind == "cas" and o.result not in (FAIL, UNKNOWN) for o in history)
    result = check(history)
    print(f"\n{len(history)} ops ({ambiguous} ambiguous, {cas_won} cas won, "
          f"{concurrent(history)} overlap another client's): "
          f"linearizable={result.ok}, {result.explored} configurations explored")
    assert result.ok, f"not linearizable; stuck at {result.stuck_at} after {result.linearized} ops"
    assert cas_won > 0  # the workload must exercise compare-and-set, not only failures


def test_json_round_trip():
    ops = [op(1, "cas", (3, b"\x00\xff"), 1, 2, 4), op(2, "read", (), 3, None, UNKNOWN),
           op(0, "read", (), 5, 6, (b"v", 0)), op(0, "read", (), 7, 8, None)]
    assert [from_json(json.loads(json.dumps(to_json(o)))) for o in ops] == ops


def test_backend_register_is_linearizable_across_processes(store_url, tmp_path):
    if not multi_process(store_url):
        pytest.skip("memory:// lives in one process")
    out = tmp_path / "history.jsonl"
    run_workers(store_url, [["register", store_url, "/register", str(out), str(c), "60"] for c in range(3)],
                go_when_ready(out, 3))
    history = [from_json(json.loads(line)) for line in out.read_text().splitlines()]
    assert len(history) == 180
    result = check(history)
    print(f"\n{len(history)} ops from 3 processes ({concurrent(history)} overlap another client's): "
          f"linearizable={result.ok}, {result.explored} configurations explored")
    assert result.ok, f"not linearizable; stuck at {result.stuck_at} after {result.linearized} ops"


class _IgnoresVersions:
    """A broken store: compare-and-set always writes (the bug a backend must not have)."""

    def __init__(self, store):
        self.store = store

    def get(self, path):
        return self.store.get(path)

    def put(self, path, value, expected_version=None):
        return self.store.put(path, value)

    def close(self):
        self.store.close()


def test_recorded_history_of_a_broken_store_is_caught():
    history = record_register_history(lambda client: _IgnoresVersions(open_store("memory://")), "/register",
                                      clients=1, ops_per_client=100, seed=3)
    assert check(history).ok is False
