"""The test infrastructure itself, on real servers: moto's S3 API behind BlobStore (``s3_server``), a
3-node ZooKeeper ensemble (``zk_ensemble``) that keeps a zk:// store serving through a leader crash and
through an outage of all its servers, and a 3-node etcd cluster (``etcd_cluster``) through a leader crash."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import TypeVar

import pytest

from statekeep.errors import PossibleInconsistentStateError, StoreUnavailableError
from statekeep.handles.blobs import BlobStore
from statekeep.metadata import open_store
from statekeep.retry import OUTAGE
from statekeep.testing import wait_for

T = TypeVar("T")

# ---- S3 (moto) ----------------------------------------------------------------------------------------


def _read(blobs: BlobStore, ref) -> bytes:
    with blobs.open(ref.url, ref.size, ref.sha256) as reader:
        return reader.read()


@pytest.mark.parametrize("how", ["storage_options", "environment"])
def test_blobstore_writes_reads_lists_and_deletes_on_moto(s3_server, how):
    options = s3_server.storage_options if how == "storage_options" else None  # else AWS_ENDPOINT_URL
    base = s3_server.url("blobs")
    blobs = BlobStore(base, options=options, chunk_size=1 << 20)
    assert blobs.url == base and not blobs.local
    small = blobs.write("scope", "small", b"hello")
    large_state = os.urandom(11 << 20)  # more than two 5 MiB parts: a multipart upload
    large = blobs.write("scope", "large", iter([large_state[i:i + 700_000]
                                                for i in range(0, len(large_state), 700_000)]))
    assert small.url.startswith(base + "/") and large.size == len(large_state)
    assert _read(blobs, small) == b"hello" and _read(blobs, large) == large_state
    listed = blobs.list("scope")
    assert sorted(info.url for info in listed) == sorted([small.url, large.url])
    assert {info.url: info.size for info in listed} == {small.url: 5, large.url: len(large_state)}
    assert not any(info.temporary for info in listed)
    assert blobs.list("other-scope") == []

    assert blobs.delete(small.url) and not blobs.exists(small.url) and blobs.exists(large.url)
    # a second delete does not fail; on S3 it returns True, not the False of BlobStore.delete's docstring:
    # DeleteObject of a missing key succeeds, so s3fs's rm_file raises no FileNotFoundError
    blobs.delete(small.url)
    assert not blobs.exists(small.url)
    assert [info.url for info in blobs.list("scope")] == [large.url]
    assert blobs.delete(large.url) and blobs.list("scope") == []


def test_two_buckets_and_fresh_prefixes(s3_server):
    first, second = s3_server.url("p"), s3_server.url("p")
    assert first != second and first.startswith(f"s3://{s3_server.bucket}/p-")
    other = BlobStore(s3_server.url("p", bucket=s3_server.buckets[1]))
    ref = other.write("s", "k", b"elsewhere")
    assert ref.url.startswith(f"s3://{s3_server.buckets[1]}/") and _read(other, ref) == b"elsewhere"
    assert BlobStore(first).list("s") == []


def test_a_child_process_reaches_moto_through_the_inherited_environment(s3_server):
    """What a Spark executor does: it inherits the environment and passes no storage options."""
    url = s3_server.url("child") + "/object"
    script = ("import sys, fsspec\n"
              "fs = fsspec.filesystem('s3')\n"
              "with fs.open(sys.argv[1], 'wb') as f:\n"
              "    f.write(b'from the child')\n")
    subprocess.run([sys.executable, "-c", script, url], check=True, timeout=120, env=dict(os.environ))
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True, **s3_server.storage_options)
    assert fs.cat(url) == b"from the child"


# ---- a ZooKeeper ensemble ------------------------------------------------------------------------------


def _retry(action: Callable[[], T], seconds: float = 20.0) -> T:
    """``action()`` until it stops raising StoreUnavailableError (bounded, so a dead store fails the test)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return action()
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class _Writer(threading.Thread):
    """Puts distinct keys through one store until stopped, sorting each put by its outcome."""

    def __init__(self, store) -> None:
        super().__init__(name="ensemble-writer", daemon=True)
        self.store = store
        self.acked: dict[str, bytes] = {}
        self.unknown: list[str] = []   # PossibleInconsistentStateError: may or may not be written
        self.refused: list[str] = []   # StoreUnavailableError: nothing was written
        self.errors: list[BaseException] = []
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            path, value = f"/w/{n:07d}", f"value {n}".encode()
            n += 1
            try:
                self.store.put(path, value)
            except PossibleInconsistentStateError:
                self.unknown.append(path)
            except StoreUnavailableError:
                self.refused.append(path)
                time.sleep(0.05)
            except BaseException as e:  # anything else is a failure of the test
                self.errors.append(e)
                return
            else:
                self.acked[path] = value
            time.sleep(0.005)

    def acks_beyond(self, count: int, more: int = 20) -> bool:
        return wait_for(lambda: len(self.acked) >= count + more, timeout=60, interval=0.05)


@pytest.mark.slow
def test_a_store_on_the_ensemble_survives_a_leader_crash_and_a_full_outage(zk_ensemble):
    ensemble = zk_ensemble
    url = ensemble.url(f"/t{uuid.uuid4().hex[:12]}")
    assert url.startswith("zk://") and url.count("127.0.0.1:") == 3
    store = open_store(url, timeout=5)
    writer = _Writer(store)
    try:
        store.put("/before", b"1")
        writer.start()
        assert writer.acks_beyond(0)

        # the leader crashes: two servers keep the quorum and elect a new leader
        old_leader = ensemble.leader()
        ensemble.kill(old_leader)
        assert ensemble.modes()[old_leader] is None
        _retry(lambda: store.put("/after-leader-crash", b"2"))
        assert _retry(lambda: store.get("/after-leader-crash")).value == b"2"
        assert ensemble.leader() != old_leader
        assert writer.acks_beyond(len(writer.acked))
        ensemble.restart(old_leader)  # rejoins on its dataDir
        assert ensemble.modes()[old_leader] in ("follower", "leader")
        assert writer.acks_beyond(len(writer.acked))

        # all three down for 8 s, then started again on their dataDirs: the same store object recovers
        ensemble.stop_all_for(8)
        assert all(mode in ("follower", "leader") for mode in ensemble.modes())
        _retry(lambda: store.put("/after-outage", b"3"), seconds=30)
        assert _retry(lambda: store.get("/after-outage")).value == b"3"
        assert writer.acks_beyond(len(writer.acked))
    finally:
        writer.halt.set()
        writer.join(30)
        ensemble.start_all()  # leave the shared ensemble whole for the next test

    assert writer.errors == []
    acked = writer.acked
    paths = sorted(acked)
    for reader in (store, open_store(url, timeout=10)):  # this session, and another client's
        got = _retry(lambda: reader.get_many(paths))
        lost = [p for p, result in zip(paths, got) if result is None or result.value != acked[p]]
        assert lost == [], f"{len(lost)} of {len(paths)} acknowledged writes lost"
        assert [_retry(lambda: reader.get(p)).value for p in ("/before", "/after-leader-crash", "/after-outage")] \
            == [b"1", b"2", b"3"]
        # "nothing was written" where a put raised StoreUnavailableError rather than PossibleInconsistentStateError
        assert _retry(lambda: reader.get_many(writer.refused)) == [None] * len(writer.refused)
        reader.close()


# ---- an etcd cluster ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_store_on_the_etcd_cluster_survives_a_leader_crash(etcd_cluster):
    """The etcd cluster has the ensemble's shape (url, leader, kill, restart): after its leader's SIGKILL the
    two others elect another, and plain overwrites through the retry policy (OUTAGE.repeat) all land; the
    killed member restarts on its data dir (``--initial-cluster-state existing``) and serves what was
    written while it was down."""
    cluster = etcd_cluster
    prefix = f"/t{uuid.uuid4().hex[:12]}"
    url = cluster.url(prefix)
    assert url.startswith("etcd://") and url.count("127.0.0.1:") == 3
    store = open_store(url)
    killed = None
    try:
        OUTAGE.repeat(lambda: store.put("/before", b"1"))
        killed = cluster.leader()
        cluster.kill(killed)
        for n in range(20):  # the first ones go while the others notice the crash and elect a leader
            OUTAGE.repeat(lambda: store.put(f"/after/{n:02d}", b"%d" % n))
        assert cluster.leader() != killed
        restarted, killed = killed, None
        cluster.restart(restarted)
        assert cluster.leader() in range(3)
        with open_store(f"etcd://{cluster.servers[restarted].address}{prefix}") as member:
            assert wait_for(lambda: OUTAGE.repeat(lambda: member.get("/after/19")) is not None, timeout=30)
            assert [r.value for r in OUTAGE.repeat(lambda: member.get_many(
                ["/before", *(f"/after/{n:02d}" for n in range(20))]))] == [b"1", *(b"%d" % n for n in range(20))]
    finally:
        if killed is not None:
            cluster.restart(killed)  # leave the shared cluster whole for the next test
        store.close()
