"""Flink's StateHandleStore contract (docs/ARCHITECTURE.md, after Flink) on every metadata backend.

Nothing here names a backend: the ``store_url`` fixture runs each test on memory, local, ZooKeeper and etcd.
"""

from __future__ import annotations

import io
import json

import pytest

from support.handles import LostAckStore, Unaware, blob_urls, snapshot
from statekeep.coordination import CoordinationService
from statekeep.errors import (
    AlreadyExistsError,
    BadVersionError,
    CorruptStateError,
    InvalidArgumentError,
    LeadershipLostError,
    NotFoundError,
    PossibleInconsistentStateError,
    StatekeepError,
)
from statekeep.handles import StateHandleStore, collect_garbage
from statekeep.testing import wait_for

ROOT = "/jobs/j1/state"
ELECTION = "/jobs/j1/leader"


@pytest.fixture
def blobs(tmp_path) -> str:
    return f"file://{tmp_path}/blobs"


@pytest.fixture
def handles(store, blobs) -> StateHandleStore:
    return StateHandleStore(store, ROOT, blobs, lock_identity="me")


@pytest.fixture
def other(open_url, blobs) -> StateHandleStore:
    """Another holder, in another session."""
    return StateHandleStore(open_url(), ROOT, blobs, lock_identity="other")


class TestAddAndLock:
    def test_add_then_get(self, handles):
        added = handles.add_and_lock("a", b"state-a", attributes={"offset": 7})
        assert added.version == 0 and added.size == 7 and added.attributes == {"offset": 7}
        got = handles.get_and_lock("a")
        assert got.read_bytes() == b"state-a" and got.sha256 == added.sha256 and got.attributes == {"offset": 7}
        assert handles.exists("a") == 0

    def test_add_existing_raises_and_keeps_the_first(self, handles):
        handles.add_and_lock("a", b"first")
        before = blob_urls(handles)
        with pytest.raises(AlreadyExistsError):
            handles.add_and_lock("a", b"second")
        assert handles.get_and_lock("a").read_bytes() == b"first"
        assert blob_urls(handles) == before  # the refused write's blob was deleted

    def test_state_from_file_and_from_chunks(self, handles):
        handles.add_and_lock("f", io.BytesIO(b"x" * 100_000))
        handles.add_and_lock("c", iter([b"ab", bytearray(b"cd"), memoryview(b"ef")]))
        handles.add_and_lock("empty", b"")
        assert handles.get_and_lock("f").read_bytes() == b"x" * 100_000
        assert handles.get_and_lock("c").read_bytes() == b"abcdef"
        assert handles.get_and_lock("empty").read_bytes() == b""

    def test_metadata_store_holds_only_the_handle(self, open_url, blobs):
        small = open_url(max_value_size=4096)  # far smaller than the state
        handles = StateHandleStore(small, ROOT, blobs, chunk_size=1 << 16)
        state = bytes(range(256)) * 8192  # 2 MiB
        handles.add_and_lock("big", state)
        raw = small.get(f"{ROOT}/handles/big").value
        assert len(raw) < 1024 and json.loads(raw)["size"] == len(state)
        assert handles.get_and_lock("big").read_bytes() == state

    def test_bad_keys_and_states_write_nothing(self, handles):
        for key in ["", "a/b", "..", "x\x00y", 3]:
            with pytest.raises(InvalidArgumentError):
                handles.add_and_lock(key, b"x")
        for state in ["text", 42, [1, 2]]:
            with pytest.raises(InvalidArgumentError):
                handles.add_and_lock("k", state)
        with pytest.raises(InvalidArgumentError):
            handles.add_and_lock("k", b"x", attributes={"x": object()})
        assert handles.get_all_handles() == [] and blob_urls(handles) == set()


class TestReplace:
    def test_replace_checks_version(self, handles):
        with pytest.raises(NotFoundError):
            handles.replace("a", 0, b"x")
        handles.add_and_lock("a", b"v0")
        with pytest.raises(BadVersionError):
            handles.replace("a", 5, b"x")
        replaced = handles.replace("a", 0, b"v1", attributes={"n": 1})
        assert replaced.version == 1 and handles.exists("a") == 1
        assert handles.get_and_lock("a").read_bytes() == b"v1"
        with pytest.raises(BadVersionError):
            handles.replace("a", 0, b"stale")
        assert handles.get_and_lock("a").read_bytes() == b"v1"
        assert len(blob_urls(handles)) == 1  # old blob and refused blobs deleted

    def test_old_blob_kept_while_another_holder_reads_it(self, handles, other):
        handles.add_and_lock("a", b"old")
        reading = other.get_and_lock("a")
        handles.replace("a", 0, b"new")
        assert reading.read_bytes() == b"old"  # still there for the holder that locked it
        assert len(blob_urls(handles)) == 2
        report = collect_garbage(handles.store, ROOT, handles.blobs, grace_seconds=0)
        assert [b.url for b in report.orphans] == [reading.blob_url]  # ... and gc knows it is unreferenced

    def test_replace_never_overwrites_a_blob(self, handles):
        first = handles.add_and_lock("a", b"same")
        second = handles.replace("a", 0, b"same")
        assert first.blob_url != second.blob_url and first.sha256 == second.sha256


class TestLocks:
    def test_get_all(self, handles, other):
        for key in ["b", "a", "c"]:
            handles.add_and_lock(key, key.encode())
        assert handles.get_all_handles() == ["a", "b", "c"]
        got = other.get_all_and_lock()
        assert [h.key for h in got] == ["a", "b", "c"] and [h.read_bytes() for h in got] == [b"a", b"b", b"c"]
        for key in "abc":
            assert other.store.get_children(f"{ROOT}/handles/{key}/locks") == ["me", "other"]

    def test_get_absent_raises(self, handles):
        with pytest.raises(NotFoundError):
            handles.get_and_lock("nope")
        assert handles.exists("nope") is None

    def test_release_and_release_all(self, handles):
        handles.add_and_lock("a", b"1")
        handles.add_and_lock("b", b"2")
        handles.release("a")
        handles.release("a")  # idempotent
        assert handles.store.get_children(f"{ROOT}/handles/a/locks") == []
        handles.release_all()
        assert handles.store.get_children(f"{ROOT}/handles/b/locks") == []

    def test_locks_of_an_ended_session_vanish(self, handles, open_url, blobs):
        handles.add_and_lock("a", b"x")
        reader_store = open_url()
        StateHandleStore(reader_store, ROOT, blobs, lock_identity="reader").get_and_lock("a")
        assert handles.release_and_try_remove("a") is False  # the reader holds it
        reader_store.close()  # the reader's process ends: its ephemeral lock goes with its session
        assert wait_for(lambda: handles.store.get_children(f"{ROOT}/handles/a/locks") == [])
        assert handles.release_and_try_remove("a") is True


class TestRemove:
    def test_remove_only_when_nobody_else_holds_it(self, handles, other):
        added = handles.add_and_lock("a", b"x")
        other.get_and_lock("a")
        assert handles.release_and_try_remove("a") is False
        assert handles.exists("a") == 0 and handles.blobs.exists(added.blob_url)
        assert handles.store.get_children(f"{ROOT}/handles/a/locks") == ["other"]  # ours released
        other.release("a")
        assert handles.release_and_try_remove("a") is True
        assert handles.exists("a") is None and not handles.blobs.exists(added.blob_url)
        assert handles.release_and_try_remove("a") is True  # absent counts as gone

    def test_clear_entries(self, handles, other):
        kept = handles.add_and_lock("locked", b"1")
        handles.add_and_lock("free", b"2")
        handles.add_and_lock("free2", b"3")
        other.get_and_lock("locked")
        handles.clear_entries()
        assert handles.get_all_handles() == []
        assert blob_urls(handles) == {kept.blob_url}  # a holder may still read it; gc reclaims it
        report = collect_garbage(handles.store, ROOT, handles.blobs, grace_seconds=0, delete=True)
        assert report.deleted == [kept.blob_url] and blob_urls(handles) == set()


class TestIntegrity:
    def test_corrupt_and_missing_blobs(self, handles):
        added = handles.add_and_lock("a", b"x" * 1000)
        path = added.blob_url.removeprefix("file://")
        with open(path, "r+b") as f:
            f.seek(500)
            f.write(b"y")
        with pytest.raises(CorruptStateError, match="sha256"):
            handles.get_and_lock("a").read_bytes()
        with open(path, "r+b") as f:
            f.truncate(10)
        with pytest.raises(CorruptStateError, match="truncated"):
            handles.get_and_lock("a").read_bytes()
        import os

        os.unlink(path)
        with pytest.raises(CorruptStateError, match="missing"):
            handles.get_and_lock("a").read_bytes()


class TestFencing:
    """A deposed leader (its session expired where the backend has sessions, else its lock deleted by an
    administrator) that has not noticed (``Unaware``) tries every mutation: the store refuses them all."""

    TRIALS = 3

    def _depose(self, store, admin, lock) -> None:
        if "sessions" in store.capabilities:
            store.expire_session()
        else:
            admin.delete(lock.path)

    def _attempts(self, deposed: StateHandleStore) -> None:
        attempts = [
            lambda: deposed.add_and_lock("new-by-deposed", b"deposed"),
            lambda: deposed.replace("shared", deposed.exists("shared"), b"deposed"),
            lambda: deposed.release_and_try_remove("shared"),
            lambda: deposed.clear_entries(),
        ]
        for attempt in attempts:
            with pytest.raises(LeadershipLostError) as info:
                attempt()
            assert isinstance(info.value.__cause__, StatekeepError)

    def test_deposed_leader_writes_are_refused(self, open_url, blobs):
        admin = open_url()
        nodes = [open_url(), open_url()]
        coords = [CoordinationService(s) for s in nodes]
        try:
            lock = coords[0].become_leader(ELECTION, b"n0").result(30)
            leader = StateHandleStore(nodes[0], ROOT, blobs, lock_identity="n0", leadership=Unaware(lock))
            leader.add_and_lock("shared", b"v0")
            leader.release("shared")
            idx = 0
            for trial in range(self.TRIALS):
                self._depose(nodes[idx], admin, lock)
                expected = snapshot(leader)
                blobs_before = blob_urls(leader)
                self._attempts(leader)  # no leader at all yet
                idx = 1 - idx
                lock = coords[idx].become_leader(ELECTION, f"n{idx}".encode()).result(30)
                successor = StateHandleStore(nodes[idx], ROOT, blobs, lock_identity=f"n{idx}",
                                             leadership=Unaware(lock))
                self._attempts(leader)  # a successor has claimed the root
                assert snapshot(successor) == expected and blob_urls(leader) == blobs_before
                successor.replace("shared", successor.exists("shared"), f"trial {trial}".encode())
                successor.release("shared")
                leader = successor
            assert snapshot(leader)["shared"][1] == f"trial {self.TRIALS - 1}".encode()
        finally:
            for coord in coords:
                coord.close()


class TestAmbiguousWrites:
    """The acknowledgement of the metadata write is lost: PossibleInconsistentStateError, and no blob that
    a handle may point to is deleted."""

    @pytest.fixture
    def lossy(self, store, blobs):
        wrapper = LostAckStore(store)
        return wrapper, StateHandleStore(wrapper, ROOT, blobs, lock_identity="me")

    @pytest.mark.parametrize("applied", [True, False])
    def test_add(self, lossy, applied):
        wrapper, handles = lossy
        wrapper.arm(apply=applied)
        with pytest.raises(PossibleInconsistentStateError) as info:
            handles.add_and_lock("a", b"state")
        assert handles.blobs.exists(info.value.blob_url) and info.value.key == "a"
        if applied:
            got = handles.get_and_lock("a")
            assert got.blob_url == info.value.blob_url and got.read_bytes() == b"state"
        else:
            assert handles.exists("a") is None
            assert [b.url for b in collect_garbage(wrapper, ROOT, handles.blobs, grace_seconds=0).orphans] == [
                info.value.blob_url]

    @pytest.mark.parametrize("applied", [True, False])
    def test_replace(self, lossy, applied):
        wrapper, handles = lossy
        old = handles.add_and_lock("a", b"old")
        wrapper.arm(apply=applied)
        with pytest.raises(PossibleInconsistentStateError) as info:
            handles.replace("a", 0, b"new")
        assert handles.blobs.exists(old.blob_url) and handles.blobs.exists(info.value.blob_url)
        assert handles.get_and_lock("a").read_bytes() == (b"new" if applied else b"old")

    @pytest.mark.parametrize("applied", [True, False])
    def test_remove(self, lossy, applied):
        wrapper, handles = lossy
        old = handles.add_and_lock("a", b"old")
        wrapper.arm(apply=applied)
        with pytest.raises(PossibleInconsistentStateError):
            handles.release_and_try_remove("a")
        assert handles.blobs.exists(old.blob_url)
        assert (handles.exists("a") is None) == applied
        report = collect_garbage(wrapper, ROOT, handles.blobs, grace_seconds=0, delete=True)
        assert report.deleted == ([old.blob_url] if applied else [])
