"""State handles beyond the contract: many failover trials, faults around the metadata write with real
servers killed, garbage collection and its CLI, bounded memory while streaming, concurrent readers, s3://."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
import uuid

import pytest

from support.handles import LostAckStore, Unaware, blob_urls, snapshot
from statekeep.cli import main
from statekeep.coordination import CoordinationService
from statekeep.errors import (
    CorruptStateError,
    InvalidArgumentError,
    LeadershipLostError,
    PossibleInconsistentStateError,
    StoreClosedError,
    StoreUnavailableError,
)
from statekeep.handles import BlobStore, StateHandleStore, collect_garbage
from statekeep.metadata import open_store
from statekeep.testing import wait_for

ROOT = "/jobs/j1/state"
ELECTION = "/jobs/j1/leader"


def _url(kind: str, tmp_path) -> str:
    return f"memory://{uuid.uuid4().hex}" if kind == "memory" else f"local://{tmp_path / 'store'}"


# ---- failover trials -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["memory", "local"])
def test_deposed_leaders_never_write_in_100_failovers(kind, tmp_path):
    """100 failovers between two nodes. Each deposed leader is paused across its deposition (``Unaware``):
    it still believes it leads and tries every mutation, before and after its successor claims the root.
    Odd trials depose by deleting the lock key (the leader's session lives on); even trials end the
    leader's session (its store closes, the node rejoins with a new one). None of its writes is applied."""
    url, blobs = _url(kind, tmp_path), f"file://{tmp_path}/blobs"
    admin = open_store(url)
    nodes = [open_store(url), open_store(url)]
    coords = [CoordinationService(s) for s in nodes]
    refused = closed = 0
    try:
        lock = coords[0].become_leader(ELECTION, b"n0").result(30)
        leader = StateHandleStore(nodes[0], ROOT, blobs, lock_identity="n0", leadership=Unaware(lock))
        leader.add_and_lock("shared", b"initial")
        idx = 0
        for trial in range(100):
            expected = snapshot(leader)
            blobs_before = blob_urls(leader)
            end_session = trial % 2 == 0
            if end_session:
                coords[idx].close()
                nodes[idx].close()
            else:
                admin.delete(lock.path)

            def attempts(deposed: StateHandleStore = leader) -> int:
                n = 0
                for attempt in (lambda: deposed.add_and_lock(f"by-deposed-{trial}", b"deposed"),
                                lambda: deposed.replace("shared", expected["shared"][0], b"deposed"),
                                lambda: deposed.release_and_try_remove("shared"),
                                deposed.clear_entries):
                    with pytest.raises(StoreClosedError if end_session else LeadershipLostError):
                        attempt()
                    n += 1
                return n

            counted = attempts()  # between leaders
            idx = 1 - idx
            lock = coords[idx].become_leader(ELECTION, f"n{idx}".encode()).result(30)
            successor = StateHandleStore(nodes[idx], ROOT, blobs, lock_identity=f"n{idx}", leadership=Unaware(lock))
            counted += attempts()  # after the successor's claim
            if end_session:
                closed += counted
            else:
                refused += counted
            assert snapshot(successor) == expected, f"trial {trial}: a deposed leader's write was applied"
            assert blob_urls(successor) == blobs_before, f"trial {trial}: a refused write left its blob"
            successor.replace("shared", expected["shared"][0], f"trial {trial}".encode())
            leader = successor
            if end_session:  # the deposed node rejoins with a new session
                nodes[1 - idx] = open_store(url)
                coords[1 - idx] = CoordinationService(nodes[1 - idx])
        assert refused == closed == 400
        assert snapshot(leader)["shared"][1] == b"trial 99" and leader.get_all_handles() == ["shared"]
    finally:
        for coord in coords:
            coord.close()
        for store in [admin, *nodes]:
            store.close()


def test_claim_needs_the_lock_and_is_superseded(tmp_path):
    url, blobs = _url("memory", tmp_path), f"file://{tmp_path}/blobs"
    store = open_store(url)
    coord = CoordinationService(store)
    lock = coord.acquire_lock(ELECTION, b"me")
    first = StateHandleStore(store, ROOT, blobs, leadership=lock)
    first.add_and_lock("a", b"1")
    second = StateHandleStore(store, ROOT, blobs, leadership=lock)  # a newer claim, same lock
    with pytest.raises(LeadershipLostError):
        first.add_and_lock("b", b"2")
    second.add_and_lock("b", b"2")
    second.close()  # drops the claim: this store writes no more
    with pytest.raises(LeadershipLostError):
        second.add_and_lock("c", b"3")
    with pytest.raises(InvalidArgumentError):
        StateHandleStore(store, "/jobs/j1", blobs, leadership=coord.acquire_lock("/jobs/j1/fence/x", b""))
    lock.release()
    with pytest.raises(LeadershipLostError):  # the real lock knows: refused before any upload
        StateHandleStore(store, ROOT, blobs, leadership=lock)
    assert len(blob_urls(first)) == 2
    coord.close()
    store.close()


# ---- faults around the metadata write, real servers killed -------------------------------------------

@pytest.fixture(params=["zookeeper", "etcd"])
def dedicated_server(request):
    server = request.getfixturevalue(f"start_{request.param}")()
    yield server
    server.stop()


@pytest.mark.slow
def test_server_killed_after_upload(dedicated_server, tmp_path):
    """The server dies once the blob is uploaded, before the handle is written: the outcome is reported as
    unknown, the blob is kept; after the restart the state is consistent and gc sees the orphan."""
    scheme = "zk" if dedicated_server.kind == "zookeeper" else "etcd"
    store = open_store(f"{scheme}://{dedicated_server.address}/sk?timeout=2")
    handles = StateHandleStore(store, ROOT, f"file://{tmp_path}/blobs", chunk_size=1 << 16)
    try:
        handles.add_and_lock("before", b"kept")

        def state_then_kill():
            for _ in range(8):
                yield os.urandom(1 << 16)
            dedicated_server.kill()  # the upload is complete; the metadata write comes next

        with pytest.raises(PossibleInconsistentStateError) as info:
            handles.add_and_lock("during", state_then_kill())
        assert handles.blobs.exists(info.value.blob_url)
        dedicated_server.restart()

        def reachable() -> bool:  # the client reconnects with backoff; a loaded machine slows it down
            try:
                handles.exists("during")
                return True
            except StoreUnavailableError:
                return False

        assert wait_for(reachable, timeout=60)
        version = handles.exists("during")
        if version is None:  # not applied: an orphan for gc, not a loss
            report = collect_garbage(store, ROOT, handles.blobs, grace_seconds=0)
            assert [b.url for b in report.orphans] == [info.value.blob_url]
        else:
            assert handles.get_and_lock("during").blob_url == info.value.blob_url
        assert handles.get_and_lock("before").read_bytes() == b"kept"
    finally:
        store.close()


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_lost_ack_on_clear_keeps_blobs(kind, tmp_path):
    store = open_store(_url(kind, tmp_path))
    lossy = LostAckStore(store)
    handles = StateHandleStore(lossy, ROOT, f"file://{tmp_path}/blobs")
    added = [handles.add_and_lock(k, k.encode()) for k in "abc"]
    lossy.arm(apply=True, when=lambda ops: any(getattr(op, "path", "").endswith("/handles/b") for op in ops))
    with pytest.raises(PossibleInconsistentStateError):
        handles.clear_entries()
    assert handles.get_all_handles() == ["c"]  # a removed, b removed with its ack lost, c not reached
    assert blob_urls(handles) == {added[1].blob_url, added[2].blob_url}
    lossy.close()


# ---- gc ----------------------------------------------------------------------------------------------

@pytest.fixture
def populated(tmp_path):
    store = open_store(f"local://{tmp_path / 'store'}")
    blobs = f"file://{tmp_path}/blobs"
    handles = StateHandleStore(store, ROOT, blobs)
    live = [handles.add_and_lock(k, k.encode() * 100) for k in ("a", "b")]
    orphans = [handles.blobs.write(ROOT, "gone", b"orphan" * 50) for _ in range(2)]
    # an unfinished upload left by a crash
    tmp = os.path.join(os.path.dirname(orphans[0].url.removeprefix("file://")),
                       f".{orphans[0].created_ms:013d}-{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as f:
        f.write(b"partial")
    # another root's blobs are not this gc's business
    StateHandleStore(store, "/jobs/j1", blobs).blobs.write("/jobs/j1", "x", b"other root")
    yield store, handles, live, orphans, tmp
    store.close()


def test_gc_reclaims_orphans_only(populated):
    store, handles, live, orphans, tmp = populated
    everything = sorted(b.url for b in handles.blobs.list(ROOT))
    dry = collect_garbage(store, ROOT, handles.blobs, grace_seconds=0)
    assert sorted(b.url for b in dry.orphans) == sorted([o.url for o in orphans] + ["file://" + tmp])
    assert dry.orphan_bytes == 600 + len(b"partial") and dry.referenced == 2 and dry.deleted == []
    assert sorted(b.url for b in handles.blobs.list(ROOT)) == everything  # a dry run changes nothing
    report = collect_garbage(store, ROOT, handles.blobs, grace_seconds=0, delete=True)
    assert sorted(report.deleted) == sorted(b.url for b in dry.orphans) and report.failed == []
    assert sorted(b.url for b in handles.blobs.list(ROOT)) == sorted(h.blob_url for h in live)
    assert [h.read_bytes() for h in handles.get_all_and_lock()] == [b"a" * 100, b"b" * 100]
    assert len(handles.blobs.list("/jobs/j1")) == 1


def test_gc_grace_protects_recent_blobs(populated):
    store, handles, live, orphans, tmp = populated
    newest = max(b.written_ms for b in handles.blobs.list(ROOT))
    report = collect_garbage(store, ROOT, handles.blobs, grace_seconds=60, delete=True, now_ms=newest + 59_000)
    assert report.orphans == [] and report.young == 3
    report = collect_garbage(store, ROOT, handles.blobs, grace_seconds=60, delete=True, now_ms=newest + 61_000)
    assert len(report.deleted) == 3


def test_gc_refuses_when_a_handle_is_unreadable(populated):
    store, handles, *_ = populated
    store.put(f"{ROOT}/handles/broken", b"not json")
    with pytest.raises(CorruptStateError, match="nothing deleted"):
        collect_garbage(store, ROOT, handles.blobs, grace_seconds=0, delete=True)
    assert len(handles.blobs.list(ROOT)) == 5


def test_gc_cli(populated, tmp_path, capsys):
    store, handles, live, orphans, tmp = populated
    store.close()  # the CLI opens the store itself
    args = ["handles", "gc", "--store", f"local://{tmp_path / 'store'}", "--root", ROOT,
            "--blobs", f"file://{tmp_path}/blobs", "--grace", "0"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "would reclaim 3 blob(s)" in out and "dry run" in out and "unfinished upload" in out
    assert len(handles.blobs.list(ROOT)) == 5
    assert main(args + ["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dryRun"] and data["orphans"] == 3 and data["orphanBytes"] == 607
    assert main(args + ["--delete"]) == 0
    assert "reclaimed 3 blob(s), 607 B" in capsys.readouterr().out
    assert sorted(b.url for b in handles.blobs.list(ROOT)) == sorted(h.blob_url for h in live)
    assert main(["handles", "ls", "--store", f"local://{tmp_path / 'store'}", "--root", ROOT, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [row["key"] for row in listed] == ["a", "b"] and listed[0]["size"] == 100


# ---- streaming, concurrency --------------------------------------------------------------------------

def test_memory_stays_bounded_while_streaming(tmp_path):
    """64 MiB through the store in 1 MiB chunks: Python allocations peak at a few chunks, not the state."""
    chunk, count = 1 << 20, 64
    store = open_store(f"memory://{uuid.uuid4().hex}")
    handles = StateHandleStore(store, ROOT, f"file://{tmp_path}/blobs", chunk_size=chunk)
    block = os.urandom(chunk)
    tracemalloc.start()
    try:
        handles.add_and_lock("big", (block for _ in range(count)))
        _, write_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        total = 0
        with handles.get_and_lock("big").open() as stream:
            while piece := stream.read(chunk):
                assert piece == block
                total += len(piece)
        _, read_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total == chunk * count
    assert write_peak < 8 * chunk and read_peak < 8 * chunk, (write_peak, read_peak)


@pytest.mark.parametrize("kind", ["memory", "local"])
def test_readers_never_lose_what_they_locked(kind, tmp_path):
    """Readers lock and read while the leader replaces, removes and re-adds: a locked handle's blob is
    always there and intact until its reader releases it."""
    url, blobs = _url(kind, tmp_path), f"file://{tmp_path}/blobs"
    stores = [open_store(url) for _ in range(3)]
    leader = StateHandleStore(stores[0], ROOT, blobs, lock_identity="leader", chunk_size=1 << 14)
    readers = [StateHandleStore(s, ROOT, blobs, lock_identity=f"r{i}") for i, s in enumerate(stores[1:])]
    leader.add_and_lock("k", b"0" * 50_000)
    stop, errors, reads = threading.Event(), [], [0]

    def read(handles: StateHandleStore) -> None:
        while not stop.is_set():
            try:
                handle = handles.get_and_lock("k")
            except Exception:  # removed for a moment: try again
                continue
            try:
                data = handle.read_bytes()
                assert data == data[:1] * 50_000
                reads[0] += 1
            except Exception as e:
                errors.append(e)
            finally:
                handles.release("k")

    threads = [threading.Thread(target=read, args=(r,)) for r in readers]
    for t in threads:
        t.start()
    try:
        i = 0
        while (i < 150 or reads[0] < 20) and i < 5000:  # enough interleaving, whatever the scheduling
            i += 1
            version = leader.exists("k")
            if i % 10 == 0:
                if leader.release_and_try_remove("k"):
                    leader.add_and_lock("k", str(i % 10).encode() * 50_000)
            elif version is not None:
                leader.replace("k", version, str(i % 10).encode() * 50_000)
    finally:
        stop.set()
        for t in threads:
            t.join()
        for s in stores:
            s.close()
    assert errors == [] and reads[0] > 0


# ---- s3:// -------------------------------------------------------------------------------------------

def test_s3_blobs(s3_server):
    """State handles with blobs on an S3 API (moto's server, the session's ``s3_server``)."""
    options, blob_root = s3_server.storage_options, s3_server.url("handles")
    store = open_store(f"memory://{uuid.uuid4().hex}")
    root = f"/s3/{uuid.uuid4().hex}"
    handles = StateHandleStore(store, root, blob_root, blob_options=options, chunk_size=1 << 20)
    state = os.urandom(3 << 20)  # several chunks and a multipart upload
    added = handles.add_and_lock("a", iter([state[i:i + 700_000] for i in range(0, len(state), 700_000)]))
    assert added.blob_url.startswith(blob_root + "/")
    assert handles.get_and_lock("a").read_bytes() == state
    replaced = handles.replace("a", 0, b"small")
    assert handles.get_and_lock("a").read_bytes() == b"small"
    assert not handles.blobs.exists(added.blob_url) and handles.blobs.exists(replaced.blob_url)
    assert handles.blobs.delete(added.blob_url) is False  # already gone (S3 itself answers a delete of nothing OK)
    orphan = handles.blobs.write(root, "gone", b"orphan")
    report = collect_garbage(store, root, handles.blobs, grace_seconds=0, delete=True)
    assert report.deleted == [orphan.url]
    assert handles.release_and_try_remove("a") and handles.blobs.list(root) == []
    with pytest.raises(CorruptStateError, match="missing"):
        BlobStore(blob_root, options=options).open(replaced.blob_url, 5, replaced.sha256)
    store.close()


# ---- a real leader process paused beyond its session (zk, etcd) ---------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("kind", ["zookeeper", "etcd"])
def test_leader_process_paused_beyond_its_session(kind, request, tmp_path):
    """The leader process is SIGSTOPped until its session expires and a successor has claimed the root;
    resumed, it tries to write: no attempt is applied (its own view of the lock is as stale as it gets)."""
    import signal
    import subprocess
    import sys
    from pathlib import Path

    server = request.getfixturevalue("zk_server" if kind == "zookeeper" else "etcd_server")
    scheme = "zk" if kind == "zookeeper" else "etcd"
    url = f"{scheme}://{server.address}/t{uuid.uuid4().hex[:12]}?session_timeout=2"
    blobs = f"file://{tmp_path}/blobs"
    worker = subprocess.Popen([sys.executable, str(Path(__file__).parent / "support" / "handles_worker.py"), url, ROOT,
                               ELECTION, blobs], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    store = open_store(url)
    coord = CoordinationService(store)
    try:
        assert worker.stdout.readline().strip() == "leader"
        worker.send_signal(signal.SIGSTOP)
        lock = coord.become_leader(ELECTION, b"successor").result(60)  # once the paused session expired
        successor = StateHandleStore(store, ROOT, blobs, lock_identity="successor", leadership=lock)
        expected = snapshot(successor)
        worker.send_signal(signal.SIGCONT)
        worker.stdin.write("go\n")
        worker.stdin.flush()
        outcomes = json.loads(worker.stdout.readline())
        print("paused leader's attempts:", outcomes)
        # Its first write may go out on the connection the server closed at the expiry: that outcome is
        # unknown to it (the contract's PossibleInconsistentStateError); once it has seen the expiry, each
        # write is refused. Either way nothing it sent is applied (the snapshot below).
        assert set(outcomes) <= {"LeadershipLostError", "PossibleInconsistentStateError"}
        assert outcomes[-1] == "LeadershipLostError"
        assert snapshot(successor) == expected
        successor.replace("shared", expected["shared"][0], b"by the successor")
        assert snapshot(successor)["shared"][1] == b"by the successor"
    finally:
        worker.send_signal(signal.SIGCONT)
        worker.stdin.close()
        try:
            worker.wait(timeout=30)
        finally:
            if worker.poll() is None:
                worker.kill()
        coord.close()
        store.close()
