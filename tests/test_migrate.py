"""statekeep migrate / export / import against real ZooKeeper and etcd servers (tests/conftest.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid

import pytest

from statekeep.cli import main as cli_main
from statekeep.errors import StoreUnavailableError
from statekeep.functions.config.service import FunctionService
from statekeep.metadata import open_store
from statekeep.metadata.types import join
from statekeep.migrate import CorruptFileError, TargetNotEmptyError, export_store, import_file, migrate
from statekeep.migrate.source import JOURNAL_PATH
from statekeep.state.catalog import function_provider
from statekeep.state.registry import open_provider

CODE = b"def process(input, context):\n    return input\n"
BINARY = bytes(range(256)) * 3 + b"\x00\xff"
FUNCTIONS = {("public", "default", "wc"): 3000, ("acme", "ns.1", "joins"): 1200}


def _fill_state(state, n: int, seed: str) -> None:
    keys = [f"{seed}/k{i:05d}" for i in range(n)]
    for start in range(0, n, 500):
        chunk = keys[start:start + 500]
        puts = {k: f"v-{k}".encode() + BINARY[: i % 40] for i, k in enumerate(chunk) if i % 3}
        counters = {k: (i * 7919) % 100_003 - 5000 for i, k in enumerate(chunk) if not i % 3}
        state.apply_batch(puts, counters)
    state.put("ünïcode key/with.dots", "é".encode())
    state.set_counter("big", 2**62)


def build_source(url: str) -> None:
    """A tree of nested, empty and binary values, sequential keys (one deleted, so the counter is above the
    children), two functions with thousands of keys and counters, one function with external state."""
    with FunctionService.open(url) as service:
        store = service.registry.store
        store.put("/app/config", b'{"parallelism": 4}')
        store.put("/app/nested/a/b/c/leaf", BINARY)
        store.put("/app/empty", b"")
        store.put("/workers", b"")  # the parent of an ephemeral key held during a test
        store.put("/app/nested/a/sibling", b"\x00\x01\x02")
        store.put("/app/nested/large", bytes(range(256)) * 2800)  # 700 KiB: a write of its own on ZooKeeper
        created = [store.put("/jobs/job-", f"job {i}".encode(), sequential=True).path for i in range(5)]
        store.delete(created[-1])
        for (tenant, namespace, name), n in FUNCTIONS.items():
            service.registry.create({"tenant": tenant, "namespace": namespace, "name": name, "inputs": ["x"],
                                     "py": "f.py"}, CODE)
            _fill_state(service.registry.state_store(tenant, namespace, name), n, name)
        service.registry.create({"tenant": "public", "namespace": "default", "name": "ext", "inputs": ["x"],
                                 "py": "f.py", "stateStorage": {"provider": "metadata",
                                                                "config": {"metadata_url": "memory://migrate-ext"}}},
                                CODE)


def dump(url: str) -> dict:
    """Everything a migration must carry: the tree (without the metadata provider's state subtrees,
    which differ by provider) and each function's state read through the store's default provider."""
    with open_store(url) as store:
        tree: dict[str, tuple[bytes, bool]] = {}

        def walk(path: str) -> None:
            names = store.get_children(path)
            paths = [join(path, n) for n in names]
            for child, result in zip(paths, store.get_many(paths)):
                if child == "/statekeep/state" or result is None:
                    continue
                tree[child] = (result.value, result.stat.ephemeral)
                walk(child)

        walk("/")
        name, config = function_provider(None, store)
        provider = open_provider(name, config)
        try:
            state = {f"{t}/{n}/{f}": [(e.key, e.kind, e.value) for e in
                                      provider.get_state_store(t, n, f).scan_entries()] for t, n, f in FUNCTIONS}
        finally:
            provider.close()
        return {"tree": tree, "state": state}


@pytest.fixture(scope="module")
def source_url(tmp_path_factory) -> str:
    url = f"local://{tmp_path_factory.mktemp('migrate') / 'source'}"
    build_source(url)
    return url


@pytest.fixture(scope="module")
def source_dump(source_url) -> dict:
    return dump(source_url)


def _etcd(server) -> str:
    return f"etcd://{server.address}/m{uuid.uuid4().hex[:10]}"


def _zk(server) -> str:
    return f"zk://{server.address}/m{uuid.uuid4().hex[:10]}"


def _sequential_does_not_collide(url: str, migrated: dict) -> None:
    with open_store(url) as store:
        path = store.put("/jobs/job-", b"new", sequential=True).path
        numbers = [int(p[-10:]) for p in migrated["tree"] if p.startswith("/jobs/job-")]
        assert path not in migrated["tree"] and int(path[-10:]) > max(numbers) + 1  # the deleted one is not reused


def test_round_trip_local_etcd_zk_local(source_url, source_dump, zk_server, etcd_server, tmp_path):
    assert len(source_dump["state"]["public/default/wc"]) == FUNCTIONS[("public", "default", "wc")] + 2
    holder = open_store(source_url)  # a live session with an ephemeral key on the source
    holder.put("/workers/w1", b"alive", ephemeral=True)
    try:
        etcd_url, zk_url, back_url = _etcd(etcd_server), _zk(zk_server), f"local://{tmp_path / 'back'}"
        first = migrate(source_url, etcd_url, progress=False)
        assert first.skipped == ["/workers/w1"] and first.ok
        assert first.counts["functions"] == 3 and first.counts["entries"] == sum(FUNCTIONS.values()) + 4
        assert {f["fqfn"]: f["state"] for f in first.functions}["public/default/ext"] == "external"
        assert {(f["from"], f["to"]) for f in first.functions if f["state"] == "copied"} == {("embedded", "metadata")}
        assert dump(source_url)["tree"] == {**source_dump["tree"], "/workers/w1": (b"alive", True)}
    finally:
        holder.close()
    assert dump(source_url) == source_dump  # never changed
    hops = [(etcd_url, zk_url), (zk_url, back_url)]
    for src, dst in hops:
        report = migrate(src, dst, progress=False)
        assert report.ok and report.resumed_from == 0
    for url in (etcd_url, zk_url, back_url):
        copy = dump(url)
        assert copy == source_dump, url
        with open_store(url) as store:
            assert not store.exists(JOURNAL_PATH) and not store.exists("/workers/w1")
    for url in (etcd_url, zk_url, back_url):
        _sequential_does_not_collide(url, source_dump)


def test_round_trip_local_k8s_local(source_url, source_dump, kubernetes_server, tmp_path):
    """To Kubernetes and back: the tree and every function's state arrive exactly, sequential counters carry."""
    k8s_url = f"k8s://{kubernetes_server.namespace}/m{uuid.uuid4().hex[:10]}"
    back_url = f"local://{tmp_path / 'back'}"
    first = migrate(source_url, k8s_url, progress=False)
    assert first.ok and first.counts["functions"] == 3
    assert migrate(k8s_url, back_url, progress=False).ok
    for url in (k8s_url, back_url):
        assert dump(url) == source_dump, url
        with open_store(url) as store:
            assert not store.exists(JOURNAL_PATH)
    _sequential_does_not_collide(k8s_url, source_dump)


def test_export_import_through_a_file(source_url, source_dump, etcd_server, tmp_path, capsys):
    path = tmp_path / "store.jsonl.gz"
    assert cli_main(["export", "--store", source_url, str(path), "--no-progress"]) == 0
    assert "4204 state keys" in capsys.readouterr().out
    target = _etcd(etcd_server)
    assert cli_main(["import", "--store", target, str(path), "--json", "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["operation"] == "import" and report["checks"]["state"]["matched"] == \
        sum(FUNCTIONS.values()) + 4
    assert dump(target) == source_dump
    _sequential_does_not_collide(target, source_dump)


def test_corrupt_or_truncated_file_changes_nothing(source_url, tmp_path):
    path = tmp_path / "store.jsonl"
    export_store(source_url, path, progress=False)
    lines = path.read_bytes().split(b"\n")
    altered = tmp_path / "altered.jsonl"
    altered.write_bytes(b"\n".join(lines[:5] + [lines[5].replace(b'"value":"', b'"value":"AAAA')] + lines[6:]))
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_bytes(b"\n".join(lines[: len(lines) // 2]) + b"\n")
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"hello\n")
    target = tmp_path / "target"
    for bad in (altered, truncated, garbage):
        with pytest.raises(CorruptFileError):
            import_file(f"local://{target}", bad, progress=False)
        assert not target.exists()  # the file is checked whole before the target is even opened
    assert cli_main(["import", "--store", f"local://{target}", str(truncated), "--no-progress"]) == 1


def _killed_at(store, phase: str) -> bool:
    """Whether the copy into ``store`` has reached ``phase``: "tree" (some metadata keys committed) or
    "state" (the first function's state partly written, its journal entry not yet)."""
    result = store.get(JOURNAL_PATH)
    done = json.loads(result.value)["done"] if result else 0
    if phase == "tree":
        return done >= 10
    return 0 < len(store.get_children("/statekeep/state/acme/ns.1/joins/kv")) < FUNCTIONS[("acme", "ns.1", "joins")]


@pytest.mark.parametrize("phase", ["tree", "state"])
def test_sigkill_mid_copy_then_resume_gives_an_exact_copy(source_url, source_dump, etcd_server, phase):
    target = _etcd(etcd_server)
    command = [sys.executable, "-m", "statekeep.cli", "migrate", "--from", source_url, "--to", target, "--json",
               "--no-progress"]
    proc = subprocess.Popen(command + ["--batch-keys", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open_store(target) as store:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None and not _killed_at(store, phase):
            time.sleep(0.002)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
        journal = json.loads(store.get(JOURNAL_PATH).value)
        dry = migrate(source_url, target, dry_run=True, progress=False)
        assert dry.target_state.endswith(f"would resume after record {journal['done']}")
        assert json.loads(store.get(JOURNAL_PATH).value) == journal
    resumed = subprocess.run(command, capture_output=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr.decode()
    report = json.loads(resumed.stdout)
    assert report["ok"] and 0 < journal["done"] == report["resumed_from"] < sum(report["counts"].values())
    assert dump(target) == source_dump
    assert dump(source_url) == source_dump


def test_dry_run_writes_nothing(source_url, source_dump, zk_server, tmp_path, capsys):
    fresh = tmp_path / "fresh"
    assert cli_main(["migrate", "--from", source_url, "--to", f"local://{fresh}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run" in out and "would be created" in out and "ephemeral" not in out
    assert not fresh.exists()
    target = _zk(zk_server)
    report = migrate(source_url, target, dry_run=True, progress=False)
    assert report.counts["entries"] == sum(FUNCTIONS.values()) + 4 and not report.checks
    assert report.target_state == "empty"
    with open_store(target) as store:
        assert store.get_children("/") == []
    assert dump(source_url) == source_dump


def test_bad_input_is_refused_before_writing(source_url, etcd_server, tmp_path, capsys):
    target = _etcd(etcd_server)
    with open_store(target) as store:
        store.put("/theirs", b"keep me")
    with pytest.raises(TargetNotEmptyError):
        migrate(source_url, target, progress=False)
    assert cli_main(["migrate", "--from", source_url, "--to", target, "--no-progress"]) == 1
    assert "not empty" in capsys.readouterr().err
    with open_store(target) as store:
        assert store.get_children("/") == ["theirs"]
    with pytest.raises(StoreUnavailableError):
        migrate(source_url, "zk://127.0.0.1:1/x?timeout=1", progress=False)
    assert cli_main(["migrate", "--from", f"local://{tmp_path / 'nothing'}", "--to", target]) == 1
    assert "no statekeep store" in capsys.readouterr().err and not (tmp_path / "nothing").exists()
    fresh = tmp_path / "fresh"
    assert cli_main(["migrate", "--from", source_url, "--to", f"local://{fresh}", "--batch-keys", "0"]) == 2
    assert "batch_keys" in capsys.readouterr().err and not fresh.exists()


def test_force_merges_into_a_non_empty_target(source_url, source_dump, etcd_server):
    target = _etcd(etcd_server)
    with open_store(target) as store:
        store.put("/theirs", b"keep me")
        store.put("/app/config", b"overwritten")
    report = migrate(source_url, target, force=True, progress=False)
    assert report.ok
    copy = dump(target)
    assert copy["tree"].pop("/theirs") == (b"keep me", False)
    assert copy == source_dump


def test_force_into_zookeeper_and_import_dry_run(source_url, source_dump, zk_server, tmp_path):
    path = tmp_path / "store.jsonl"
    export_store(source_url, path, progress=False)
    target = _zk(zk_server)
    with open_store(target) as store:
        store.put("/app/config", b"old")
        store.put("/jobs/job-0000000009", b"theirs")  # above the source's counter: the target's stays higher
    dry = import_file(target, path, dry_run=True, force=True, progress=False)
    assert dry.dry_run and not dry.checks and "--force" in dry.target_state
    with open_store(target) as store:
        assert store.get("/app/config").value == b"old" and store.get_children("/") == ["app", "jobs"]
    assert import_file(target, path, force=True, progress=False).ok
    copy = dump(target)
    assert copy["tree"].pop("/jobs/job-0000000009") == (b"theirs", False)
    assert copy == source_dump
    with open_store(target) as store:
        assert int(store.put("/jobs/job-", b"", sequential=True).path[-10:]) > 9


def test_verification_detects_a_different_target(source_url, etcd_server):
    from statekeep.migrate.source import StoreSource
    from statekeep.migrate.verify import verify

    target = _etcd(etcd_server)
    assert migrate(source_url, target, progress=False).ok
    with open_store(target) as store:
        store.put("/app/nested/a/sibling", b"changed")
        provider = open_provider(*function_provider(None, store))
        provider.get_state_store("public", "default", "wc").incr("wc/k00000", 1)
        provider.get_state_store("public", "default", "wc").put("zz-extra", b"x")
        provider.close()
        with open_store(source_url) as source_store:
            source = StoreSource(source_store)
            checks = verify(source.records(), store)
            source.close()
    assert not checks["nodes"].ok and checks["nodes"].mismatches == ["/app/nested/a/sibling"]
    assert checks["nodes"].matched == checks["nodes"].source - 1
    assert not checks["state"].ok and checks["state"].mismatches == [
        "public/default/wc:wc/k00000", "public/default/wc:zz-extra (only on the target)"]
    assert checks["sequences"].ok


def test_partition_owned_state_moves_with_its_manifests(zk_server, tmp_path, monkeypatch):
    """A function with partition-owned state (``--state-dir``): the migration carries its layout and manifests
    (the coordination store's part); its blobs stay in the state dir, from which the function on the target
    restores a new local copy: the same entries, and it keeps committing there."""
    from statekeep.state.partitioned import state_storage
    from statekeep.state.keygroups import key_group, owner

    monkeypatch.setenv("STATEKEEP_STATE_CACHE", str(tmp_path / "cache-source"))
    source, target = f"local://{tmp_path / 'source'}", _zk(zk_server)
    with FunctionService.open(source, default_storage=state_storage(str(tmp_path / "shared"))) as service:
        service.registry.create({"tenant": "t", "namespace": "n", "name": "po", "inputs": ["x"], "py": "f.py"}, CODE)
        state = service.registry.state_store("t", "n", "po")
        for batch in range(3):
            groups, parallelism = state.partitioning(2)
            for p in range(parallelism):
                task = state.task(batch, p, parallelism)
                keys = [f"k{i}" for i in range(400) if owner(key_group(f"k{i}", groups), parallelism, groups) == p]
                task.fetch_many(keys)
                task.apply_batch({k: b"v%d" % batch for k in keys[::2]}, dict.fromkeys(keys[1::2], batch + 1),
                                 marker=f"{batch}-{p}")
        before = [(e.key, e.kind, bytes(e.value), e.version) for e in state.scan_entries()]
    assert len(before) == 400
    report = migrate(source, target, progress=False)
    assert report.ok
    assert {f["fqfn"]: (f["state"], f["from"]) for f in report.functions} == {"t/n/po": ("external", "partitioned")}
    assert "manifests copied with the keys, blobs kept in its state dir" in report.text()
    monkeypatch.setenv("STATEKEEP_STATE_CACHE", str(tmp_path / "cache-target"))  # another machine's copy
    with FunctionService.open(target) as service:
        state = service.registry.state_store("t", "n", "po")
        assert type(state).__name__ == "PartitionedStateStore"
        assert [(e.key, e.kind, bytes(e.value), e.version) for e in state.scan_entries()] == before
        state.put("k1", b"after")
        assert state.get("k1") == b"after"
    assert (tmp_path / "cache-target").exists()
