"""Followers of a subset (KIP-813): a key prefix, a key filter, a transform; on every backend through
the metadata provider and the embedded provider on local:// (the ``leader`` targets of
test_changelog.py), plus a follower process killed with SIGKILL mid-tail."""

from __future__ import annotations

import time

import pytest
from conftest import need

from statekeep.changelog import FollowerStore, SnapshotStore, compact
from statekeep.changelog.replica import LocalReplica
from statekeep.errors import InvalidArgumentError
from statekeep.state.records import counter_bytes
from support.followers import Follower, entries, leader_service, open_follower, write_updates


def follow(leader, tmp_path, local: str, **options) -> FollowerStore:
    """A follower of t/n/f with its copy in ``tmp_path/local``."""
    return FollowerStore.open(leader, "t", "n", "f", local_dir=str(tmp_path / local), poll_interval=0.01,
                              blobs=f"file://{tmp_path}/blobs", **options)


def subset(state, prefix: str, keep=lambda key: True) -> dict:
    return {k: v for k, v in entries(state).items() if k.startswith(prefix) and keep(k)}


def write_prefixed(state, n: int, seed: int = 0) -> None:
    """Puts, deletes and counters under two prefixes, "a/" and "b/"."""
    per = max(1, min(10, state.batch_limits.max_keys // 3))
    for start in range(0, n, per):
        puts, counters = {}, {}
        for i in range(start, min(n, start + per)):
            p = "a/" if (i + seed) % 2 else "b/"
            k = (i * 7 + seed) % max(10, n // 3)
            if i % 5 == 0:
                puts[f"{p}k{k}"] = None
            elif i % 3 == 0:
                counters[f"{p}c{k % 7}"] = counters.get(f"{p}c{k % 7}", 0) + i
            else:
                puts[f"{p}k{k}"] = b"v%d" % i
        state.apply_batch(puts, counters)


def test_a_prefix_follower_converges_exactly(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    n = 200 if leader.store.scheme in ("zk", "etcd", "k8s") else 1000
    write_prefixed(state, n // 2)
    with open_follower(leader, tmp_path, key_prefix="a/") as follower:
        write_prefixed(state, n // 2, seed=3)  # while it tails
        state.delete("a/k1")
        state.incr("a/c1", 5)
        assert follower.wait_until_caught_up(60)
        assert entries(follower) == subset(state, "a/") and subset(state, "a/") and follower.lag == 0
        assert follower.get("b/k2") is None and follower.get_counter("a/c1") == state.get_counter("a/c1")
        assert follower.status()["view"]["keyPrefix"] == "a/"
        # compaction, then a tail with deletes: the follower still equals the subset
        compact(state, tombstone_retention_s=3600)
        write_prefixed(state, 60, seed=5)
        assert follower.wait_until_caught_up(60) and entries(follower) == subset(state, "a/")
    # a new follower of the compacted log converges too
    with follow(leader, tmp_path, "fresh", key_prefix="a/", snapshots=False) as fresh:
        assert fresh.wait_until_caught_up(60) and entries(fresh) == subset(state, "a/")


def test_a_prefix_follower_restores_only_its_subset_from_a_snapshot(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    for i in range(0, 300, 50):  # keys before, inside and after the prefix's range
        state.apply_batch({f"{p}{j:04d}": b"x%d" % j for p in ("a/", "m/", "z/") for j in range(i, i + 50)},
                          {"m/count": 1})
    SnapshotStore(leader.store, f"file://{tmp_path}/blobs").create(state)
    state.put("m/tail", b"t")
    state.put("z/tail", b"t")
    state.delete("m/0001")
    applied = []
    with open_follower(leader, tmp_path, key_prefix="m/", restore_chunk=40, on_apply=applied.extend) as follower:
        assert follower.wait_until_caught_up(60)
        assert entries(follower) == subset(state, "m/") and len(entries(follower)) == 301
        assert sorted(r.key for r in applied) == ["m/0001", "m/tail"]  # only the tail, only its keys
        assert follower.get_counter("m/count") == 6


def test_key_filter_and_transform(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    state.apply_batch({"u/1": b"alice", "u/2": b"bob", "u/3": b"carol", "u/skip": b"x", "v/1": b"other"},
                      {"u/n": 3})

    def keep(key: str) -> bool:
        return not key.endswith("skip")

    def upper(key: str, value: bytes | int) -> bytes | int | None:
        if isinstance(value, int):
            return value * 10  # a counter stays a counter
        return None if value == b"bob" else value.upper()

    with open_follower(leader, tmp_path, key_prefix="u/", key_filter=keep, transform=upper) as follower:
        assert follower.wait_until_caught_up(60)
        assert follower.get("u/1") == b"ALICE" and follower.get("u/2") is None and follower.get("u/skip") is None
        assert follower.get("v/1") is None and follower.get_counter("u/n") == 30
        assert follower.get_entry("u/1").version == state.get_entry("u/1").version  # the leader's versions
        state.put("u/2", b"dave")      # now in the view
        state.put("u/1", b"bob")       # the transform drops it: the key goes
        state.put("u/skip", b"y")      # filtered out
        state.delete("u/3")
        state.incr("u/n", 1)
        assert follower.wait_until_caught_up(60)
        assert {k: v[:2] for k, v in entries(follower).items()} == {
            "u/2": ("bytes", b"DAVE"), "u/n": ("counter", counter_bytes(40))}


def test_reopening_with_another_view_rebuilds(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    write_prefixed(state, 100)
    with open_follower(leader, tmp_path, key_prefix="a/") as follower:
        assert follower.wait_until_caught_up(60) and entries(follower) == subset(state, "a/")
        first_gen = follower.status()["generation"]
    with open_follower(leader, tmp_path, key_prefix="a/") as follower:  # same view: resumes
        assert follower.wait_until_caught_up(60) and follower.status()["generation"] == first_gen
    with open_follower(leader, tmp_path, key_prefix="b/") as follower:  # another prefix: rebuilt, no "a/" left
        assert follower.wait_until_caught_up(60) and entries(follower) == subset(state, "b/")
        assert follower.status()["generation"] > first_gen

    def only_c(key: str) -> bool:
        return "/c" in key

    with open_follower(leader, tmp_path, key_prefix="b/", key_filter=only_c) as follower:  # a filter: rebuilt
        assert follower.wait_until_caught_up(60) and entries(follower) == subset(state, "b/", only_c)

    def only_k(key: str) -> bool:  # same name, other code: another view
        return "/k" in key

    only_k.__qualname__ = only_c.__qualname__
    with open_follower(leader, tmp_path, key_prefix="b/", key_filter=only_k) as follower:
        assert follower.wait_until_caught_up(60) and entries(follower) == subset(state, "b/", only_k)
    # an explicit view_id decides instead of the code
    with open_follower(leader, tmp_path, key_prefix="b/", key_filter=only_c, view_id="v1") as follower:
        assert follower.wait_until_caught_up(60) and entries(follower) == subset(state, "b/", only_c)
        gen = follower.status()["generation"]
    with open_follower(leader, tmp_path, key_prefix="b/", key_filter=only_k, view_id="v1") as follower:
        assert follower.status()["generation"] == gen  # the user says it is the same view
    with open_follower(leader, tmp_path) as follower:  # back to everything
        assert follower.wait_until_caught_up(60) and entries(follower) == entries(state)


def test_closures_with_other_values_are_other_views(tmp_path):
    from statekeep.changelog.view import FollowerView

    def make(suffix: str):
        return lambda key: key.endswith(suffix)

    a, b = FollowerView(key_filter=make("x")), FollowerView(key_filter=make("y"))
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == FollowerView(key_filter=make("x")).fingerprint()
    assert FollowerView().fingerprint() is None and FollowerView(key_prefix="p").fingerprint() is not None


def test_bad_view_arguments_write_nothing(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    state.put("k", b"v")
    for bad in ({"key_prefix": 3}, {"key_prefix": b"a"}, {"key_filter": "a/"}, {"transform": 42},
                {"view_id": 7}):
        with pytest.raises(InvalidArgumentError):
            open_follower(leader, tmp_path, **bad)
    assert not (tmp_path / "follower-f").exists()


def test_a_failing_transform_stops_the_follower_and_applies_nothing(leader, tmp_path):
    state = leader.get_state_store("t", "n", "f")
    state.put("ok", b"1")

    def fragile(key: str, value: bytes | int) -> bytes:
        if value == b"boom":
            raise RuntimeError("cannot transform")
        return value

    with open_follower(leader, tmp_path, transform=fragile) as follower:
        assert follower.wait_until_caught_up(60) and follower.get("ok") == b"1"
        state.apply_batch({"ok": b"2", "bad": b"boom"}, {})
        deadline = time.monotonic() + 30
        while follower.status()["error"] is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert follower.status()["phase"] == "failed"
        with pytest.raises(InvalidArgumentError, match="cannot transform"):
            follower.get("ok")
    replica = LocalReplica(str(tmp_path / "follower-f"), "t", "n", "f")
    try:
        assert replica.get_entry("ok").value == b"1"  # the failing batch was not applied at all
    finally:
        replica.close()


def test_prefix_follower_process_killed_mid_tail_resumes_exactly(tmp_path):

    url = f"local://{tmp_path / 'leader'}"
    service, state = leader_service(url)
    with service:
        follower = Follower(url, tmp_path / "follower", "--prefix", "k1")
        try:
            follower.wait_for(lambda s: s["phase"] == "tailing")
            write_updates(state, 30_000, 1000, 20_000)
            follower.wait_for(lambda s: s["appliedOffset"] > 5_000)
            follower.kill()  # SIGKILL mid-tail
            killed_at = follower.status["appliedOffset"]
            write_updates(state, 30_000, 1000, 20_000)
            follower = Follower(url, tmp_path / "follower", "--prefix", "k1")
            first = follower.wait_for(lambda s: s["phase"] == "tailing")
            assert first["appliedOffset"] >= killed_at and first["generation"] == 1  # resumed, no bootstrap
            expected = subset(state, "k1")
            assert expected and follower.dump(tmp_path / "dump.json") == expected
            follower.quit()
        finally:
            if follower.proc.poll() is None:
                follower.kill()


def test_follow_option_and_rest_follower_of_a_prefix(tmp_path):
    need("fastapi")
    from fastapi.testclient import TestClient

    from statekeep.cli.standalone import follower_specs
    from statekeep.server import ServerConfig, create_app

    (spec,) = follower_specs(["a/b/c@etcd://h:2379/x?max_value_size=10&prefix=cust%2F42"], "/data")
    assert spec["leader"] == "etcd://h:2379/x?max_value_size=10" and spec["key_prefix"] == "cust/42"
    assert follower_specs(["a/b/c?prefix=p"], "/data")[0] == {
        "tenant": "a", "namespace": "b", "name": "c", "leader": "local:///data", "local_dir": "/data/followers/a.b.c",
        "key_prefix": "p"}
    assert "key_prefix" not in follower_specs(["a/b/c"], "/data")[0]
    with pytest.raises(InvalidArgumentError):
        follower_specs(["a/b/c?other=1"], "/data")

    url = f"local://{tmp_path / 'leader'}"
    service, state = leader_service(url)
    with service:
        state.apply_batch({"a/1": b"x", "b/1": b"y"}, {"a/n": 4})
        spec = {"tenant": "t", "namespace": "n", "name": "f", "leader": url, "local_dir": str(tmp_path / "fol"),
                "key_prefix": "a/"}
        with TestClient(create_app(ServerConfig(metadata_url="memory://", followers=[spec]))) as client:
            fol = "/admin/v3/followers/t/n/f/state"
            deadline = time.monotonic() + 30
            while client.get(f"{fol}/a/n").status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert [i["key"] for i in client.get(fol).json()["items"]] == ["a/1", "a/n"]
            assert client.get(f"{fol}/b/1").status_code == 404
            (status,) = client.get("/admin/v3/followers").json()
            assert status["view"]["keyPrefix"] == "a/" and status["lag"] == 0
        with pytest.raises(InvalidArgumentError):
            create_app(ServerConfig(metadata_url="memory://", followers=[{**spec, "key_prefix": 5}]))


def test_followers_get_with_a_prefix(capsys, tmp_path):
    import json


    from statekeep.cli import main

    url = f"local://{tmp_path / 'leader'}"
    service, state = leader_service(url)
    with service:
        state.apply_batch({"a/1": b"x", "b/1": b"y"}, {})
        args = ["followers", "get", "--tenant", "t", "--namespace", "n", "--name", "f", "--leader-store", url,
                "--local-dir", str(tmp_path / "fol"), "--prefix", "a/"]
        assert main([*args, "--key", "a/1"]) == 0
        assert json.loads(capsys.readouterr().out)["stringValue"] == "x"
        assert main([*args, "--key", "b/1"]) == 1  # outside the subset: not there


def test_subset_follower_killed_mid_restore_resumes_and_converges(tmp_path):
    """A prefix and a filter: the restore counts the snapshot entries it read apart from those it
    wrote, and a restart resumes after the read ones."""

    url = f"local://{tmp_path / 'leader'}"
    service, state = leader_service(url)
    view = ("--prefix", "key0", "--even", "--restore-chunk", "500")
    with service:
        for start in range(0, 200_000, 10_000):
            state.apply_batch({f"key{i:06d}": b"x" * 20 for i in range(start, start + 10_000)}, {})
        SnapshotStore(service.registry.store).create(state)
        write_updates(state, 5_000, 500, 200_000)
        follower = Follower(url, tmp_path / "follower", *view)
        try:
            follower.wait_for(lambda s: s["phase"] == "restoring" and (s["restoredEntries"] or 0) >= 10_000)
            follower.kill()
            replica = LocalReplica(str(tmp_path / "follower"), "t", "n", "f")
            progress = replica.load().restore
            replica.close()
            assert progress is not None, "the restore finished before the kill"
            assert progress["source"] == "snapshot" and progress["read"] > progress["written"] >= 10_000
            follower = Follower(url, tmp_path / "follower", *view)
            follower.wait_for(lambda s: s["phase"] == "tailing")
            restoring = [s["restoredEntries"] for s in follower.seen if s["phase"] == "restoring"]
            assert not restoring or min(restoring) >= progress["written"]  # resumed where it stopped
            write_updates(state, 2_000, 500, 200_000)
            expected = subset(state, "key0", lambda k: k[-1] in "02468")
            assert expected and follower.dump(tmp_path / "dump.json") == expected
            follower.quit()
        finally:
            if follower.proc.poll() is None:
                follower.kill()


def test_snapshot_decoding_of_a_prefix_equals_filtering_the_whole():
    import io

    from statekeep.errors import CorruptStateError
    from statekeep.state import records
    from statekeep.state.partitioned import entries

    keys = sorted({f"k{i % 97:02d}/{i}" for i in range(3000)} | {"a", "k", "k5", "zz", "é/ü"})
    data = b"".join(entries.encode(entries.SNAPSHOT, ((k.encode(), records.entry_bytes(
        i, "counter" if i % 3 == 0 else "bytes", counter_bytes(i) if i % 3 == 0 else b"v" * (i % 50)))
        for i, k in enumerate(keys)), chunk_size=4096))
    whole = list(entries.decode(entries.SNAPSHOT, io.BytesIO(data).read, "s", chunk_size=1000))
    assert [k.decode() for k, _ in whole] == keys
    for prefix in ("", "k", "k5", "k50/", "k96/", "a", "zz", "zzz", "0", "é", "k5/1"):
        got = list(entries.decode(entries.SNAPSHOT, io.BytesIO(data).read, "s", chunk_size=1000,
                                  key_prefix=prefix.encode()))
        assert got == [p for p in whole if p[0].decode().startswith(prefix)], prefix
    with pytest.raises(CorruptStateError):  # a truncated stream still fails
        list(entries.decode(entries.SNAPSHOT, io.BytesIO(data[:len(data) // 2 + 3]).read, "s", key_prefix=b"zz"))
