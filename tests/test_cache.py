"""MetadataCache on every backend: typed values, served from memory, coherent through notifications
(also for changes made by other processes), read-modify-update with bounded retries."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import dataclass

import pytest

from statekeep.cache import JsonSerde, MetadataCache
from statekeep.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    InvalidPathError,
    NotFoundError,
)
from statekeep.testing import wait_for
from support.coordination import TIMEOUT, WORKER, multi_process


@dataclass(frozen=True)
class Policy:
    name: str
    limit: int


@pytest.fixture
def cache_for():
    made: list[MetadataCache] = []

    def make(store, serde=None, **options) -> MetadataCache:
        made.append(MetadataCache(store, serde if serde is not None else JsonSerde(Policy), **options))
        return made[-1]

    yield make
    for c in made:
        c.close()


def counting(store):
    """Count the store reads the cache makes."""
    calls = []
    real = store.get

    def get(path):
        calls.append(path)
        return real(path)

    store.get = get
    return calls


class TestReads:
    def test_create_get_served_from_memory(self, store, cache_for):
        cache = cache_for(store)
        reads = counting(store)
        assert cache.get("/p") is None
        cache.create("/p", Policy("a", 1))
        assert cache.get("/p") == Policy("a", 1)
        assert json.loads(store.get("/p").value) == {"name": "a", "limit": 1}  # inspectable JSON
        reads.clear()
        # once the create's own notification has been handled, the value stays in memory
        assert wait_for(lambda: cache.get("/p") == Policy("a", 1) and not reads.clear() and
                        [cache.get("/p") for _ in range(100)] and not reads, timeout=TIMEOUT)
        assert cache.get_entry("/p").stat.version == 0

    def test_create_existing_raises(self, store, cache_for):
        cache = cache_for(store)
        cache.create("/p", Policy("a", 1))
        with pytest.raises(AlreadyExistsError):
            cache.create("/p", Policy("b", 2))
        assert cache.get("/p") == Policy("a", 1)

    def test_delete(self, store, cache_for):
        cache = cache_for(store)
        cache.create("/p", Policy("a", 1))
        cache.delete("/p")
        assert cache.get("/p") is None and store.get("/p") is None
        with pytest.raises(NotFoundError):
            cache.delete("/p")

    def test_invalidate(self, open_url, cache_for):
        store = open_url()
        cache = cache_for(store)
        cache.create("/p", Policy("a", 1))
        cache.invalidate("/p")
        cache.invalidate_all()
        reads = counting(store)
        assert cache.get("/p") == Policy("a", 1) and reads == ["/p"]

    def test_bad_input(self, store, cache_for):
        cache = cache_for(store)
        for path in ("", "rel", "/a//b", 5, ["/p"]):
            with pytest.raises(InvalidPathError):
                cache.get(path)
            with pytest.raises(InvalidPathError):
                cache.create(path, Policy("a", 1))
        with pytest.raises(InvalidArgumentError):
            cache.create("/p", {"name": "a"})  # not a Policy
        with pytest.raises(InvalidArgumentError):
            cache.read_modify_update_or_create("/p", lambda p: None)
        with pytest.raises(InvalidArgumentError):
            cache.read_modify_update_or_create("/p", "not callable")
        with pytest.raises(InvalidArgumentError):
            MetadataCache(store, serde=object())
        with pytest.raises(InvalidArgumentError):
            MetadataCache(store, max_retries=-1)
        assert store.get_children("/") == []
        store.put("/garbage", b"\xff not json")
        with pytest.raises(InvalidArgumentError):
            cache.get("/garbage")

    def test_pluggable_serde(self, store, cache_for):
        class Utf8:
            def serialize(self, value: str) -> bytes:
                return value.encode()

            def deserialize(self, data: bytes) -> str:
                return data.decode()

        cache = cache_for(store, Utf8())
        cache.create("/s", "hello")
        assert store.get("/s").value == b"hello"
        assert cache.read_modify_update("/s", str.upper) == "HELLO"


class TestCoherence:
    def test_other_clients_changes(self, open_url, cache_for):
        store, other = open_url(), open_url()
        cache = cache_for(store)
        assert cache.get("/p") is None  # caches the absence
        other.put("/p", b'{"name":"x","limit":1}')
        assert wait_for(lambda: cache.get("/p") == Policy("x", 1), timeout=TIMEOUT)
        other.put("/p", b'{"name":"x","limit":2}')
        assert wait_for(lambda: cache.get("/p") == Policy("x", 2), timeout=TIMEOUT)
        other.delete("/p")
        assert wait_for(lambda: cache.get("/p") is None, timeout=TIMEOUT)

    def test_other_process_changes(self, store_url, open_url, cache_for):
        if not multi_process(store_url):
            pytest.skip("memory:// lives in one process; test_other_clients_changes covers it")
        cache = cache_for(open_url())
        cache.create("/p", Policy("a", 1))
        assert cache.get("/p") == Policy("a", 1)
        subprocess.run([sys.executable, str(WORKER), "put", store_url, "/p", '{"name":"b","limit":7}'],
                       check=True, timeout=TIMEOUT)
        assert wait_for(lambda: cache.get("/p") == Policy("b", 7), timeout=TIMEOUT)


class TestReadModifyUpdate:
    def test_update_and_create(self, store, cache_for):
        cache = cache_for(store)
        with pytest.raises(NotFoundError):
            cache.read_modify_update("/p", lambda p: p)

        def bump(p):
            return Policy("p", 0) if p is None else Policy(p.name, p.limit + 1)

        assert cache.read_modify_update_or_create("/p", bump) == Policy("p", 0)
        assert cache.read_modify_update_or_create("/p", bump) == Policy("p", 1)
        assert cache.read_modify_update("/p", bump) == Policy("p", 2)
        assert store.get("/p").stat.version == 2

    def test_conflict_is_retried_and_counted(self, open_url, cache_for):
        store, other = open_url(), open_url()
        cache = cache_for(store)
        cache.create("/p", Policy("p", 0))
        seen = []

        def fn(p):
            seen.append(p.limit)
            if len(seen) == 1:  # someone else writes between our read and our write
                other.put("/p", b'{"name":"p","limit":10}')
            return Policy(p.name, p.limit + 1)

        assert cache.read_modify_update("/p", fn) == Policy("p", 11)
        assert seen == [0, 10] and cache.conflicts == 1

    def test_bounded_retries(self, open_url, cache_for):
        store, other = open_url(), open_url()
        cache = cache_for(store, max_retries=2)
        cache.create("/p", Policy("p", 0))
        calls = []

        def always_conflicting(p):
            calls.append(p)
            other.put("/p", b'{"name":"p","limit":99}')
            return Policy("p", -1)

        with pytest.raises(BadVersionError):
            cache.read_modify_update("/p", always_conflicting)
        assert len(calls) == 3 and cache.conflicts == 3
        assert json.loads(store.get("/p").value)["limit"] == 99  # ours never overwrote theirs

    def test_fn_mutating_its_argument_cannot_corrupt_the_cache(self, store, cache_for):
        cache = cache_for(store, JsonSerde(dict))
        cache.create("/d", {"n": 1})

        def mutate_then_fail(d):
            d["n"] = 666
            raise RuntimeError("fn failed")

        with pytest.raises(RuntimeError):
            cache.read_modify_update("/d", mutate_then_fail)
        assert cache.get("/d") == {"n": 1}

    def test_concurrent_increments_are_exact(self, open_url, cache_for):
        caches = [cache_for(open_url(), JsonSerde(int), max_retries=1000) for _ in range(4)]
        caches[0].create("/n", 0)

        def run(cache):
            for _ in range(25):
                cache.read_modify_update("/n", lambda n: n + 1)

        threads = [threading.Thread(target=run, args=(c,)) for c in caches]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert wait_for(lambda: caches[0].get("/n") == 100, timeout=TIMEOUT)
        print(f"\nconflicts: {sum(c.conflicts for c in caches)}")
