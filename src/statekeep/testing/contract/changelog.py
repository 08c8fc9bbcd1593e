"""The changelog half of the state contract (KIP-813) on every provider and backend: offsets rise with
commit order (a tailing reader misses nothing), the position and its epoch, compaction, a full read
with its position, and replace_state (restore)."""

from __future__ import annotations

import threading
import time

import pytest

from statekeep.errors import InvalidArgumentError
from statekeep.state import StateEntry, open_provider
from statekeep.state.base import Capability
from statekeep.testing import in_threads
from statekeep.testing.contract.plugin import provider_config
from statekeep.testing.contract.state import has


@pytest.fixture
def state(provider):
    return provider.get_state_store("acme", "prod", "f")


def replay(records, out: dict[str, tuple] | None = None) -> dict[str, tuple]:
    out = {} if out is None else out
    for r in records:
        if r.tombstone:
            out.pop(r.key, None)
        else:
            out[r.key] = (r.kind, r.value, r.version)
    return out


def current(state) -> dict[str, tuple]:
    return {e.key: (e.kind, e.value, e.version) for e in state.scan_entries()}


def test_offsets_follow_commit_order_under_concurrent_writers(target):
    """Writers in several threads (each with its own provider); a reader tails the changelog meanwhile.
    Whatever it saw, in the order it saw it, must be the whole log: no record shows up late below an
    offset the reader had already passed."""
    providers = [open_provider(target[0], provider_config(target)) for _ in range(4)]
    try:
        stores = [p.get_state_store("t", "n", "f") for p in providers]
        done = threading.Event()
        tailed: list = []

        def tail() -> None:
            after = -1
            while True:
                finished = done.is_set()
                page = stores[0].read_changelog(after=after)
                tailed.extend(page)
                if page:
                    after = page[-1].offset
                elif finished:
                    return
                time.sleep(0.001)

        def write(i: int, s) -> None:
            for j in range(15):
                s.incr("shared")
                s.put(f"own{i}", b"%d" % j)
                if j % 5 == 4:
                    s.delete(f"own{i}")

        reader = threading.Thread(target=tail)
        reader.start()
        try:
            in_threads(write, list(enumerate(stores)))
        finally:
            done.set()
            reader.join()
        log = stores[0].read_changelog()
        seen = [r.offset for r in tailed]
        assert seen == sorted(set(seen))  # nothing showed up late below an offset already passed
        offsets = [r.offset for r in log]
        assert seen[len(seen) - len(offsets):] == offsets  # the log is what the reader saw last
        assert stores[0].changelog_position().last_offset == offsets[-1]
        if stores[0].changelog_position().purged_offset >= 0:
            return  # the provider compacted on its own (partition-owned state snapshots): the log is a tail
        assert seen == offsets and replay(log) == current(stores[0])
        # one key's records in offset order carry its versions in commit order
        shared = [r.version for r in log if r.key == "shared"]
        assert shared == list(range(60))
    finally:
        for p in providers:
            p.close()


def test_position_and_epoch(provider, state):
    assert state.changelog_position() == (None, -1, -1, -1)
    state.put("a", b"1")
    state.put("a", b"2")
    pos = state.changelog_position()
    assert pos.epoch is not None and pos.last_offset == state.read_changelog()[-1].offset
    assert state.count_changelog() == 2 and state.count_changelog(pos.last_offset) == 0
    provider.cleanup("acme", "prod", "f")
    assert state.changelog_position().epoch is None
    state.put("a", b"again")  # at once: the epoch is unique per incarnation, whatever the clock says
    assert state.changelog_position().epoch not in (None, pos.epoch)


def test_compaction_keeps_the_newest_record_per_key(state):
    if not has(state, Capability.COMPACTION):
        return
    for i in range(10):
        state.put("a", b"%d" % i)
        state.incr("n")
    state.put("b", b"x")
    state.delete("b")
    state.put("c", b"kept")
    state.delete("d") if state.get("d") else None
    before = state.read_changelog()
    pos = state.changelog_position()
    result = state.compact_changelog(pos.last_offset, tombstone_retention_s=3600)
    after = state.read_changelog()
    assert result.scanned == len(before) and result.removed == len(before) - 4 and result.tombstones_dropped == 0
    assert [(r.key, r.tombstone) for r in after] == [("a", False), ("n", False), ("b", True), ("c", False)]
    assert replay(after) == current(state) == replay(before)
    new = state.changelog_position()
    assert new.last_offset == pos.last_offset and new.compacted_offset == pos.last_offset and new.purged_offset == -1
    assert new.epoch == pos.epoch


def test_compaction_drops_old_tombstones_and_publishes_the_purge_point(state):
    if not has(state, Capability.COMPACTION):
        return
    state.put("b", b"x")
    state.delete("b")
    state.put("c", b"y")
    tomb = state.read_changelog()[1]
    assert tomb.tombstone and tomb.deleted_ms is not None and abs(tomb.deleted_ms - time.time() * 1000) < 60_000
    pos = state.changelog_position()
    assert state.compact_changelog(pos.last_offset, 3600).tombstones_dropped == 0  # young: kept
    result = state.compact_changelog(pos.last_offset, 0, now_ms=int(time.time() * 1000) + 1000)
    assert result.tombstones_dropped == 1
    assert [r.key for r in state.read_changelog()] == ["c"]
    assert state.changelog_position().purged_offset == tomb.offset
    assert state.changelog_position().last_offset == pos.last_offset


def test_compaction_leaves_records_above_the_compaction_point(state):
    if not has(state, Capability.COMPACTION):
        return
    for i in range(5):
        state.put("a", b"%d" % i)
    middle = state.read_changelog()[2].offset
    state.compact_changelog(middle, 0)
    assert [r.value for r in state.read_changelog()] == [b"3", b"4"]  # 0-2 superseded; 3, 4 above the point
    assert state.changelog_position().compacted_offset == middle


def test_a_reader_resuming_inside_a_compacted_range_converges(state):
    if not has(state, Capability.COMPACTION):
        return
    for i in range(30):
        state.put(f"k{i % 7}", b"%d" % i)
        if i % 4 == 0:
            state.incr("n", i)
    log = state.read_changelog()
    resume_at = log[len(log) // 2].offset
    applied = replay(r for r in log if r.offset <= resume_at)  # a reader that stopped half-way
    state.compact_changelog(state.changelog_position().last_offset, 3600)
    assert replay(state.read_changelog(after=resume_at), applied) == current(state)  # gaps are skipped


def test_read_all_covers_its_position(state):
    state.put("a", b"1")
    state.incr("n", 3)
    view = state.read_all()
    state.put("late", b"x")  # after the read started: not required to show, harmless if it does
    entries = {e.key: e for e in view.entries}
    assert entries["a"].value == b"1" and entries["n"].counter == 3
    assert view.position.last_offset == state.read_changelog()[1].offset


def test_replace_state_restores_exactly_and_logs_each_change(state):
    state.put("a", b"old")
    state.put("same", b"s")
    state.incr("n", 5)
    state.put("extra", b"e")
    before = state.changelog_position().last_offset
    changed = state.replace_state([StateEntry("a", b"new", "bytes", 0), StateEntry("b", b"", "bytes", 3),
                                   StateEntry("n", (7).to_bytes(8, "big", signed=True), "counter", 9),
                                   StateEntry("same", b"s", "bytes", 0)])
    assert changed == 4  # a, b, n changed; extra deleted; same untouched
    assert {k: v for k, v in state.scan()} == {"a": b"new", "b": b"", "n": (7).to_bytes(8, "big"), "same": b"s"}
    assert state.get_counter("n") == 7 and state.get_entry("a").version == 1
    assert sorted((r.key, r.tombstone) for r in state.read_changelog(after=before)) == [
        ("a", False), ("b", False), ("extra", True), ("n", False)]
    assert state.replace_state([StateEntry("a", b"new", "bytes", 0)]) == 3
    assert state.replace_state([StateEntry("a", b"new", "bytes", 0)]) == 0
    with pytest.raises(InvalidArgumentError, match="ascending"):
        state.replace_state([StateEntry("b", b"", "bytes", 0), StateEntry("a", b"", "bytes", 0)])
    assert dict(state.scan()) == {"a": b"new"}  # a refused restore wrote nothing
