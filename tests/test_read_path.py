"""The embedded read path's fast paths (LocalStore.get's result reuse, the embedded provider's
get/get_counter) return exactly what the generic paths do, never a stale result."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time

import pytest

from statekeep.errors import CorruptStateError, InvalidArgumentError
from statekeep.metadata import local, open_store
from statekeep.state import open_provider
from statekeep.testing.faults import write_raw_state


def _put_from_child(url: str, path: str, value: bytes) -> None:
    store = open_store(url)
    store.put(path, value)
    store.close()


def test_local_get_sees_every_change_including_other_processes(tmp_path):
    url = f"local://{tmp_path}"
    store = open_store(url)
    try:
        assert store.get("/a") is None
        store.put("/a", b"1")
        first = store.get("/a")
        assert first.value == b"1" and first.stat.version == 0
        assert store.get("/a") == first  # reused while unchanged
        store.put("/a", b"1")  # same bytes, new version: a new result
        again = store.get("/a")
        assert again.value == b"1" and again.stat.version == 1
        proc = multiprocessing.get_context("spawn").Process(target=_put_from_child, args=(url, "/a", b"2"))
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
        assert store.get("/a").value == b"2" and store.get("/a").stat.version == 2
        store.delete("/a")
        assert store.get("/a") is None
        big = b"x" * 100_000  # not kept by the reuse; still right
        store.put("/big", big)
        assert store.get("/big").value == big
    finally:
        store.close()


def test_local_get_created_by_self_is_per_session(tmp_path):
    url = f"local://{tmp_path}"
    one, two = open_store(url), open_store(url)
    try:
        one.put("/e", b"x", ephemeral=True)
        assert one.get("/e").stat.created_by_self
        assert not two.get("/e").stat.created_by_self
        assert one.get("/e").stat.ephemeral and two.get("/e").stat.ephemeral
    finally:
        one.close()
        two.close()


def test_embedded_get_and_get_counter(tmp_path):
    store = open_store(f"local://{tmp_path}")
    provider = open_provider("embedded", {"store": store})
    state = provider.get_state_store("t", "n", "f")
    try:
        assert state.get("k") is None and state.get_counter("k") == 0
        state.put("k", b"v")
        assert state.get("k") == b"v"
        with pytest.raises(InvalidArgumentError, match="holds bytes"):
            state.get_counter("k")
        state.incr("c", 5)
        assert state.get_counter("c") == 5 and state.get("c") == (5).to_bytes(8, "big")
        state.incr("c", -7)
        assert state.get_counter("c") == -2
        for bad in ("", 3, None):
            with pytest.raises(InvalidArgumentError):
                state.get(bad)
            with pytest.raises(InvalidArgumentError):
                state.get_counter(bad)
        state.delete("k")
        assert state.get("k") is None
        # a value no provider wrote
        write_raw_state(state, "odd", b"\0" * 8 + b"Zjunk")
        with pytest.raises(CorruptStateError):
            state.get("odd")
        with pytest.raises(CorruptStateError):
            state.get_counter("odd")
    finally:
        provider.close()
        store.close()


def _child_reads(url: str) -> None:
    try:
        store = open_store(url)  # refused if fork() had left an LMDB transaction open
        state = open_provider("embedded", {"store": store}).get_state_store("t", "n", "f")
        assert store.get("/hot").value == b"v" and state.get_counter("c") == 3 and state.get("s") == b"x"
        store.close()
    except BaseException:  # noqa: BLE001 - anything fails the child
        import traceback

        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def test_fork_waits_for_uncounted_hot_reads(tmp_path):
    """Threads hammer the uncounted hot reads while the main thread forks: each child can open
    the store (fork() never left a read transaction open), and the readers carry on."""
    url = f"local://{tmp_path}"
    store = open_store(url)
    state = open_provider("embedded", {"store": store}).get_state_store("t", "n", "f")
    store.put("/hot", b"v")
    state.incr("c", 3)
    state.put("s", b"x")
    stop, reads, errors = threading.Event(), [0], []

    def read() -> None:
        try:
            while not stop.is_set():
                assert store.get("/hot").value == b"v"
                assert state.get_counter("c") == 3 and state.get("s") == b"x"
                reads[0] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(3)]
    for t in readers:
        t.start()
    try:
        for _ in range(5):
            start = time.monotonic()
            child = multiprocessing.get_context("fork").Process(target=_child_reads, args=(url,))
            child.start()
            child.join(60)
            assert child.exitcode == 0
            assert time.monotonic() - start < local.FORK_WAIT_S  # fork() did not sit out its deadline
    finally:
        stop.set()
        for t in readers:
            t.join()
        store.close()
    assert errors == [] and reads[0] > 0
