"""The state store contract (PIP-312 + changelog + batches) for a state provider over a store: needs the
fixture ``provider`` (:mod:`statekeep.testing.contract`). statekeep runs it for ``metadata`` over
every metadata backend (memory, local, zk, etcd), ``embedded`` on local and ``partitioned`` on a file
URL and S3. Where a provider declares a capability absent, the suite checks it refuses it with
:class:`UnsupportedCapabilityError` and writes nothing."""

from __future__ import annotations

import struct

import pytest

from statekeep.errors import (AlreadyExistsError, BadVersionError, CounterOverflowError, InvalidArgumentError,
                              NotFoundError, UnsupportedCapabilityError, ValueTooLargeError)
from statekeep.state import (COUNTER_MAX, COUNTER_MIN, StateStore, open_provider)
from statekeep.state.base import Capability
from statekeep.testing import in_threads
from statekeep.testing.contract.plugin import provider_config

KEYS = ["a", "a/b", "a.b", "a b", ".", "..", "/", "~", "!", "a!", "a~", "é", "日本", "ключ", "\x00x", "\x7f",
        "Z", "z", "0", "a" * 200, "mixed/Case.1~!é", "%2F", "emoji😀"]


@pytest.fixture
def state(provider) -> StateStore:
    return provider.get_state_store("acme", "prod", "wordcount")


def changelog(state):
    return state.read_changelog()


def has(state, capability: Capability) -> bool:
    """Whether ``state`` declares ``capability``; where it does not, checks it is refused: each call
    that needs it raises :class:`UnsupportedCapabilityError` naming it, and nothing is written."""
    if capability in state.capabilities:
        return True
    before = (list(state.scan_entries()), state.changelog_position())
    calls = {Capability.MARKERS: [lambda: state.has_marker("m"), lambda: state.apply_batch({"k": b"v"}, {}, "m")],
             Capability.COMPACTION: [lambda: state.compact_changelog(0, 0)],
             Capability.CHANGELOG_READ: [state.read_changelog]}[capability]
    for call in calls:
        with pytest.raises(UnsupportedCapabilityError, match=capability.value) as raised:
            call()
        assert raised.value.capability == capability.value and raised.value.provider
    assert (list(state.scan_entries()), state.changelog_position()) == before
    return False


def test_capabilities_are_declared_alike_and_absent_ones_refused(provider, state):
    assert state.capabilities == type(provider).capabilities and state.capabilities <= set(Capability)
    for capability in (Capability.MARKERS, Capability.COMPACTION, Capability.CHANGELOG_READ):
        has(state, capability)
    # every store is a task of the one task interface: per-key stores the one-partition case
    assert state.task(0, 0, 1).apply_batch({"t": b"1"}, {"c": 2}, marker="0-0") is True
    again = state.task(0, 0, 1)
    assert again.has_marker("0-0") and again.apply_batch({"t": b"2"}, {}, marker="0-0") is False  # applied
    assert state.get("t") == b"1" and state.get_counter("c") == 2
    assert state.changelog_partitions() >= 1


def utf8_order(keys):
    return sorted(keys, key=lambda k: k.encode("utf-8"))


def test_put_get_delete_and_versions(state):
    assert state.get("k") is None and state.get_entry("k") is None
    assert state.put("k", b"v1") == 0
    assert state.put("k", b"v2") == 1
    entry = state.get_entry("k")
    assert (entry.key, entry.value, entry.kind, entry.version) == ("k", b"v2", "bytes", 1)
    assert state.put("empty", b"") == 0 and state.get("empty") == b""
    assert state.delete("k") is True
    assert state.get("k") is None
    assert state.delete("k") is False
    assert state.put("k", b"again") == 0  # a re-created key starts over


def test_arbitrary_keys_scan_in_order(state):
    for i, key in enumerate(KEYS):
        state.put(key, f"v{i}".encode())
    assert [k for k, _ in state.scan()] == utf8_order(KEYS)
    assert dict(state.scan()) == {k: f"v{i}".encode() for i, k in enumerate(KEYS)}
    assert [k for k, _ in state.scan(prefix="a")] == utf8_order(k for k in KEYS if k.startswith("a"))
    assert [k for k, _ in state.scan(prefix="a/")] == ["a/b"]
    ordered = utf8_order(KEYS)
    assert [k for k, _ in state.scan(start_after=ordered[4], limit=3)] == ordered[5:8]
    assert [k for k, _ in state.scan(prefix="a", start_after="a!")] == utf8_order(
        k for k in KEYS if k.startswith("a") and k.encode() > b"a!")
    assert list(state.scan(limit=0)) == []
    assert [k for k, _ in state.scan(start_after="zzz")] == [k for k in ordered if k.encode() > b"zzz"]


def test_paging_through_scan_visits_every_key_once(state):
    keys = [f"user/{i:03d}" for i in range(25)]
    for key in keys:
        state.put(key, b"x")
    seen, after = [], None
    while True:
        page = [k for k, _ in state.scan(prefix="user/", start_after=after, limit=7)]
        if not page:
            break
        seen += page
        after = page[-1]
    assert seen == keys


def test_counters(state):
    assert state.get_counter("c") == 0
    assert state.incr("c") == 1
    assert state.incr("c", 41) == 42
    assert state.incr("c", -50) == -8
    assert state.get_counter("c") == -8
    assert state.get("c") == struct.pack(">q", -8)  # PIP-312: 8-byte big-endian signed
    entry = state.get_entry("c")
    assert entry.kind == "counter" and entry.counter == -8 and entry.version == 2
    assert state.set_counter("c", 100) == 3 and state.get_counter("c") == 100
    state.put("c", b"now bytes")
    assert state.get_entry("c").kind == "bytes"


def test_counter_never_wraps(state):
    state.set_counter("max", COUNTER_MAX)
    before = len(changelog(state))
    with pytest.raises(CounterOverflowError):
        state.incr("max")
    state.set_counter("min", COUNTER_MIN)
    with pytest.raises(CounterOverflowError):
        state.incr("min", -1)
    assert state.get_counter("max") == COUNTER_MAX and state.get_counter("min") == COUNTER_MIN
    assert len(changelog(state)) == before + 1  # only set_counter("min") wrote
    assert issubclass(CounterOverflowError, InvalidArgumentError)


def test_counter_and_bytes_do_not_mix(state):
    state.put("b", b"12345678")
    with pytest.raises(InvalidArgumentError, match="not a counter"):
        state.incr("b")
    with pytest.raises(InvalidArgumentError, match="not a counter"):
        state.get_counter("b")
    assert state.get("b") == b"12345678"


BAD_KEYS = [None, 1, b"k", "", "\ud800", "x" * 241, "/" * 81]


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_bad_keys_write_nothing(state, key):
    for call in (lambda: state.put(key, b"v"), lambda: state.get(key), lambda: state.incr(key),
                 lambda: state.delete(key), lambda: state.set_counter(key, 1),
                 lambda: state.apply_batch({key: b"v"}, {}), lambda: state.apply_batch({}, {key: 1})):
        with pytest.raises(InvalidArgumentError):
            call()
    assert list(state.scan()) == [] and changelog(state) == []


@pytest.mark.parametrize("value", ["text", 1, None, [1], bytearray(b"ok")], ids=repr)
def test_bad_values_write_nothing(state, value):
    if isinstance(value, bytearray):  # bytes-like is accepted
        state.put("k", value)
        assert state.get("k") == b"ok"
        return
    with pytest.raises(InvalidArgumentError):
        state.put("k", value)
    with pytest.raises(InvalidArgumentError):
        state.apply_batch({"k": value} if value is not None else {"k": "x"}, {})
    assert state.get("k") is None and changelog(state) == []


def test_oversized_value_refused(state):
    limit = state.max_value_size
    state.put("fits", b"x" * limit)
    assert len(state.get("fits")) == limit
    with pytest.raises(ValueTooLargeError):
        state.put("big", b"x" * (limit + 1))
    with pytest.raises(ValueTooLargeError):
        state.apply_batch({"big": b"x" * (limit + 1)}, {})
    assert state.get("big") is None and len(changelog(state)) == 1


@pytest.mark.parametrize("amount", [True, 1.0, "1", None, 1 << 63, -(1 << 63) - 1], ids=repr)
def test_bad_incr_amounts_write_nothing(state, amount):
    with pytest.raises(InvalidArgumentError):
        state.incr("c", amount)
    with pytest.raises(InvalidArgumentError):
        state.apply_batch({}, {"c": amount})
    assert state.get("c") is None and changelog(state) == []


def test_expected_versions(state):
    assert state.put("k", b"a", expected_version=-1) == 0
    with pytest.raises(AlreadyExistsError):
        state.put("k", b"b", expected_version=-1)
    with pytest.raises(BadVersionError):
        state.put("k", b"b", expected_version=5)
    assert state.put("k", b"b", expected_version=0) == 1
    with pytest.raises(NotFoundError):
        state.put("absent", b"b", expected_version=0)
    with pytest.raises(BadVersionError):
        state.delete("k", expected_version=0)
    with pytest.raises(NotFoundError):
        state.delete("absent", expected_version=0)
    with pytest.raises(InvalidArgumentError):
        state.put("k", b"c", expected_version="1")
    assert state.get_entry("k").value == b"b"
    assert state.delete("k", expected_version=1) is True
    assert len(changelog(state)) == 3


def test_every_mutation_appends_a_changelog_record(state):
    state.put("a", b"1")
    state.incr("n", 5)
    state.put("a", b"2")
    state.delete("a")
    state.delete("a")  # absent: no change, no record
    state.set_counter("n", 9)
    log = changelog(state)
    assert [(r.key, r.kind, r.value, r.version, r.tombstone) for r in log] == [
        ("a", "bytes", b"1", 0, False),
        ("n", "counter", struct.pack(">q", 5), 0, False),
        ("a", "bytes", b"2", 1, False),
        ("a", None, None, 1, True),
        ("n", "counter", struct.pack(">q", 9), 1, False),
    ]
    offsets = [r.offset for r in log]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert [r.key for r in state.read_changelog(after=offsets[2])] == ["a", "n"]


def test_apply_batch_is_atomic_and_once_per_marker(state):
    if not has(state, Capability.MARKERS):
        return
    state.put("gone", b"x")
    state.incr("n", 10)
    state.put("reset", b"bytes")
    assert state.apply_batch({"a": b"1", "gone": None, "reset": None, "never": None},
                             {"n": 5, "reset": 3, "new": -2}, marker="batch-1-0") is True
    assert dict(state.fetch_many(["a", "gone", "n", "reset", "new", "never"])) == {
        "a": (b"1", None), "gone": (None, None), "n": (struct.pack(">q", 15), 15),
        "reset": (struct.pack(">q", 3), 3), "new": (struct.pack(">q", -2), -2), "never": (None, None)}
    for key in ("a", "gone", "n", "never"):  # one key at a time (a batch's first read of it): the same answers
        assert state.fetch_many([key]) == {key: state.fetch_many(["a", "gone", "n", "never"])[key]}
    assert state.has_marker("batch-1-0") and not state.has_marker("batch-2-0")
    records_before = len(changelog(state))
    # a replay of the same batch writes nothing
    assert state.apply_batch({"a": b"other"}, {"n": 100}, marker="batch-1-0") is False
    assert state.get("a") == b"1" and state.get_counter("n") == 15 and len(changelog(state)) == records_before
    # one record per changed key, in the same write ("never" was absent: no record)
    assert sorted(r.key for r in changelog(state)[-5:]) == ["a", "gone", "n", "new", "reset"]
    assert state.get_many(["a", "n", "missing"]) == {"a": b"1", "n": struct.pack(">q", 15)}
    assert state.apply_batch({}, {"n": 1}) is True and state.apply_batch({}, {"n": 1}) is True  # no marker
    assert state.get_counter("n") == 17


def test_failing_batch_writes_nothing(state):
    state.put("bytes", b"b")
    state.set_counter("max", COUNTER_MAX)
    before = len(changelog(state))
    marker = "m" if has(state, Capability.MARKERS) else None
    with pytest.raises(CounterOverflowError):
        state.apply_batch({"a": b"1"}, {"max": 1}, marker=marker)
    with pytest.raises(InvalidArgumentError):
        state.apply_batch({"a": b"1"}, {"bytes": 1}, marker=marker)
    assert state.get("a") is None and not (marker and state.has_marker("m")) and len(changelog(state)) == before
    with pytest.raises(InvalidArgumentError):
        state.apply_batch([("a", b"1")], {})


def test_batch_of_any_size(state):
    """A batch larger than one atomic write of the backend (etcd: 128 operations, ZooKeeper: 1 MB)
    commits exactly once: keys, deletes, counters, one changelog record per changed key, the marker."""
    limits = state.batch_limits
    n = min(3 * limits.max_keys + 7, 2_500)
    state.put("gone", b"x")
    state.incr("c0", 5)
    puts = {f"k{i:05d}": bytes([i % 251]) * 40 for i in range(n)}
    puts["gone"] = None
    counters = {f"c{i}": i + 1 for i in range(n)}
    before = len(changelog(state))
    markers = has(state, Capability.MARKERS)
    assert state.apply_batch(puts, counters, marker="big" if markers else None) is True
    if markers:
        assert state.has_marker("big")
        assert state.apply_batch(puts, counters, marker="big") is False  # a replay writes nothing
    assert state.get("gone") is None and state.get("k00007") == bytes([7]) * 40
    assert state.get_counter("c0") == 6 and state.get_counter(f"c{n - 1}") == n
    assert len(list(state.scan(prefix="k"))) == n and len(list(state.scan(prefix="c"))) == n
    assert len(changelog(state)) == before + 2 * n + 1
    # large values: more bytes than one write carries
    per = min(state.max_value_size, 200_000)
    count = min(max(3, 2 * limits.max_bytes // per + 1), 40)
    big = {f"y{i}": bytes([i]) * per for i in range(count)}
    assert state.apply_batch(big, {}, marker="bytes" if markers else None) is True
    assert [v for _, v in state.scan(prefix="y")] == [big[k] for k in sorted(big)]


def test_large_batch_that_would_fail_writes_nothing(state):
    state.put("bytes", b"b")
    n = min(2 * state.batch_limits.max_keys + 3, 2_500)
    counters = {f"c{i}": 1 for i in range(n)}
    counters["bytes"] = 1
    before = len(changelog(state))
    marker = "m" if has(state, Capability.MARKERS) else None
    with pytest.raises(InvalidArgumentError):
        state.apply_batch({}, counters, marker=marker)
    assert not (marker and state.has_marker("m")) and state.get_counter("c1") == 0 and len(changelog(state)) == before


def test_cleanup_removes_all_state(provider, state):
    state.put("a", b"1")
    state.incr("n")
    markers = has(state, Capability.MARKERS)
    state.apply_batch({"b": b"2"}, {}, marker="m" if markers else None)
    other = provider.get_state_store("acme", "prod", "other")
    other.put("a", b"keep")
    provider.cleanup("acme", "prod", "wordcount")
    again = provider.get_state_store("acme", "prod", "wordcount")
    assert list(again.scan()) == [] and again.get("a") is None and not (markers and again.has_marker("m"))
    assert again.read_changelog() == []
    assert other.get("a") == b"keep"
    provider.cleanup("acme", "prod", "never-existed")  # no-op


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a b", "x" * 65, None, "é"], ids=repr)
def test_function_names_validated(provider, name):
    with pytest.raises(InvalidArgumentError):
        provider.get_state_store("acme", "prod", name)
    with pytest.raises(InvalidArgumentError):
        provider.get_state_store(name, "prod", "f")
    with pytest.raises(InvalidArgumentError):
        provider.cleanup("acme", name, "f")


def test_functions_are_isolated(provider):
    a = provider.get_state_store("t", "n", "a")
    b = provider.get_state_store("t", "n", "b")
    a.put("k", b"a")
    assert b.get("k") is None and list(b.scan()) == []


def test_concurrent_incr_from_threads_is_exact(target):
    providers = [open_provider(target[0], provider_config(target)) for _ in range(4)]
    try:
        stores = [p.get_state_store("t", "n", "f") for p in providers]

        def work(s):
            for _ in range(25):
                s.incr("hits")

        in_threads(work, [(s,) for s in stores])
        assert stores[0].get_counter("hits") == 100
        log = stores[0].read_changelog()  # all 100, or the newest where the provider compacts on its own
        assert [r.version for r in log] == list(range(100 - len(log), 100))
        assert len(log) == 100 or stores[0].changelog_position().purged_offset >= 0
    finally:
        for p in providers:
            p.close()
