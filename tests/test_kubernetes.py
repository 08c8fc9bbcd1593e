"""k8s:// beyond the contract suites (which run it with every other backend): its URL and bad input, its layout
as Kubernetes' own tools see it, and faults of the real API server (statekeep.testing.servers.KubernetesServer):
the API server SIGKILLed and restarted, its etcd restarted, a watch whose revision is gone, a leader whose Lease
expires while it writes a state handle. Batched: each test covers several cases on the run's one server."""

from __future__ import annotations

import base64
import json
import logging
import threading
import uuid

import pytest

from support.handles import snapshot
from statekeep.coordination import CoordinationService
from statekeep.errors import (
    InvalidArgumentError, LeadershipLostError, NotFoundError, PossibleInconsistentStateError, StoreUnavailableError,
    ValueTooLargeError,
)
from statekeep.handles import StateHandleStore
from statekeep.metadata import Notification, NotificationType, Put, open_store
from statekeep.testing import wait_for

pytestmark = pytest.mark.slow

ROOT = "/jobs/j1/state"
ELECTION = "/jobs/j1/leader"


def _url(server, prefix: str = "", **query: object) -> str:
    url = f"k8s://{server.namespace}/{prefix or 't' + uuid.uuid4().hex[:12]}"
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def _raw(server) -> object:
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config(str(server.kubeconfig)))


def test_url_layout_and_bad_input(kubernetes_server, tmp_path):
    """The URL's forms and its errors; one ConfigMap per key, inspectable with the raw client; bad input and
    an oversized multi refused before anything is written."""
    server = kubernetes_server
    prefix = f"t{uuid.uuid4().hex[:12]}"
    with open_store(f"k8s://statekeep@{server.namespace}/{prefix}?kubeconfig={server.kubeconfig}") as store:
        store.put("/a/b", b"\x00bytes\xff")
        names = {cm.metadata.annotations["statekeep.io/path"]: cm for cm in _raw(server).list_namespaced_config_map(
            server.namespace, label_selector=f"statekeep.io/store={store.store_id},statekeep.io/kind=key").items}
        assert set(names) == {"/a", "/a/b"}  # the ancestor too, as on every backend
        assert base64.b64decode(names["/a/b"].binary_data["value"]) == b"\x00bytes\xff"
        assert names["/a/b"].metadata.annotations["statekeep.io/version"] == "0"
        big = b"x" * (store.max_request_bytes // 2 + 1)
        with pytest.raises(ValueTooLargeError):  # one multi's values travel in one commit record
            store.multi([Put("/big/1", big), Put("/big/2", big)])
        with pytest.raises(ValueTooLargeError):
            store.put("/big/3", b"x" * (store.max_value_size + 1))
        assert not store.exists("/big") and store.get_children("/") == ["a"]
    with pytest.raises(InvalidArgumentError, match="namespace"):
        open_store(_url(server).replace(server.namespace, "Not_A_Namespace"))
    with pytest.raises(NotFoundError, match="does not exist"):
        open_store(_url(server).replace(server.namespace, "absent-namespace"))
    with pytest.raises(InvalidArgumentError, match="configuration"):
        open_store(f"k8s://no-such-context@{server.namespace}/p?kubeconfig={server.kubeconfig}")
    unreachable = json.loads(server.kubeconfig.read_text())
    unreachable["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    (tmp_path / "kubeconfig").write_text(json.dumps(unreachable))
    with pytest.raises(StoreUnavailableError):
        open_store(_url(server, kubeconfig=tmp_path / "kubeconfig", timeout=1))


def test_api_server_and_etcd_restarts_lose_no_notification(kubernetes_server):
    """The API server SIGKILLed and restarted, then its etcd: requests in between raise StoreUnavailableError,
    the clients reconnect by themselves, and the watch resumes from its last revision: every change made
    before, between and after is notified, in order per key."""
    server = kubernetes_server
    url = _url(server, timeout=2)
    seen: list[Notification] = []
    with open_store(url) as watcher, open_store(url) as writer:
        watcher.add_listener(seen.append)
        expected = []

        def change(path: str, value: bytes) -> None:
            stat = writer.put(path, value)
            expected.append((NotificationType.Created if stat.version == 0 else NotificationType.Modified, path))

        change("/k/before", b"1")
        assert wait_for(lambda: len([n for n in seen if n.path.startswith("/k/")]) == 1, timeout=30)
        for restart, kill in ((server.restart, server.kill), (server.restart_etcd, server.kill_etcd)):
            kill()
            with pytest.raises((StoreUnavailableError, PossibleInconsistentStateError)):
                writer.get("/k/before")  # a read: StoreUnavailableError; kept general for an etcd-less 5xx
            restart()
            assert wait_for(lambda: _reachable(writer), timeout=60)
            change("/k/before", b"again")
            change(f"/k/after-{kill.__name__}", b"2")
        writer.delete("/k/before")
        expected.append((NotificationType.Deleted, "/k/before"))
        got = lambda: [(n.type, n.path) for n in seen if n.type is not NotificationType.ChildrenChanged  # noqa: E731
                       and n.path.startswith("/k/")]
        assert wait_for(lambda: got() == expected, timeout=60), (got(), expected)


def _reachable(store) -> bool:
    try:
        store.get("/")
        return True
    except (StoreUnavailableError, PossibleInconsistentStateError):
        return False


def test_watch_whose_revision_is_gone_lists_again_and_reports_the_gap(kubernetes_server, caplog):
    """A watch resumed from a revision the API server no longer has (410 Gone: etcd compacted it, the API server
    restarted meanwhile) lists again and reports what changed meanwhile as Created, Modified and Deleted; then it
    watches on."""
    server = kubernetes_server
    url = _url(server)
    seen: list[Notification] = []
    caplog.set_level(logging.INFO, logger="statekeep.metadata.kubernetes")
    with open_store(url) as watcher, open_store(url) as writer:
        writer.put("/g/kept", b"1")
        writer.put("/g/gone", b"1")
        watcher.add_listener(seen.append)
        watcher._watch_stop.set()  # the watch stops, as if its connection were down ...
        response = watcher._watch_response
        if response is not None:
            response.shutdown()
        watcher._watch_thread.join(timeout=120)
        assert not watcher._watch_thread.is_alive()
        writer.put("/g/kept", b"2")
        writer.delete("/g/gone")
        writer.put("/g/new", b"1")
        _compact(server)  # ... and resumes from a revision etcd no longer has, after the API server's restart
        server.restart()  # emptied its watch cache
        watcher._watch_rv = str(watcher._known["/g/kept"][1] - 1)
        watcher._watch_stop.clear()
        watcher._watch_thread = threading.Thread(target=watcher._watch, daemon=True)
        watcher._watch_thread.start()
        expected = {(NotificationType.Modified, "/g/kept"), (NotificationType.Deleted, "/g/gone"),
                    (NotificationType.Created, "/g/new")}
        changes = lambda: {(n.type, n.path) for n in seen if n.type is not NotificationType.ChildrenChanged}  # noqa: E731
        assert wait_for(lambda: changes() == expected, timeout=60), changes()
        assert "revision is gone" in caplog.text  # the gap was reported by listing again, not by the watch
        writer.put("/g/later", b"1")
        assert wait_for(lambda: (NotificationType.Created, "/g/later") in changes(), timeout=30)


#: a writer that SIGKILLs itself at one point of a multi: after marking every object with its intent, before its
#: commit record ("before-commit"), or right after the record, before applying it ("after-commit")
_DYING_WRITER = """
import os, signal, sys
from statekeep.metadata import Put, open_store

url, point = sys.argv[1], sys.argv[2]
store = open_store(url)
die = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
if point == "before-commit":
    create = store._create_cm
    store._create_cm = lambda body: die() if body["metadata"]["labels"].get("statekeep.io/kind") == "txn" \
        else create(body)
else:
    store._finish = die
ops = {"before-commit": [Put("/a", b"new"), Put("/b", b"new"), Put("/c", b"new", -1)],
       "after-commit": [Put("/x", b"1"), Put("/y", b"1", -1)]}[point]
store.multi(ops)
sys.exit(3)  # not reached
"""


def test_a_writer_killed_mid_multi_leaves_nothing_half_done_and_its_leftovers_are_swept(kubernetes_server):
    """A writer SIGKILLed between its intents and its commit record, and one killed between its commit record and
    applying it: readers see the first multi as never written and the second as whole; sweep() (run by a store's
    session keeper when it opens, and every sweep_after/2) resolves every intent left and deletes both commit
    records, after which the keys take writes as any other."""
    import subprocess
    import sys

    server = kubernetes_server
    url = _url(server, kubeconfig=server.kubeconfig)
    raw = _raw(server)
    with open_store(url) as setup:
        setup.put("/a", b"old")
        setup.put("/b", b"old")
        setup.put("/x", b"0")
        store_id = setup.store_id
    for point in ("before-commit", "after-commit"):
        died = subprocess.run([sys.executable, "-c", _DYING_WRITER, url, point], capture_output=True, text=True,
                              timeout=300)
        assert died.returncode == -9, died.stderr

    def leftovers() -> tuple[list[str], list[str]]:
        marked = raw.list_namespaced_config_map(server.namespace,
                                                label_selector=f"statekeep.io/store={store_id},statekeep.io/txn")
        records = raw.list_namespaced_config_map(server.namespace,
                                                 label_selector=f"statekeep.io/store={store_id},statekeep.io/kind=txn")
        return ([cm.metadata.annotations["statekeep.io/path"] for cm in marked.items],
                [cm.metadata.annotations["statekeep.io/state"] for cm in records.items])

    marked, records = leftovers()
    assert sorted(marked) == ["/a", "/b", "/c", "/x", "/y"] and records == ["committed"]
    with open_store(url, timeout=2, sweep_after=1) as reader:  # timeout/2: an intent without a record is void
        expected = {"/a": b"old", "/b": b"old", "/c": None, "/x": b"1", "/y": b"1"}
        assert reader.get_children("/") == ["a", "b", "x", "y"]  # a listing shows each multi whole or not at all
        # no read of /a, /b, /c has resolved their intents: the sweep does (its own, or the session keeper's)
        assert wait_for(lambda: reader.sweep() and leftovers() == ([], []), timeout=60), leftovers()
        assert {p: (r.value if (r := reader.get(p)) else None) for p in expected} == expected
        assert reader.put("/a", b"newer", 0).version == 1 and reader.put("/c", b"c", -1).version == 0
        assert reader.multi([Put("/x", b"2", 1), Put("/y", b"2", 0)])[1].version == 1


def _compact(server) -> None:
    """Compact the server's etcd up to its current revision (as the API server does every 5 minutes)."""
    import subprocess

    endpoint = ["etcdctl", f"--endpoints=http://{server.etcd.address}"]
    status = subprocess.run([*endpoint, "endpoint", "status", "-w", "json"], check=True, capture_output=True,
                            text=True, env={"ETCDCTL_API": "3"})
    revision = json.loads(status.stdout)[0]["Status"]["header"]["revision"]
    subprocess.run([*endpoint, "compact", str(revision)], check=True, capture_output=True, env={"ETCDCTL_API": "3"})


def test_leader_lease_expires_while_it_writes_a_handle(kubernetes_server, tmp_path):
    """The leader stops renewing its Lease (a paused process); another store sees it unrenewed for its duration
    and ends the session, its leadership key with it; a successor leads. The old leader's writes of handles are
    refused, and nothing of them is written."""
    server = kubernetes_server
    url = _url(server)
    blobs = f"file://{tmp_path}/blobs"
    old_store = open_store(url + "?session_timeout=2")
    store = open_store(url)
    coord, old_coord = CoordinationService(store), CoordinationService(old_store)
    try:
        lock = old_coord.become_leader(ELECTION, b"old").result(30)
        old = StateHandleStore(old_store, ROOT, blobs, lock_identity="old", leadership=lock)
        old.add_and_lock("shared", b"by the old leader")
        old_store._keeper.stop()  # its process pauses: no more renewals
        successor_lock = coord.become_leader(ELECTION, b"successor").result(60)  # once the Lease expired
        successor = StateHandleStore(store, ROOT, blobs, lock_identity="successor", leadership=successor_lock)
        expected = snapshot(successor)
        for write in (lambda: old.add_and_lock("new", b"x" * 1000), lambda: old.replace("shared", 0, b"y"),
                      lambda: old.release_and_try_remove("shared")):
            with pytest.raises(LeadershipLostError):
                write()
        assert snapshot(successor) == expected and successor.exists("new") is None
        successor.replace("shared", expected["shared"][0], b"by the successor")
        assert snapshot(successor)["shared"][1] == b"by the successor"
    finally:
        for c in (coord, old_coord):
            c.close()
        for s in (store, old_store):
            s.close()


def test_a_function_counts_with_its_state_on_k8s_per_key_and_partition_owned(kubernetes_server, tmp_path,
                                                                             spark_env):
    """``statekeep functions localrun`` with ``--store k8s://``: word counts exact with the state per key in
    ConfigMaps, then exact again with the state partition-owned (``--state-dir``) and only its commit records and
    pointers in the API server."""
    import os
    import subprocess
    import sys
    from collections import Counter

    from statekeep.functions.config.service import FunctionService
    from support.spark import WORDCOUNT, counters, write_words

    words = [f"w{i % 23}" for i in range(600)]
    for part in range(3):
        write_words(tmp_path / "in", f"part-{part}.jsonl", words[part * 200:(part + 1) * 200])
    py = tmp_path / "wordcount.py"
    py.write_bytes(WORDCOUNT)
    for name, extra in (("perkey", []), ("owned", ["--state-dir", str(tmp_path / "shared")])):
        url = _url(kubernetes_server)
        command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", name, "--py", str(py),
                   "--inputs", str(tmp_path / "in"), "--key-field", "word", "--parallelism", "2", "--store", url,
                   "--checkpoint-dir", str(tmp_path / f"checkpoints-{name}"), "--once", *extra]
        done = subprocess.run(command, env={**os.environ, **spark_env}, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        with FunctionService.open(url) as service:
            assert counters(service, name) == Counter(words), name


def test_the_api_server_build_is_cached_by_version_and_named_when_missing(tmp_path, monkeypatch):
    """scripts/kube-apiserver's cache: a missing binary is an error naming the command that builds it; a present
    one is returned without Go (nothing is built again); another version is another directory."""
    from statekeep.errors import MissingDependencyError
    from statekeep.testing import kubeapiserver

    monkeypatch.setenv(kubeapiserver.ENV, str(tmp_path / "cache"))
    with pytest.raises(MissingDependencyError, match="scripts/kube-apiserver"):
        kubeapiserver.path()
    binary = kubeapiserver.binary()
    assert binary == tmp_path / "cache" / kubeapiserver.VERSION / "kube-apiserver"
    binary.parent.mkdir(parents=True)
    binary.write_bytes(b"#!/bin/sh\n")
    monkeypatch.setattr(kubeapiserver.shutil, "which", lambda name: None)  # no Go: building would fail
    assert kubeapiserver.build() == binary == kubeapiserver.path()
    with pytest.raises(MissingDependencyError, match="Go"):
        kubeapiserver.build("v1.33.0")
    assert not (tmp_path / "cache" / "v1.33.0" / "kube-apiserver").exists()
