"""The keyed-state transaction of one (batch, partition) (issue 52): the one place keys are checked and scoped,
entries encoded, state keys memoized (one bounded memo) and TTL applied, on a batch's buffer over a real store."""

from __future__ import annotations

import pytest

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.service import FunctionService
from statekeep.state.timekeeping import TimeState
from statekeep import lru
from statekeep.state import transaction
from statekeep.state.buffer import BufferedState
from statekeep.state.keygroups import KEY_GROUPS
from statekeep.state.transaction import KeyedTransaction
from statekeep.state.typed import variable


@pytest.fixture
def store(tmp_path):
    with FunctionService.open(f"local://{tmp_path}") as service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"]},
                                b"def process(input, context):\n    pass\n")
        yield service.registry.state_store("t", "n", "f")


def new(store, key=None, batch_keys=()):
    state = BufferedState(store.fetch_many, store.max_value_size, store.scan)
    return KeyedTransaction(state, lambda: key, lambda: batch_keys), state


def test_it_alone_checks_and_scopes_keys(store):
    txn, state = new(store, key="ann")
    for bad, match in ((["a", "\x00g1"], "reserved"), (["a", 3], "str"), ("ab", "not one str"), (5, "sequence")):
        with pytest.raises(InvalidArgumentError, match=match):
            txn.state_keys(bad, "get_states")
    with pytest.raises(InvalidArgumentError, match="reserved"):
        txn.put("\x00x\x00a", b"v")
    for bad in ("", 3, None):
        with pytest.raises(InvalidArgumentError, match="non-empty str"):
            txn.scoped(bad)
    with pytest.raises(InvalidArgumentError, match="NUL"):
        txn.timer_key("\x00w")
    assert txn.timer_key(None) == "ann" and txn.timer_key("bob") == "bob"
    var = variable("count", "value", int)
    assert txn.record_key(None, var) == "ann" and txn.record_key("bob", var) == "bob"
    keyless, _ = new(store)
    assert keyless.timer_key(None) == ""  # the timers of records without a key
    with pytest.raises(InvalidArgumentError, match="this record has none"):
        keyless.record_key(None, var)
    assert state.puts == {} and state.counter_deltas == {}  # nothing refused was buffered


def test_one_bounded_memo_of_state_keys(store, monkeypatch):
    monkeypatch.setattr(transaction, "MEMO_SIZE", 10)
    lru.reset()  # the process's memos, empty for this test
    txn, _ = new(store, batch_keys=[f"k{i}" for i in range(4)])
    count = variable("count", "value", int)
    seen = variable("seen", "map", int, str)
    at = txn.at("k1", count, "=")
    assert at == txn.at("k1", count, "=") and len(txn._memo("count", "=")) == 4  # the batch's, in one bulk read
    checked = []
    monkeypatch.setattr(transaction, "checked_key", lambda key, *a: checked.append(key) or key)
    next_batch, _ = new(store, batch_keys=["k1"])
    assert next_batch.at("k1", count, "=") == at and next_batch._keys is txn._keys
    assert next_batch.map_entry(at, seen, "m") == next_batch.map_entry(at, seen, "m") and len(checked) == 1
    assert checked == [at + "msm"]  # a later batch derives and checks a state key the memo holds no more
    big, _ = new(store, batch_keys=["k1"] + [f"b{i}" for i in range(11)])  # past the bound: the batch's stay
    assert set(big.entries(count, "=")) == set(big._memo("count", "=")) == {"k1", *(f"b{i}" for i in range(11))}
    monkeypatch.undo()
    monkeypatch.setattr(transaction, "MEMO_SIZE", 10)
    for i in range(30):
        txn.at(f"x{i}", count, "=")
        txn.map_entry(at, seen, f"m{i}")
        assert len(txn._memo("count", "=")) <= 10 and len(txn._memo("seen", "m")) <= 10
    assert txn.map_entry("p", seen, "m") == "pmsm"
    with pytest.raises(InvalidArgumentError, match="holds str"):
        txn.map_entry("p", seen, 3)


def test_the_batch_prefetch_reads_every_valid_entry_once_and_leaves_a_too_long_key_to_its_own_read(store):
    long_key, odd = "é" * 70, "a/b c"  # a state key over the limit only once encoded; one coded but valid
    reads: list[list[str]] = []
    state = BufferedState(lambda keys: reads.append(list(keys)) or store.fetch_many(reads[-1]), store.max_value_size)
    txn = KeyedTransaction(state, lambda: "k1", lambda: ["k1", odd, long_key, "k1", None, ""])
    count = variable("count", "value", int)
    at = txn.at(None, count, "=")
    assert len(reads) == 1 and sorted(reads[0]) == sorted([at, txn.at(odd, count, "=")])
    with pytest.raises(InvalidArgumentError, match="state variable 'count': its state key is too long"):
        txn.at(long_key, count, "=")
    assert len(reads) == 1  # nothing read again


def test_the_batchs_keys_are_read_at_its_first_plain_read_and_never_by_typed_entries_alone(store):
    store.apply_batch({"a": b"1"}, {"n": 2})
    reads: list[list[str]] = []  # what the store read (a read it refused reads nothing)

    def fetch(keys):
        found = store.fetch_many(list(keys))
        reads.append(sorted(found))
        return found

    state = BufferedState(fetch, store.max_value_size)
    txn = KeyedTransaction(state, lambda: "a", lambda: ["a", "n", "b"])
    state.prefetch_later(["a", "n", "b", "w" * 1000])  # the batch's record keys, one the store refuses
    count = variable("count", "value", int)
    assert txn.payload(txn.at(None, count, "="), state.get(txn.at(None, count, "="))) is None
    assert len(reads) == 1 and all(key.startswith("\x00v") for key in reads[0])  # typed entries only
    assert state.get_counter("n") == 2 and state.get("a") == b"1" and state.get("b") is None
    assert reads[1:] == [["a", "b", "n"]]  # at the first plain read, every valid key in one read
    with pytest.raises(InvalidArgumentError, match="too long"):
        state.get("w" * 1000)
    assert state.get("c") is None and reads[2:] == [["c"]]
    later = BufferedState(fetch, store.max_value_size)
    later.prefetch_later(["n", "x"])
    later.add_many(["n", "n"], [1, 1])  # reads nothing
    assert len(reads) == 3 and later.written() == {"n": (None, 4)} and reads[3:] == [["n", "x"]]


def test_ttl_is_applied_through_the_runs_time_state(store):
    txn, state = new(store)
    with pytest.raises(InvalidArgumentError, match="keeps no time state"):
        txn.put("a", b"v", ttl_seconds=5)
    now = [1_000_000]
    time = TimeState(state, KEY_GROUPS, range(KEY_GROUPS), clock=lambda: now[0])
    txn.keep_time(time)
    txn.put("a", "v", ttl_seconds=5)
    assert txn.incr("n", 2, ttl_seconds=5) == 2
    with pytest.raises(InvalidArgumentError, match="ttl_seconds must be"):
        txn.put("b", b"v", ttl_seconds=0)
    with pytest.raises(InvalidArgumentError, match="bytes or str"):
        txn.put("b", 3)
    time.flush()
    store.apply_batch(state.puts, state.counter_deltas)
    txn = KeyedTransaction.begin(store)
    state = txn.state
    later = TimeState(state, KEY_GROUPS, range(KEY_GROUPS), clock=lambda: now[0] + 5_000)
    txn.keep_time(later)
    assert txn.get("a") is None and txn.counter("n") == 0  # expired: absent, the counter restarts
    assert txn.incr("n", 1) == 1
    assert later.sweep() == 1  # "a" (the counter was written again)
    assert state.puts["a"] is None


def test_its_lifecycle_flushes_views_then_commits_changes_and_marker_at_once(store):
    store.apply_batch({"bytes": b"b"}, {})
    txn = KeyedTransaction.begin(store)
    assert txn.status == transaction.OPEN
    with pytest.raises(transaction.TransactionStateError, match="cannot commit when open"):
        txn.commit("0-0")
    flushed = []
    txn.view(lambda: (flushed.append("windows"), txn.state.put("w", b"window")))
    txn.view(lambda: flushed.append("time"))
    txn.put("a", b"1")
    assert txn.incr("n", 5) == 5
    assert txn.prepare(changes=True) == {"a": (b"1", None), "w": (b"window", None), "n": (None, 5)}
    assert flushed == ["windows", "time"] and txn.status == transaction.PREPARED
    with pytest.raises(transaction.TransactionStateError, match="cannot be prepared when prepared"):
        txn.prepare()
    assert store.fetch_many(["a"])["a"] == (None, None)  # nothing written before the commit
    assert txn.commit("0-0") and txn.status == transaction.COMMITTED
    assert store.fetch_many(["a", "w"]) == {"a": (b"1", None), "w": (b"window", None)} and store.get_counter("n") == 5
    again = KeyedTransaction.begin(store)
    again.put("a", b"2")
    again.prepare()
    assert not again.commit("0-0") and store.fetch_many(["a"])["a"] == (b"1", None)  # a replay: nothing written
    refused = KeyedTransaction.begin(store)
    refused.put("a", b"3")
    refused.incr_many(["bytes"], 1)  # reads nothing: the store's write refuses it, whole
    refused.prepare()
    with pytest.raises(InvalidArgumentError, match="bytes"):
        refused.commit("1-0")
    assert refused.status == transaction.FAILED and store.fetch_many(["a"])["a"] == (b"1", None)
    assert not store.has_marker("1-0")
    failing = KeyedTransaction.begin(store)
    failing.view(lambda: failing.state_key(""))  # a view's flush refusing what it holds (a window over the limit)
    with pytest.raises(InvalidArgumentError):
        failing.prepare()
    assert failing.status == transaction.FAILED


def test_state_ttl_seconds_applies_to_typed_entries_without_their_own(store):
    """``stateTtlSeconds`` (the time state's ``ttl_ms``) means the same for every kind: a typed value, list and map
    without a ``ttl`` of their own expire after it, as a plain key does; a variable's own ``ttl`` wins."""
    from statekeep.functions.executor.context import Context

    now = [1_000_000]

    def batch(work, clock):
        txn = KeyedTransaction.begin(store)
        time = TimeState(txn.state, KEY_GROUPS, range(KEY_GROUPS), ttl_ms=10_000, clock=lambda: clock)
        txn.view(time.flush)
        context = Context("t", "n", "f", txn)
        context.keep_time(time)
        result = work(context)
        time.sweep()
        txn.prepare()
        txn.commit()
        return result

    def write(context):
        context.put_state("plain", b"v")
        context.value_state("last", int).of("ann").update(1)
        context.list_state("log", int).of("ann").append(1)
        context.map_state("tags", str, int).of("ann").put("a", 1)
        context.value_state("long", int, ttl=60).of("ann").update(2)

    def read(context):
        return (context.get_state("plain"), context.value_state("last", int).of("ann").get(),
                context.list_state("log", int).of("ann").get(), context.map_state("tags", str, int).of("ann").items(),
                context.value_state("long", int, ttl=60).of("ann").get())

    batch(write, now[0])
    assert batch(read, now[0] + 9_999) == (b"v", 1, [1], [("a", 1)], 2)
    assert batch(read, now[0] + 10_000) == (None, None, [], [], 2)
    assert [k for k, _ in store.scan("\x00v") if "long" not in k] == []  # deleted with that batch, not only hidden


def test_one_reset_empties_every_memo_of_the_process(store):
    """Every module-level memo is made by statekeep.lru (a hot-path dict, a BoundedLRU, a cached function): one
    reset empties them all, and what they memoized is computed again, the same."""
    from statekeep.functions.config import loader
    from statekeep.metadata import types
    from statekeep.state import catalog, keys

    txn, _ = new(store, key="ann", batch_keys=["ann"])
    made = (types.validate_path("/a/b"), keys.encode_key("plain"), txn.at(None, variable("v", "value", int), "="),
            catalog._function_path("/r", "t", "n", "f"))
    entries = lru.BoundedLRU(4)
    entries.put("x", 1)
    assert types._valid_paths and keys._segments and transaction._KEYS and catalog._function_path.cache_info().currsize
    lru.reset()
    assert not types._valid_paths and not keys._segments and not transaction._KEYS and not loader._modules
    assert catalog._function_path.cache_info().currsize == 0 and entries.get("x") is None
    txn, _ = new(store, key="ann", batch_keys=["ann"])
    assert (types.validate_path("/a/b"), keys.encode_key("plain"), txn.at(None, variable("v", "value", int), "="),
            catalog._function_path("/r", "t", "n", "f")) == made
