"""KIP-813 against a real Kafka Streams application (tests/kafka_streams_app, built at setup by
scripts/kafka-streams-app, run as a subprocess on the real broker): Kafka Streams follows a statekeep function's
changelog topic as a read-only state store (Topology.addReadOnlyStateStore) and answers interactive queries the
same as statekeep's state; statekeep follows a Kafka Streams count store's changelog and serves what its
interactive queries serve."""

from __future__ import annotations

import os
import time
import signal
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest
from conftest import missing

from statekeep.functions.config.service import FunctionService
from statekeep.functions.messaging import kafka as sk_kafka
from statekeep.testing import wait_for
from support.kip813 import BUILD_COMMAND, StreamsApp, app_classpath, partition_of, read_topic

SUPPORT = Path(__file__).parent / "support"


@pytest.fixture(scope="module")
def streams_classpath() -> str:
    """The Kafka Streams application's ``java -cp`` (built at setup: nothing is built or downloaded here)."""
    classpath = app_classpath()
    if classpath is None:
        missing(f"the KIP-813 tests' Kafka Streams application is not built (run {BUILD_COMMAND})")
    return classpath


def start_run(tmp_path, spark_env, url, source, out, changelog, parallelism, pauses=()):
    env = {**os.environ, **spark_env, "SK_FLAGS": str(tmp_path), "SK_PAUSE": ",".join(pauses)}
    for pause in pauses:
        (tmp_path / f"armed-{pause.split('@')[0]}").touch()
    log = open(tmp_path / "driver.log", "ab")
    return subprocess.Popen([sys.executable, str(SUPPORT / "kafka_run.py"), "--store", url, "--checkpoints",
                             str(tmp_path / "ck"), "--input", source, "--output", out, "--per-batch", "120",
                             "--parallelism", str(parallelism), "--changelog-topic", changelog],
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def finished(run, tmp_path) -> None:
    try:
        assert run.wait(timeout=400) == 0, (tmp_path / "driver.log").read_text()[-4000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    assert not list(tmp_path.glob("armed-*")), "a fault never happened"


def test_kafka_streams_follows_a_statekeep_function_through_a_kill_a_rescale_and_deletes(
        kafka, spark_env, tmp_path, streams_classpath):
    """A statekeep function counts keys from a Kafka topic with its changelog on a compacted 3-partition topic; a
    Kafka Streams application adds that topic as a read-only store and serves it. Its interactive queries equal
    the function's state after a run in which a Python worker was SIGKILLed (Spark retried its task), and after a
    run restarted with parallelism 3 instead of 2 that deleted two keys; Kafka Streams' key-to-instance metadata
    puts each key in the partition its record is in."""
    source, out, changelog = (f"t{uuid.uuid4().hex[:10]}" for _ in range(3))
    kafka.create_topic(source, partitions=2)
    kafka.create_topic(out, partitions=2)
    kafka.create_topic(changelog, partitions=3, config={"cleanup.policy": "compact"})
    names = [f"kafka://{kafka.address}/{t}" for t in (source, out, changelog)]
    keys = [f"k{i % 17}" for i in range(240)]
    sk_kafka.produce(names[0], [{"key": k, "value": str(i)} for i, k in enumerate(keys)])
    url = f"local://{tmp_path / 'data'}"

    def state() -> dict[str, int]:
        with FunctionService.open(url) as service:
            kcount = service.registry.state_store("public", "default", "kcount")
            return {e.key: e.counter for e in kcount.scan_entries()}

    finished(start_run(tmp_path, spark_env, url, *names, 2, ("kill-worker@1",)), tmp_path)
    assert state() == Counter(keys)
    app = StreamsApp(streams_classpath, "follow", kafka.address, f"follow-{changelog}", changelog,
                     tmp_path / "streams-state", tmp_path / "streams.log")
    try:
        app.wait_running()
        assert wait_for(lambda: app.all() == state(), timeout=60), (app.all(), state())
        placed = {key: p for p, _, key, _ in read_topic(kafka.address, changelog)}
        for key in ("k0", "k5", "k16"):
            got = app.get(key)
            assert got["partition"] == placed[key.encode()] == partition_of(key.encode(), 3), got

        more = [f"k{i % 17}" for i in range(240, 300)]
        sk_kafka.produce(names[0], [{"key": k, "value": str(i)} for i, k in enumerate(more)]
                         + [{"key": "k3", "value": "del"}, {"key": "k5", "value": "del"}])
        finished(start_run(tmp_path, spark_env, url, *names, 3), tmp_path)
        want = state()
        assert "k3" not in want and "k5" not in want and want["k4"] == Counter(keys + more)["k4"]
        assert wait_for(lambda: app.all() == want, timeout=60), (app.all(), want)
        assert app.get("k3") is None
    finally:
        app.stop()


def test_statekeep_follows_a_kafka_streams_count_store_through_a_restart_and_compaction(
        kafka, tmp_path, streams_classpath):
    """A Kafka Streams application counts keys (groupByKey().count(), exactly once) into a store whose changelog
    (APP_ID-counts-changelog) rolls its segments every 100 ms and is compacted at a dirty ratio of 0.01. A
    statekeep follower of that changelog (value=long) serves the application's interactive queries' counts; after
    the application is SIGKILLed and restarted on its state directory; and after the changelog was compacted,
    both the follower that followed it all along and one starting from scratch."""
    from statekeep.changelog import FollowerStore

    source = f"t{uuid.uuid4().hex[:10]}"
    kafka.create_topic(source, partitions=2)
    name = f"kafka://{kafka.address}/{source}"
    app_id = f"count-{source}"
    changelog = f"kafka://{kafka.address}/{app_id}-counts-changelog?value=long"
    sent: Counter = Counter()

    def send(keys: list[str]) -> None:
        sk_kafka.produce(name, [{"key": k, "value": "x"} for k in keys])
        sent.update(keys)

    def app_start() -> StreamsApp:
        app = StreamsApp(streams_classpath, "count", kafka.address, app_id, source, tmp_path / "streams-state",
                         tmp_path / "streams.log", extra={"changelog-config": "segment.ms=100,"
                                                          "min.cleanable.dirty.ratio=0.01,min.compaction.lag.ms=0"})
        app.wait_running()
        return app

    def counts(follower) -> dict[str, int]:
        assert follower.wait_until_caught_up(30)
        return {key: follower.get_counter(key) for key, _ in follower.scan()}

    send([f"k{i % 10}" for i in range(200)])
    app = app_start()
    try:
        assert wait_for(lambda: app.all() == sent, timeout=60), app.all()
        follower = FollowerStore.open(changelog, "public", "default", "counts", local_dir=str(tmp_path / "f1"))
        try:
            assert counts(follower) == app.all() == sent
            assert follower.get_counter("k3") == app.get("k3")["value"] == 20
            app.kill()  # SIGKILL: its open transaction is aborted, its store restored from the changelog
            send([f"k{i % 10}" for i in range(100)])
            app = app_start()
            assert wait_for(lambda: app.all() == sent, timeout=60), app.all()
            # a transaction the killed application left open holds every read_committed reader back (the
            # follower too) until Kafka aborts it, at its timeout (Kafka Streams': 10 s)
            assert wait_for(lambda: counts(follower) == sent, timeout=60), counts(follower)

            topic = changelog.removeprefix(f"kafka://{kafka.address}/").partition("?")[0]
            deadline = time.monotonic() + 90
            while len(read_topic(kafka.address, topic)) >= sum(sent.values()):  # one record per count written
                assert time.monotonic() < deadline, "the changelog was never compacted"
                send([f"k{i}" for i in range(10)])  # a record in each partition rolls its segment
                time.sleep(0.3)
            assert wait_for(lambda: app.all() == sent, timeout=60), app.all()
            scratch = FollowerStore.open(changelog, "public", "default", "counts", local_dir=str(tmp_path / "f2"))
            try:
                assert counts(scratch) == counts(follower) == app.all() == sent
            finally:
                scratch.close()
        finally:
            follower.close()
    finally:
        app.stop()
