"""One state contract (issue 31, part 1): declared capabilities, the partitioned changelog read per
partition (console, changelog source, compaction), and the one rule of function -> provider."""

from __future__ import annotations

import pickle

import pytest

from statekeep.changelog.compaction import Compactor, compact
from statekeep.errors import InvalidArgumentError, UnsupportedCapabilityError
from statekeep.metadata import open_store
from statekeep.state import open_provider
from statekeep.state.base import PER_KEY, Capability
from statekeep.state.catalog import function_provider
from statekeep.state.partitioned import PartitionedStateProvider
from statekeep.state.timestate import buffer_key, recent_records, visible_records

from test_partitioned_state import mine, run_batch
from conftest import need

KEYS = [f"k{i}" for i in range(40)]


@pytest.fixture
def partitioned(tmp_path):
    provider = open_provider("partitioned", {"state_dir": (tmp_path / "shared").as_uri(),
                                             "cache_dir": str(tmp_path / "c"),
                                             "metadata_url": f"local://{tmp_path / 'meta'}"})
    yield provider
    provider.close()


def test_capabilities_are_declared_and_the_error_names_them(partitioned, tmp_path):
    assert PartitionedStateProvider.capabilities == {Capability.CHANGELOG_READ, Capability.PARTITIONED}
    state = partitioned.get_state_store("t", "n", "f")
    with pytest.raises(UnsupportedCapabilityError) as raised:
        state.has_marker("m")
    error = raised.value
    assert (error.capability, error.provider) == ("markers", "partitioned") and "t/n/f" in str(error)
    assert isinstance(error, InvalidArgumentError)  # the REST answer stays a 400
    copy = pickle.loads(pickle.dumps(error))  # crosses from a Spark executor intact
    assert (type(copy), copy.capability, str(copy)) == (UnsupportedCapabilityError, "markers", str(error))
    with open_provider("embedded", {"metadata_url": f"local://{tmp_path / 'e'}"}) as embedded:
        assert embedded.capabilities == PER_KEY == embedded.get_state_store("t", "n", "f").capabilities


def test_partitioned_changelog_is_read_per_partition_in_each_partitions_order(partitioned):
    state = partitioned.get_state_store("t", "n", "f")
    for batch in range(3):
        run_batch(state, batch, 2, KEYS)
    assert state.changelog_partitions() == 2
    with pytest.raises(InvalidArgumentError, match="read_partition_changelog"):
        state.read_changelog()  # one offset cannot cover two partitions: refused, never half the records
    with pytest.raises(InvalidArgumentError, match="partition"):
        state.read_partition_changelog(2)
    total = 0
    for p in range(2):
        log = state.read_partition_changelog(p)
        own = mine(KEYS, p, 2)
        assert [r.key for r in log] == own * 3  # each batch's records, in commit order
        assert [int.from_bytes(r.value, "big", signed=True) for r in log[-len(own):]] == [3] * len(own)
        offsets = [r.offset for r in log]
        assert offsets == sorted(set(offsets))
        assert state.partition_position(p).last_offset == offsets[-1]
        middle = offsets[len(offsets) // 2]
        assert state.read_partition_changelog(p, middle, 5) == [r for r in log if r.offset > middle][:5]
        total += len(log)
    assert state.count_changelog() == total
    position = state.changelog_position()
    assert position.last_offset == max(state.partition_position(p).last_offset for p in range(2))
    assert position.epoch == state.partition_position(1).epoch is not None


def test_compaction_is_refused_where_absent_and_skipped_by_the_compactor(partitioned):
    state = partitioned.get_state_store("t", "n", "f")
    state.put("a", b"1")
    with pytest.raises(UnsupportedCapabilityError, match="compaction"):
        compact(state)
    assert Compactor([state]).run_once() == {}  # skipped, not logged as a failure every pass


def test_readers_never_see_internal_keys_of_partition_owned_state(partitioned):
    state = partitioned.get_state_store("t", "n", "f")
    state.apply_batch({buffer_key("u"): b"[]", "u": b"x"}, {})
    assert [r.key for r in visible_records(state)] == ["u"]
    assert [(p, r.key) for p, r in recent_records(state, 10)] == [(0, "u")]


def test_function_provider_is_one_rule(tmp_path):
    url = f"local://{tmp_path / 'm'}"
    with open_store(url) as store:
        assert function_provider(None, store) == ("embedded", {"store": store})
        assert function_provider(None, url) == ("embedded", {"metadata_url": url})  # nothing opened
        assert function_provider(None, url, ("metadata", {"x": 1})) == ("metadata", {"x": 1})
        # a server's default for another process (the Spark driver's executors): its open store by URL
        assert function_provider(None, url, ("embedded", {"store": store})) == ("embedded", {"metadata_url": url})
        assert function_provider(None, store, ("other", None)) == ("other", {})
        storage = {"provider": "partitioned", "config": {"state_dir": "file:///s"}}
        assert function_provider(storage, store) == ("partitioned", {"state_dir": "file:///s", "store": store})
        assert function_provider(storage, url)[1] == {"state_dir": "file:///s", "metadata_url": url}
        named = {"provider": "metadata", "config": {"metadata_url": "zk://h/x"}}
        assert function_provider(named, store) == ("metadata", {"metadata_url": "zk://h/x"})
        with pytest.raises(InvalidArgumentError, match="stateStorage"):
            function_provider({"provider": 1}, store)
    assert function_provider(None, "zk://h:2181/x")[0] == "metadata"


def test_changelog_source_offsets_per_partition():
    need("pyspark")
    from statekeep.functions.driver.sources import _ChangelogStreamReader, _split

    reader = _ChangelogStreamReader({"function": "t/n/f"})
    assert _split({"offset": 7}) == (None, [7])  # checkpoints of per-key state keep their form
    ranges = reader.partitions({"epoch": "g0.a", "partitions": [3, 9]}, {"epoch": "g0.a", "partitions": [5, 9]})
    assert [(r.partition, r.after, r.last) for r in ranges] == [(0, 3, 5)]
    rescaled = reader.partitions({"epoch": "g0.a", "partitions": [3, 9]}, {"epoch": "g1.b", "partitions": [4, 0, 2]})
    assert [(r.partition, r.after, r.last) for r in rescaled] == [(0, -1, 4), (1, -1, 0), (2, -1, 2)]


def test_console_live_tail_follows_every_partition_and_hides_time_state(tmp_path, monkeypatch):
    """The console's changelog stream on a function with partition-owned state in two partitions: each
    partition's records as they commit, tagged with their partition, never an internal key."""
    import json
    import threading

    from fastapi.testclient import TestClient

    from statekeep.server import ServerConfig, create_app
    from statekeep.server.ui import events

    # no clock: the writer starts once the stream has taken its positions (its hello), and the stream ends
    # after a few passes over the partitions once every write has committed
    streaming, written, passes = threading.Event(), threading.Event(), [0]
    hello = events.hello

    def said_hello(data: object) -> bytes:
        streaming.set()
        return hello(data)

    async def live(request: object, started: float) -> bool:
        passes[0] += written.is_set()
        return passes[0] <= 3

    monkeypatch.setattr(events, "hello", said_hello)
    monkeypatch.setattr(events, "live", live)
    app = create_app(ServerConfig(metadata_url=f"local://{tmp_path / 'data'}", state_dir=str(tmp_path / "shared")))
    with TestClient(app) as client:
        registry = app.state.ctx.registry
        registry.create({"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"},
                        b"def process(input, context):\n    pass\n")
        state = registry.state_store("t", "n", "f")
        run_batch(state, 0, 2, KEYS)  # before the stream: not shown (several partitions: live from now)

        def later() -> None:
            streaming.wait(60)
            for p in range(2):
                task = state.task(1, p, 2)
                own = mine(KEYS, p, 2)
                task.apply_batch({buffer_key(k): b"[]" for k in own}, {k: 5 for k in own}, marker=f"1-{p}")
            written.set()

        writer = threading.Thread(target=later)
        writer.start()
        body = client.get("/ui/api/events/functions/t/n/f/state").text
        writer.join()
    records = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {\"offset\"")]
    assert sorted((r["key"], r["numberValue"]) for r in records) == sorted((k, 6) for k in KEYS)
    assert {r["partition"] for r in records} == {0, 1}
    assert all(mine([r["key"]], r["partition"], 2) for r in records)  # each from the partition owning it


def test_a_store_without_a_readable_changelog_is_refused_by_its_readers(tmp_path):
    """A provider may declare no changelog reading: followers and the changelog readers check the
    declaration and refuse with the error naming it, before anything is opened or read."""
    from statekeep.changelog import FollowerStore

    with open_provider("embedded", {"metadata_url": f"local://{tmp_path / 'e'}"}) as embedded:
        state = embedded.get_state_store("t", "n", "f")
        state.capabilities = frozenset({Capability.MARKERS, Capability.COMPACTION})
        state.put("a", b"1")
        with pytest.raises(UnsupportedCapabilityError, match="changelog_read") as raised:
            FollowerStore.open(state, "t", "n", "f", local_dir=str(tmp_path / "fol"), start=False)
        assert raised.value.provider == "embedded"
        assert not (tmp_path / "fol").exists() or not any((tmp_path / "fol").iterdir())


def test_cli_compact_of_partition_owned_state_says_why(capsys, tmp_path):
    """`functions compact` on a --state-dir function: refused naming the capability, not a pass that
    pretends to have compacted."""
    from support.cli import run

    py = tmp_path / "f.py"
    py.write_text("def process(input, context):\n    return input\n")
    fn = ["--tenant", "t", "--namespace", "n", "--name", "f", "--data-dir", str(tmp_path / "data")]
    assert run(capsys, "functions", "create", *fn, "--py", str(py), "--inputs", "x",
               "--state-dir", str(tmp_path / "shared"))[0] == 0
    assert run(capsys, "functions", "putstate", *fn, "--key", "k", "--state", '{"numberValue": 3}')[0] == 0
    code, out, err = run(capsys, "functions", "compact", *fn)
    assert code == 2 and out == "" and "'partitioned' state provider does not offer 'compaction'" in err
