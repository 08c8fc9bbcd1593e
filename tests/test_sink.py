"""The one output sink (statekeep.functions.messaging.sink): its names, a replay overwriting its own file,
written-synced-renamed, publish order across writers, and topic files of earlier schemes still read."""

from __future__ import annotations

import json
import os
import re

import pytest

from statekeep.functions.messaging import messages, sink, topics
from statekeep.functions.messaging.messages import Message

from support.specs import typed
from conftest import need

SPEC = {"tenant": "t", "namespace": "n", "name": "f", "output_format": "jsonl"}
TOPIC = "persistent://t/n/x"


@pytest.fixture
def clock(monkeypatch):
    """The sink's clock, set by the test: ``clock.now = MS``."""

    class Clock:
        now = 1_700_000_000_000

    monkeypatch.setattr(sink, "_now", lambda: Clock.now)
    return Clock


def values(root, topic=TOPIC):
    return [m["value"] for m in topics.read(root, topic)]


def test_a_batch_file_is_named_by_batch_partition_kind_function_and_commit_time(tmp_path, clock):
    out = messages.output_sink(typed({**SPEC, "topics_dir": str(tmp_path)}), TOPIC)
    assert out.topic and out.directory == topics.directory(str(tmp_path), TOPIC)
    out.write(7, 3, [{"value": "a"}])
    assert os.listdir(out.directory) == [f"batch-000000000007-part-00003-out-t.n.f@{clock.now}.jsonl"]
    dead = messages.output_sink(typed(SPEC), str(tmp_path / "dead"), "dead")
    dead.write(7, 3, ["x"])
    assert os.listdir(tmp_path / "dead") == [f"batch-000000000007-part-00003-dead-t.n.f@{clock.now}.jsonl"]
    assert messages.output_sink(typed(SPEC), "console").directory is None
    assert messages.output_sink(typed(SPEC), None).directory is None


def test_a_replayed_batch_overwrites_its_own_file_and_no_other(tmp_path, clock):
    out = messages.output_sink(typed({**SPEC, "topics_dir": str(tmp_path)}), TOPIC)
    out.write(1, 0, [{"value": "first"}])
    first = os.listdir(out.directory)
    out.write(1, 1, [{"value": "other partition"}])
    clock.now += 5000
    out.write(1, 0, [{"value": "replayed"}])  # a replay, later: the same file again
    other = f"batch-000000000001-part-00001-out-t.n.f@{clock.now - 5000}.jsonl"
    assert sorted(os.listdir(out.directory)) == sorted([*first, other])
    assert values(str(tmp_path)) == ["replayed", "other partition"]
    # another function writing the same (batch, partition) to the topic keeps its own file
    other = typed({**SPEC, "name": "f.x", "topics_dir": str(tmp_path)})
    messages.output_sink(other, TOPIC).write(1, 0, [{"value": "g"}])
    assert values(str(tmp_path)) == ["replayed", "other partition", "g"]
    out.discard(1, 0)
    assert values(str(tmp_path)) == ["other partition", "g"]


def test_a_replay_after_the_upgrade_overwrites_the_file_of_the_earlier_scheme(tmp_path, clock):
    out = messages.output_sink(typed({**SPEC, "topics_dir": str(tmp_path)}), TOPIC)
    os.makedirs(out.directory)
    legacy = os.path.join(out.directory, "batch-000000000004-part-00001-out-t.n.f.jsonl")
    with open(legacy, "w") as f:
        f.write('{"value": "old run"}\n')
    out.write(4, 1, [{"value": "replayed"}])
    assert os.listdir(out.directory) == [os.path.basename(legacy)] and values(str(tmp_path)) == ["replayed"]
    plain = messages.output_sink(typed(SPEC), str(tmp_path / "plain"))  # a path's files had no suffix then
    os.makedirs(plain.directory)
    (tmp_path / "plain" / "batch-000000000004-part-00001.jsonl").write_text('"old"\n')
    plain.write(4, 1, ["new"])
    assert os.listdir(tmp_path / "plain") == ["batch-000000000004-part-00001.jsonl"]


def test_every_file_is_written_synced_then_renamed_and_its_directory_synced(tmp_path, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", os.path.basename(src), os.path.basename(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = topics.write(str(tmp_path), TOPIC, [Message("m").to_json()])
    name = os.path.basename(path)
    temp = f".{name}.{os.getpid()}.tmp"
    assert events == [("fsync", temp), ("rename", temp, name), ("fsync", "x")]
    assert re.fullmatch(r"produce-[0-9a-f]{8}@\d{13}\.jsonl", name)


def test_nothing_is_left_under_a_final_name_when_the_write_fails(tmp_path, monkeypatch):
    def fail(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        messages.output_sink(typed(SPEC), str(tmp_path / "out")).write(0, 0, ["a"])
    assert sink.data_files(str(tmp_path / "out")) == []


def test_readers_take_messages_in_publish_order_across_writers(tmp_path, clock):
    """A function's batch output, a trigger's publish and a ``produce``, interleaved in time, come back in the
    order their files were committed, not grouped by writer (``batch-`` < ``produce-`` < ``trigger-``)."""
    root = str(tmp_path)
    spec = typed({**SPEC, "topics_dir": root})
    out = messages.output_sink(spec, TOPIC)
    clock.now = 1_700_000_000_300
    topics.write(root, TOPIC, [{"value": "produced 1"}])
    clock.now = 1_700_000_000_100
    out.write(0, 0, [{"value": "batch 0"}])
    clock.now = 1_700_000_000_200
    messages.write_targets(spec, {(TOPIC, "pub"): [{"value": "triggered"}]})
    clock.now = 1_700_000_000_400
    out.write(1, 0, [{"value": "batch 1"}])
    assert values(root) == ["batch 0", "triggered", "produced 1", "batch 1"]
    assert topics.files(root, TOPIC) == sorted(topics.files(root, TOPIC), key=lambda n: n.rsplit("@")[1])


def test_topic_files_of_the_earlier_schemes_are_still_read_in_a_defined_order(tmp_path, clock):
    """Files written before this scheme: ``batch-`` files (no time) first, by name; ``produce-``/``trigger-`` files
    by the time in their names; hidden and temporary files never."""
    directory = topics.directory(str(tmp_path), TOPIC)
    os.makedirs(directory)
    legacy = {
        "batch-000000000001-part-00000-out-t.n.f.jsonl": "b1",
        "batch-000000000000-part-00001-out-t.n.f.jsonl": "b0",
        "trigger-1600000000200-0123abcd.jsonl": "t200",
        "produce-1600000000100-89abcdef.jsonl": "p100",
        "produce-1600000000300-89abcdef.jsonl": "p300",
        ".batch-000000000002-part-00000.jsonl.tmp": "temp",
    }
    for name, value in legacy.items():
        with open(os.path.join(directory, name), "w") as f:
            f.write(json.dumps({"value": value}) + "\n\n")
    topics.write(str(tmp_path), TOPIC, [{"value": "new"}])
    assert values(str(tmp_path)) == ["b0", "b1", "p100", "t200", "p300", "new"]


def test_a_line_that_is_not_a_message_record_is_named(tmp_path):
    directory = topics.directory(str(tmp_path), TOPIC)
    os.makedirs(directory)
    with open(os.path.join(directory, "produce-1600000000100-89abcdef.jsonl"), "w") as f:
        f.write('{"value": "a"}\n[1]\n')
    with pytest.raises(Exception, match=r"produce-1600000000100-89abcdef.jsonl:2 of topic persistent://t/n/x"):
        list(topics.read(str(tmp_path), TOPIC))


def test_publish_and_the_log_topic_go_to_their_targets_by_kind(tmp_path, clock):
    from statekeep.functions.messaging.messages import Published, function_logger

    spec = typed({**SPEC, "topics_dir": str(tmp_path), "log_topic": "persistent://t/n/log", "function_id": "id"})
    logger = function_logger(spec, 2)
    assert logger is not None
    logger.info("hello %s", "there")
    published = [(TOPIC, Published("m", key="k")), (str(tmp_path / "side"), Published("plain"))]
    messages.write_targets(spec, messages.published_targets(spec, published, logger), 3, 2)
    assert [(m["value"], m["key"]) for m in topics.read(str(tmp_path), TOPIC)] == [("m", "k")]
    assert [m["value"] for m in topics.read(str(tmp_path), "persistent://t/n/log")] == ["hello there"]
    assert os.listdir(tmp_path / "side") == [f"batch-000000000003-part-00002-pub-t.n.f@{clock.now}.jsonl"]
    assert os.listdir(topics.directory(str(tmp_path), "persistent://t/n/log")) == [
        f"batch-000000000003-part-00002-log-t.n.f@{clock.now}.jsonl"]


# ---- the statekeep-topic stream's offsets (the reader's driver side, no Spark session) ------------------------

def stream_reader(root, **options):
    need("pyspark")
    from statekeep.functions.driver.sources import _TopicStreamReader

    return _TopicStreamReader({"topic": TOPIC, "topicsDir": root, "raw": "true", **options})


def take(reader, start):
    """(the next offset, the values of the messages between start and it, in order)."""
    end = reader.latestOffset(start, reader.getDefaultReadLimit())
    batches = [b for p in reader.partitions(start, end) for b in reader.read(p)] if end != start else []
    return end, [json.loads(line)["value"] for b in batches for line in b.column(0).to_pylist()]


def test_the_topic_stream_takes_each_file_once_in_publish_order(tmp_path, clock):
    root, spec = str(tmp_path), typed({**SPEC, "topics_dir": str(tmp_path)})
    out = messages.output_sink(spec, TOPIC)
    reader = stream_reader(root)
    start = reader.initialOffset()
    clock.now = 1_700_000_000_200
    out.write(0, 1, [{"value": "b0p1"}])
    clock.now = 1_700_000_000_100
    topics.write(root, TOPIC, [{"value": "produced"}, {"value": "produced too"}])
    first, got = take(reader, start)
    assert got == ["produced", "produced too", "b0p1"]
    assert take(reader, first) == (first, [])  # nothing new: the same offset, no batch
    out.write(0, 1, [{"value": "b0p1 replayed"}])  # a replay rewrites the file it took: not taken again
    assert take(reader, first) == (first, [])
    clock.now = 1_700_000_000_150  # committed late, but within LATENESS_MS of the newest taken: taken
    out.write(0, 0, [{"value": "late"}])
    second, got = take(reader, first)
    assert got == ["late"]
    assert reader.partitions(start, first) and take(reader, second) == (second, [])
    # a restarted query is given its last offset: it goes on from there (offsets are JSON data)
    again = stream_reader(root)
    clock.now = 1_700_000_090_000
    out.write(1, 0, [{"value": "b1"}])
    third, got = take(again, json.loads(json.dumps(second)))
    assert got == ["b1"]
    assert third["after"] == 1_700_000_090_000 - 60_000 and len(third["seen"]) == 1  # older names dropped


def test_the_topic_stream_bounds_a_batch_and_stops_where_available_now_started(tmp_path, clock):
    root = str(tmp_path)
    for i in range(5):
        clock.now += 1
        topics.write(root, TOPIC, [{"value": str(i)}])
    reader = stream_reader(root, maxFilesPerTrigger="2")
    reader.prepareForTriggerAvailableNow()
    clock.now += 1
    topics.write(root, TOPIC, [{"value": "after the start"}])
    offset, taken = reader.initialOffset(), []
    while True:
        end, got = take(reader, offset)
        if end == offset:
            break
        assert 1 <= len(got) <= 2
        taken += got
        offset = end
    assert taken == ["0", "1", "2", "3", "4"]
    with pytest.raises(Exception, match="maxFilesPerTrigger"):
        stream_reader(root, maxFilesPerTrigger="0")
