"""Functions on a real Spark standalone cluster (master and two workers from PySpark's spark-class,
the session's ``spark_cluster``) with state in ZooKeeper or etcd, and standalone servers sharing
one store: exact results through executor loss, and a function moving to a live server when the
server running it is killed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import pytest
from support.followers import Follower
from support.server_process import create_function
from support.spark import write_word_files, write_words

from statekeep.cli import main
from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.spark import read_status
from statekeep.functions.driver.sparkpython import spark_python
from statekeep.testing import wait_for

EXAMPLE = Path(__file__).parent.parent / "examples" / "wordcount"
WORDCOUNT = (EXAMPLE / "wordcount.py").read_bytes()
# a little slower per record, so that a batch is still running when something is killed
SLOW_COUNT = b'''
import time

def process(input, context):
    time.sleep(0.002)
    word = input["word"]
    context.incr_counter(word, 1)
    return {"word": word, "count": context.get_counter(word)}
'''
ENV_SPARK = {"PYSPARK_PYTHON": spark_python(), "SPARK_LOCAL_IP": "127.0.0.1"}
# small micro-batches: one input file each
ONE_FILE_PER_BATCH = {"inputOptions": {"maxFilesPerTrigger": "1"}}


def words_in(directory: Path) -> Counter:
    return Counter(json.loads(line)["word"] for p in directory.glob("*.jsonl") for line in p.read_text().splitlines())


def counters(url: str, name: str) -> dict[str, int]:
    with FunctionService.open(url) as service:
        return {e.key: e.counter for e in service.registry.state_store("public", "default", name).scan_entries()}


def assert_outputs_exact(out: Path, expected: Counter) -> None:
    """Each input record gave exactly one output record: per word, the counts seen are 1..n once each."""
    seen: dict[str, list[int]] = defaultdict(list)
    for path in out.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            seen[record["word"]].append(record["count"])
    assert {w: sorted(c) for w, c in seen.items()} == {w: list(range(1, n + 1)) for w, n in expected.items()}


def store_url(request: pytest.FixtureRequest, backend: str, **options) -> str:
    server = request.getfixturevalue("zk_server" if backend == "zk" else "etcd_server")
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{backend}://{server.address}/c{uuid.uuid4().hex[:10]}" + (f"?{query}" if query else "")


def localrun(name: str, py: Path, inputs: Path, out: Path, url: str, checkpoints: Path, master: str,
             log: Path, extra: list[str] = (), parallelism: int = 2) -> subprocess.Popen:
    command = [sys.executable, "-m", "statekeep.cli", "functions", "localrun", "--name", name, "--py", str(py),
               "--inputs", str(inputs), "--key-field", "word", "--parallelism", str(parallelism), "--output", str(out),
               "--store", url, "--checkpoint-dir", str(checkpoints), "--spark-master", master, "--once",
               "--user-config", json.dumps(ONE_FILE_PER_BATCH), *extra]
    with open(log, "w") as stderr:  # os.environ now: the S3 server's variables when a test started it
        return subprocess.Popen(command, env={**os.environ, **ENV_SPARK}, stdout=subprocess.DEVNULL, stderr=stderr,
                                start_new_session=True, cwd=log.parent)  # its ./.statekeep-data: Spark's log there


def spark_log(log: Path, name: str) -> Path:
    """Spark's log of :func:`localrun`'s run of function ``name`` whose stderr went to ``log``."""
    return log.parent / ".statekeep-data" / "logs" / f"public.default.{name}.spark.log"


def test_function_on_the_cluster_is_exact(request, spark_cluster, tmp_path, capsys):
    """localrun --spark-master spark://... with state on etcd: the executors on the cluster's workers reach
    the shared store, and every counter equals its number of records. (State on ZooKeeper on the cluster:
    the worker-kill test below; each backend's commit path on local Spark: tests/test_functions*_spark.py.)"""
    url = store_url(request, "etcd")
    inputs, out = tmp_path / "in", tmp_path / "out"
    words = [f"w{i % 16}" for i in range(2000)]  # few keys: batches stay small on every backend
    write_word_files(inputs, words)
    apps_before = len(spark_cluster.state().get("completedapps", []))
    run = localrun("wc", EXAMPLE / "wordcount.py", inputs, out, url, tmp_path / "checkpoints",
                   spark_cluster.master_url, tmp_path / "localrun.log")
    assert run.wait(timeout=600) == 0, (tmp_path / "localrun.log").read_text()[-3000:]
    assert counters(url, "wc") == Counter(words)
    assert_outputs_exact(out, Counter(words))
    # it ran as an application of the cluster, not in a local Spark
    # (the master moves an application to completedapps a moment after its driver exits)
    assert wait_for(lambda: len(spark_cluster.state().get("completedapps", [])) > apps_before,
                    timeout=60, interval=0.2)
    # the localrun let go of the function: nobody runs it now
    assert main(["functions", "status", "--name", "wc", "--store", url]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["workerId"] is None and status["running"] is False and status["processed"] == 2000


@pytest.mark.parametrize("state", ["zk", "s3"])
def test_spark_worker_and_executor_killed_mid_run_ends_exact(request, state, spark_cluster, tmp_path):
    """One of the two Spark workers is killed with SIGKILL, with its executor and the executor's
    Python workers, while the query runs: Spark reruns the lost tasks on the other executor, and
    the state and outputs still count every record exactly once. State per key in ZooKeeper, or
    partition-owned (--state-dir) in S3 (moto's server) with ZooKeeper coordinating."""
    url = store_url(request, "zk")
    extra = ["--state-dir", request.getfixturevalue("s3_server").url("cluster")] if state == "s3" else []
    inputs, out = tmp_path / "in", tmp_path / "out"
    words = [f"w{i % 23}" for i in range(3000)]
    write_word_files(inputs, words)
    py = tmp_path / "slow.py"
    py.write_bytes(SLOW_COUNT)
    log = tmp_path / "localrun.log"
    run = localrun("slow", py, inputs, out, url, tmp_path / "checkpoints", spark_cluster.master_url, log, extra)
    victim = None
    try:
        with FunctionService.open(url) as service:
            def with_executor() -> int | None:
                return next((i for i in range(len(spark_cluster.workers)) if spark_cluster.executor_pids(i)), None)

            def mid_run() -> bool:
                status = read_status(service.registry.store, "public", "default", "slow") or {}
                return (status.get("batches", 0) >= 1 and with_executor() is not None) or run.poll() is not None

            assert wait_for(mid_run, timeout=300, interval=0.05), log.read_text()[-3000:]
            victim = with_executor()
            assert run.poll() is None and victim is not None, "the query ended before a worker could be killed"
            processed = (read_status(service.registry.store, "public", "default", "slow") or {}).get("processed", 0)
            assert processed < len(words)
        spark_cluster.kill_worker(victim)  # the worker, its executor JVM and their Python workers
        assert run.wait(timeout=600) == 0, log.read_text()[-3000:]
    finally:
        if run.poll() is None:
            run.kill()
        if victim is not None:
            spark_cluster.restart_worker(victim)  # the cluster is shared by the other tests
    assert "Lost executor" in spark_log(log, "slow").read_text()  # the executor really went, its tasks ran again
    assert counters(url, "slow") == Counter(words)
    assert_outputs_exact(out, Counter(words))
    if state == "s3":
        with FunctionService.open(url) as service:
            assert service.registry.get("public", "default", "slow").stateStorage["config"]["state_dir"] == extra[1]


def test_partition_owned_state_in_s3_rescales_takes_rest_writes_and_feeds_a_follower(server_process, request,
                                                                                     spark_cluster, s3_server,
                                                                                     tmp_path):
    """Partition-owned state in S3 (moto's server), ZooKeeper coordinating, on the standalone cluster: a run at
    parallelism 2 while a second server (another process, sharing only the store) writes state through REST;
    then a run rescaled to 3 over new input; then a follower in a third process reads the state from S3.
    Every count exact, the last REST write of each key kept, each output once, the follower equal."""
    url, state_dir = store_url(request, "zk"), s3_server.url("rescale")
    inputs, out, checkpoints, py = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoints", tmp_path / "slow.py"
    py.write_bytes(SLOW_COUNT)
    words = [f"w{i % 31}" for i in range(5000)]
    write_word_files(inputs, words[:3000])
    server = server_process(tmp_path / "second", store=url)
    stop, written, errors = threading.Event(), Counter(), []
    path = "/admin/v3/functions/public/default/slow/state"

    def writer() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            i = 0
            while not stop.is_set():
                key = f"rest{i % 8}"
                response = client.post(f"{path}/{key}", json={"key": key, "numberValue": written[key] + 1})
                if response.status_code == 200:
                    written[key] += 1
                else:
                    errors.append(response.text)
                i += 1

    try:
        log = tmp_path / "run1.log"
        run = localrun("slow", py, inputs, out, url, checkpoints, spark_cluster.master_url, log,
                       ["--state-dir", state_dir])
        with httpx.Client(base_url=server.url, timeout=60) as client:
            assert wait_for(lambda: client.get(f"{path}/w0").status_code == 200 or run.poll() is not None,
                            timeout=300, interval=0.1), log.read_text()[-3000:]
            thread = threading.Thread(target=writer)
            thread.start()
            try:
                assert run.wait(timeout=600) == 0, log.read_text()[-3000:]
            finally:
                stop.set()
                thread.join()
            assert errors == [] and sum(written.values()) > 0
            assert counters(url, "slow") == {**Counter(words[:3000]), **written}
            # rescaled: new input, parallelism 3
            write_word_files(inputs, words[3000:], first=6)
            log = tmp_path / "run2.log"
            run = localrun("slow", py, inputs, out, url, checkpoints, spark_cluster.master_url, log,
                           ["--state-dir", state_dir], parallelism=3)
            assert run.wait(timeout=600) == 0, log.read_text()[-3000:]
            assert client.get(f"{path}/w0").json()["numberValue"] == Counter(words)["w0"]
        with FunctionService.open(url) as service:
            state = service.registry.state_store("public", "default", "slow")
            layout = state.layout(refresh=True)
            assert (layout.parallelism, layout.generation) == (3, 1)
            leader = {e.key: (e.kind, bytes(e.value), e.version) for e in state.scan_entries()}
        assert {k: v for k, v in counters(url, "slow").items()} == {**Counter(words), **written}
        assert_outputs_exact(out, Counter(words))
        follower = Follower(url, tmp_path / "follower", function=("public", "default", "slow"))
        try:
            follower.wait_for(lambda s: s["phase"] == "tailing")
            assert follower.dump(tmp_path / "dump.json") == leader
            follower.quit()
        finally:
            if follower.proc.poll() is None:
                follower.kill()
    finally:
        stop.set()
        server.stop()


def test_servers_share_a_store_and_a_function_moves_when_its_server_dies(server_process, request, spark_cluster,
                                                                          tmp_path, capsys):
    """Two standalone servers on one ZooKeeper: a function created through one runs on exactly one
    of them and its state is served by both; when the server running it is killed (SIGKILL, with
    its Spark driver), the other takes it over from the shared checkpoint while input keeps arriving,
    and the result is exact."""
    url = store_url(request, "zk", session_timeout=6)  # a dead server's locks go within seconds
    inputs, out, checkpoints = tmp_path / "in", tmp_path / "out", tmp_path / "checkpoints"
    expected: Counter = Counter()

    def add_file(index: int) -> None:
        words = [f"k{(index * 7 + i) % 19}" for i in range(150)]
        write_words(inputs, f"part-{index:03d}.jsonl", words)
        expected.update(words)

    for index in range(3):
        add_file(index)
    options = ["--checkpoint-dir", str(checkpoints), "--spark-master", spark_cluster.master_url]
    servers = [server_process(tmp_path / f"s{i}", worker=True, store=url, extra=options) for i in range(2)]
    writer_done = threading.Event()
    try:
        first, second = servers
        with httpx.Client(base_url=first.url, timeout=30) as via_first, \
                httpx.Client(base_url=second.url, timeout=30) as via_second:
            response = create_function(via_first, "public", "default", "moving", SLOW_COUNT, inputs=[str(inputs)],
                                       keyField="word", parallelism=2, output=str(out), py="moving.py",
                                       userConfig=ONE_FILE_PER_BATCH)
            assert response.status_code == 200, response.text

            def status(client: httpx.Client) -> dict:
                return client.get("/admin/v3/functions/public/default/moving/status").json()["instances"][0]["status"]

            def count(client: httpx.Client, key: str) -> int | None:
                r = client.get(f"/admin/v3/functions/public/default/moving/state/{key}")
                return r.json().get("numberValue") if r.status_code == 200 else None

            # it runs on exactly one of them, and both say which; the other serves its state
            ids = {s.worker_id for s in servers}
            assert wait_for(lambda: status(via_second)["workerId"] in ids and count(via_second, "k0"), timeout=300), \
                [s.log.name for s in servers]
            runner_id = status(via_second)["workerId"]
            assert status(via_first)["workerId"] == runner_id
            # only the runner started a Spark driver: an idle one would hold the cluster's cores
            assert wait_for(lambda: len(spark_cluster.state()["activeapps"]) == 1, timeout=60), \
                spark_cluster.state()["activeapps"]
            # stats: the runner saves them once per micro-batch in the shared store; either server answers
            stats_path = "/admin/v3/functions/public/default/moving/stats"
            assert wait_for(lambda: all(c.get(stats_path).json()["receivedTotal"] > 0 for c in (via_first, via_second)),
                            timeout=120)
            assert main(["functions", "status", "--name", "moving", "--store", url]) == 0
            assert json.loads(capsys.readouterr().out)["workerId"] == runner_id
            runner = next(s for s in servers if s.worker_id == runner_id)
            survivor = next(s for s in servers if s is not runner)

            def keep_writing() -> None:  # new input arrives before, during and after the move
                for index in range(3, 9):
                    if writer_done.wait(1.5):
                        return
                    add_file(index)
                writer_done.set()

            writer = threading.Thread(target=keep_writing, daemon=True)
            writer.start()
            runner.kill()
            with httpx.Client(base_url=survivor.url, timeout=30) as client:
                assert wait_for(lambda: status(client)["workerId"] == survivor.worker_id, timeout=120), \
                    survivor.log.name
                writer.join(timeout=60)
                assert writer_done.is_set()
                assert wait_for(lambda: counters(url, "moving") == expected, timeout=300, interval=0.5), \
                    (counters(url, "moving"), expected, survivor.log.name)
                assert count(client, "k0") == expected["k0"]
        assert words_in(inputs) == expected
        assert wait_for(lambda: sum(1 for p in out.glob("*.jsonl") for _ in p.open()) == sum(expected.values()),
                        timeout=60)
        assert_outputs_exact(out, expected)
    finally:
        writer_done.set()
        for server in servers:
            server.stop()
