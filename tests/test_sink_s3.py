"""Topics on S3 (moto's server): ``--topics-dir s3://...`` for ``topics produce|consume|ls``, the sink's replay
overwrite there, and a Pulsar pipeline of two functions chained by topics on S3 through ``localrun``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from statekeep.functions.messaging import messages, topics

from support.specs import typed

TOPIC = "persistent://public/default/in"


def test_topics_produce_consume_and_ls_on_s3(s3_server, capsys):
    from support.cli import run as cli

    root = s3_server.url("topics")
    where = ["--topics-dir", root]
    assert cli(capsys, "topics", "produce", "in", "-m", "a", "-m", "b", "-k", "k", *where)[0] == 0
    assert cli(capsys, "topics", "produce", "in", "-m", "c", *where)[0] == 0
    code, out, err = cli(capsys, "topics", "consume", "in", *where)
    assert code == 0, err
    assert [(m["value"], m.get("key")) for m in map(json.loads, out.splitlines())] == [("a", "k"), ("b", "k"),
                                                                                       ("c", None)]
    assert cli(capsys, "topics", "ls", *where)[1].split() == [TOPIC]
    assert not os.path.exists("s3:")  # nothing under a literal local path


def test_a_replayed_batch_overwrites_its_object_and_a_discard_removes_it(s3_server):
    root = s3_server.url("sink")
    spec = typed({"tenant": "t", "namespace": "n", "name": "f", "topics_dir": root})
    out = messages.output_sink(spec, TOPIC)
    assert out.directory == f"{root}/persistent/public/default/in"
    out.write(2, 1, [{"value": "first"}])
    out.write(2, 0, [{"value": "other"}])
    out.write(2, 1, [{"value": "replayed"}])
    assert sorted(m["value"] for m in topics.read(root, TOPIC)) == ["other", "replayed"]
    assert len(topics.files(root, TOPIC)) == 2
    out.discard(2, 1)
    assert [m["value"] for m in topics.read(root, TOPIC)] == ["other"]


RELAY = '''
def process(input, context):
    context.publish("persistent://public/default/side", input.upper())
    return input + "!"
'''
COUNT = '''
def process(input, context):
    context.incr_counter(input, 1)
    return {"seen": input}
'''


def test_functions_read_and_write_topics_on_s3_through_localrun(s3_server, spark_env, tmp_path, capsys):
    """Two functions chained by topics kept under ``--topics-dir s3://...``: the first reads a topic produced
    there, writes its output topic and publishes; the second reads that output topic. Nothing is written to a
    local topics directory."""
    from support.cli import run as cli

    root = s3_server.url("pipeline")
    (tmp_path / "relay.py").write_text(RELAY)
    (tmp_path / "count.py").write_text(COUNT)
    assert cli(capsys, "topics", "produce", "in", "-m", "hello", "-m", "world", "--topics-dir", root)[0] == 0
    common = ["--data-dir", str(tmp_path / "data"), "--topics-dir", root, "--once"]
    for name, inputs, output in (("relay", "persistent://public/default/in", "persistent://public/default/out"),
                                 ("count", "persistent://public/default/out", "persistent://public/default/seen")):
        command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", name, "--py",
                   str(tmp_path / f"{name}.py"), "--inputs", inputs, "--output", output, *common]
        done = subprocess.run(command, env={**os.environ, **spark_env}, cwd=tmp_path, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(m["value"] for m in topics.read(root, "persistent://public/default/out")) == ["hello!", "world!"]
    assert sorted(m["value"] for m in topics.read(root, "persistent://public/default/side")) == ["HELLO", "WORLD"]
    seen = [json.loads(m["value"]) for m in topics.read(root, "persistent://public/default/seen")]
    assert sorted(s["seen"] for s in seen) == ["hello!", "world!"]
    assert not (tmp_path / "data" / "topics").exists() and not (tmp_path / "s3:").exists()


def test_a_function_on_the_cluster_reads_and_writes_topics_on_s3_with_no_shared_filesystem(
        request, s3_server, spark_cluster, spark_env, tmp_path, capsys):
    """localrun --spark-master spark://... with its topics under ``s3://`` and its state in ZooKeeper: the
    executors on the cluster's workers read the input topic and write the output topic through S3 only."""
    import uuid
    from collections import Counter

    from support.cli import run as cli

    from statekeep.functions.config.service import FunctionService

    url = f"zk://{request.getfixturevalue('zk_server').address}/c{uuid.uuid4().hex[:10]}"
    root = s3_server.url("cluster-topics")
    words = [f"w{i % 7}" for i in range(300)]
    for chunk in range(3):
        assert cli(capsys, "topics", "produce", "in", *[a for w in words[chunk::3] for a in ("-m", w)],
                   "--topics-dir", root)[0] == 0
    (tmp_path / "count.py").write_text(COUNT)
    command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", "count", "--py",
               str(tmp_path / "count.py"), "--inputs", TOPIC, "--output", "persistent://public/default/seen",
               "--store", url, "--topics-dir", root, "--checkpoint-dir", str(tmp_path / "checkpoints"),
               "--spark-master", spark_cluster.master_url, "--once"]
    done = subprocess.run(command, env={**os.environ, **spark_env}, cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = [json.loads(m["value"])["seen"] for m in topics.read(root, "persistent://public/default/seen")]
    assert Counter(seen) == Counter(words)
    with FunctionService.open(url) as service:
        state = service.registry.state_store("public", "default", "count")
        assert {e.key: e.counter for e in state.scan_entries()} == Counter(words)
