"""Start real servers on loopback, on free ports, with temporary data dirs: ZooKeeper, etcd and Kafka, a
3-node ZooKeeper ensemble, a 3-node etcd cluster and a 3-node Kafka cluster, and moto's S3 API.

    server = start("zookeeper")      # or "etcd", "kafka", "moto_s3"
    server.address                   # "127.0.0.1:PORT"
    server.kill(); server.restart()  # SIGKILL, then start again on the same port and data dir
    server.stop()

    ensemble = start_ensemble(3)     # zookeeper_ensemble(base_dir, n); start_etcd_cluster(3) is the same shape
    ensemble.url("/chroot")          # "zk://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/chroot" ("etcd://..." for etcd)
    ensemble.kill(ensemble.leader()); ensemble.restart(i); ensemble.stop_all_for(8); ensemble.stop()

    kafka = start("kafka")           # kafka(data_dir, port, settings): one KRaft node; .address: the bootstrap
                                     # (start_kafka(settings): one with server.properties settings of a test's)
    kafka.create_topic("t", partitions=3)
    cluster = start_kafka_cluster(3) # kafka_cluster(base_dir, n): a controller quorum of all n, replication 3
    cluster.bootstrap; cluster.leader("t", 0); cluster.kill(i); cluster.restart(i); cluster.stop_all_for(8)

    s3 = start_s3(["bucket"])        # moto_s3(data_dir, port) + create_bucket(endpoint, bucket)
    s3.endpoint, s3.env, s3.storage_options, s3.url("prefix"); s3.stop()

    k8s = start("kubernetes")        # etcd + kube-apiserver (KubernetesServer): .url, .token, .ca_file,
    k8s.kubeconfig, k8s.namespace    # a kubeconfig file for any client, a namespace made for the run
    k8s.store_url("prefix")          # "k8s://NAMESPACE/prefix?kubeconfig=..."
    k8s.kill(); k8s.restart(); k8s.kill_etcd(); k8s.restart_etcd(); k8s.stop()

ZooKeeper and etcd come from Debian's packages (``zookeeper``; ``etcd-server``), Kafka's jars from Maven Central
(``scripts/kafka-jars``: :mod:`statekeep.jars`) with confluent-kafka (the ``kafka`` extra) for its readiness
probe, kube-apiserver from the Go module proxy (``scripts/kube-apiserver``:
:mod:`statekeep.testing.kubeapiserver`) with keys made by ``openssl`` for the run, moto and s3fs from the
``test`` and ``s3`` extras; ``scripts/test`` installs them all. Each server is stopped by its own PID.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from statekeep.testing.cds import C1

ZK_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
#: how long a Pulsar standalone may take to be ready (its broker, bookie and functions worker): measured 100-125 s
#: on a machine at load 15-22
PULSAR_START_TIMEOUT = 300.0


class ServerNotInstalled(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]  # an AF_INET address: (host, port)
        return port


class Server:
    def __init__(self, kind: str, command: list[str], port: int, data_dir: Path,
                 ready: Callable[[int], bool]) -> None:
        self.kind = kind
        self.command = command
        self.port = port
        self.data_dir = data_dir
        self._ready = ready
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir / f"{kind}.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Start the process without waiting for it to be ready (members of an ensemble are ready
        only together); :meth:`wait_ready` waits."""
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                        cwd=self.data_dir, start_new_session=True)
        log.close()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until the readiness probe answers; kill the server and raise if it exits or times out (or the
        probe itself fails: no server outlives a start that raised)."""
        assert self.process is not None, "launch() first"
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise RuntimeError(f"{self.kind} exited with {self.process.returncode}; see {self.log_path}")
                if self._ready(self.port):
                    return
                time.sleep(0.05)
        except BaseException:
            self.kill()
            raise
        self.kill()
        raise RuntimeError(f"{self.kind} not ready after {timeout}s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL the server (a crash) and wait for it to be gone."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def _etcd_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5) as r:
            return b'"true"' in r.read()
    except OSError:
        return False


def zookeeper(data_dir: Path, port: int) -> Server:
    # -Xmx3g: it holds the whole tree in memory, and a test session's server keeps every test's namespace (the
    # seven large-batch tests alone leave 600 MB live; at 1g a session's server died of OutOfMemoryError)
    return _zk_server("zookeeper", data_dir, port, "3g", "tickTime=2000\nminSessionTimeout=1000\n")


def _zk_server(name: str, data_dir: Path, port: int, heap: str, settings: str) -> Server:
    """A ZooKeeper ``QuorumPeerMain`` serving clients on ``127.0.0.1:port``, its data in ``data_dir/data``,
    with ``settings`` (``zoo.cfg`` lines) besides the common ones; ready when it serves (``srvr`` reports a
    Mode: ``ruok`` answers before it serves)."""
    if not all(Path(p).exists() for p in ZK_CLASSPATH.split(":")) or shutil.which("java") is None:
        raise ServerNotInstalled("ZooKeeper needs Debian's 'zookeeper' package and a JVM")
    (data_dir / "data").mkdir(parents=True, exist_ok=True)
    cfg = data_dir / "zoo.cfg"
    cfg.write_text(
        f"dataDir={data_dir / 'data'}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi,conf\n"
        + settings
    )
    command = ["java", f"-Xmx{heap}", "-cp", ZK_CLASSPATH, "org.apache.zookeeper.server.quorum.QuorumPeerMain",
               str(cfg)]
    return Server(name, command, port, data_dir, _zk_serving)


def _etcd_binary() -> str:
    binary = shutil.which("etcd") or "/usr/bin/etcd"
    if not Path(binary).exists():
        raise ServerNotInstalled("etcd needs Debian's 'etcd-server' package")
    return binary


def _etcd_command(name: str, data_dir: Path, port: int, peer: int, cluster: str, token: str | None = None) -> list[str]:
    """An etcd member ``name`` serving clients on ``port`` and peers on ``peer``, its data in ``data_dir/data``,
    one of ``cluster`` (``--initial-cluster``: ``name=http://127.0.0.1:PEER,...``), started as a new cluster."""
    command = [
        _etcd_binary(), "--logger=zap", "--name", name, "--data-dir", str(data_dir / "data"),
        "--listen-client-urls", f"http://127.0.0.1:{port}", "--advertise-client-urls", f"http://127.0.0.1:{port}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", cluster, "--initial-cluster-state", "new",
    ]
    return command + (["--initial-cluster-token", token] if token else [])


def etcd(data_dir: Path, port: int) -> Server:
    peer = free_port()
    command = _etcd_command("n1", data_dir, port, peer, f"n1=http://127.0.0.1:{peer}")
    return Server("etcd", command, port, data_dir, _etcd_ready)


# ---- S3 (moto) ------------------------------------------------------------------------------------

#: What an S3 client needs besides the endpoint: moto takes any credentials; us-east-1 is the region
#: whose bucket creation needs no LocationConstraint (ENVIRONMENT.md saw InvalidLocationConstraint otherwise).
S3_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                  "AWS_DEFAULT_REGION": "us-east-1"}


def _http_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=0.5) as r:
            r.read()
        return True
    except urllib.error.HTTPError:  # any HTTP answer means it is serving
        return True
    except OSError:
        return False


def moto_s3(data_dir: Path, port: int) -> Server:
    """moto's S3 API on ``127.0.0.1:port`` (``moto_server`` from the venv of ``sys.executable``); ready
    when an HTTP GET answers (about 2 s). Objects live in moto's memory: a restart empties it;
    ``data_dir`` holds only its log.

    A client needs the endpoint ``http://127.0.0.1:PORT`` plus :data:`S3_CREDENTIALS` (any key and secret,
    ``AWS_DEFAULT_REGION=us-east-1``), either as environment or as fsspec storage options
    (:func:`s3_storage_options`). botocore >= 1.31 reads ``AWS_ENDPOINT_URL``, so a process that inherits
    :func:`s3_env` (a Spark executor, a forked worker) reaches moto with no options; with an older botocore
    pass storage options (explicit options win over the environment)."""
    binary = Path(sys.executable).parent / "moto_server"  # not resolved: the venv's bin, not the base Python's
    if not binary.exists():
        raise ServerNotInstalled(f"S3 on loopback needs moto[server] in this venv ({binary} is missing)")
    data_dir.mkdir(parents=True, exist_ok=True)
    return Server("moto_s3", [str(binary), "-H", "127.0.0.1", "-p", str(port)], port, data_dir, _http_ready)


def s3_env(endpoint: str) -> dict[str, str]:
    """The environment that points boto-based clients (s3fs, boto3) at ``endpoint``."""
    return {**S3_CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}


def s3_storage_options(endpoint: str) -> dict[str, Any]:
    """fsspec/s3fs storage options reaching ``endpoint`` whatever the environment holds."""
    # no "region_name" in client_kwargs: s3fs's mkdir sends it as the bucket's LocationConstraint, and
    # "us-east-1" there is refused (InvalidLocationConstraint); the region comes from AWS_DEFAULT_REGION
    return {"key": S3_CREDENTIALS["AWS_ACCESS_KEY_ID"], "secret": S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "client_kwargs": {"endpoint_url": endpoint}}


def create_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on the S3 API at ``endpoint`` through s3fs (nothing if it exists)."""
    try:
        import s3fs
    except ImportError as e:
        raise ServerNotInstalled(f"S3 buckets need s3fs: pip install 'statekeep[s3]' ({e})") from e
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3_storage_options(endpoint))
    if not fs.exists(bucket):
        fs.mkdir(bucket)


class S3Service:
    """A moto S3 server with buckets: ``endpoint``, ``storage_options``, ``env``, ``url(prefix)``."""

    def __init__(self, server: Server, buckets: Sequence[str]) -> None:
        self.server = server
        self.buckets = list(buckets)
        self.bucket = self.buckets[0]

    @property
    def endpoint(self) -> str:
        return f"http://{self.server.address}"

    @property
    def storage_options(self) -> dict[str, Any]:
        return s3_storage_options(self.endpoint)

    @property
    def env(self) -> dict[str, str]:
        return s3_env(self.endpoint)

    def url(self, prefix: str = "t", bucket: str | None = None) -> str:
        """A fresh ``s3://BUCKET/PREFIX-UNIQUE`` (nothing under it yet)."""
        return f"s3://{bucket or self.bucket}/{prefix.strip('/')}-{uuid.uuid4().hex[:12]}"

    def stop(self) -> None:
        self.server.stop()


def start_s3(buckets: Sequence[str] = ("statekeep",)) -> S3Service:
    """Start moto on a free port (a temp dir for its log) and create ``buckets``."""
    server = moto_s3(Path(tempfile.mkdtemp(prefix="statekeep-s3-")), free_port())
    server.start()
    try:
        for bucket in buckets:
            create_bucket(f"http://{server.address}", bucket)
    except BaseException:
        server.stop()
        raise
    return S3Service(server, buckets)


# ---- ensembles: a ZooKeeper ensemble, an etcd cluster ----------------------------------------------------


class Ensemble:
    """N servers of one quorum on loopback, numbered 0..N-1, each keeping its data dir across :meth:`kill`
    and :meth:`restart`. Subclasses say how a client URL starts (``scheme``) and who leads
    (:meth:`_leader`): :class:`ZooKeeperEnsemble`, :class:`EtcdCluster`."""

    scheme = ""

    def __init__(self, base_dir: Path, servers: list[Server]) -> None:
        self.base_dir = base_dir
        self.servers = servers

    @property
    def hosts(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...``: the client addresses of every member."""
        return ",".join(server.address for server in self.servers)

    def url(self, path: str = "") -> str:
        """``SCHEME://127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3/path`` (a chroot or prefix)."""
        path = path.strip("/")
        return f"{self.scheme}://{self.hosts}/{path}" if path else f"{self.scheme}://{self.hosts}"

    def _leader(self) -> int | None:
        """The index of the one member that leads now; None while none or several claim to."""
        raise NotImplementedError

    def leader(self, timeout: float = 30.0) -> int:
        """The index of the leading member, waiting up to ``timeout`` seconds for an election to finish."""
        deadline = time.monotonic() + timeout
        while True:
            found = self._leader()
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise RuntimeError(f"no single {self.scheme} leader after {timeout}s")
            time.sleep(0.05)

    def kill(self, i: int) -> None:
        """SIGKILL server ``i`` (a crash) and wait until it is gone."""
        self.servers[i].kill()

    def restart(self, i: int, timeout: float = 60.0) -> None:
        """Start server ``i`` again (killing it first if it runs) on its data dir and wait until it
        serves (it needs a quorum to: with others down it waits for them)."""
        self.servers[i].kill()
        self.servers[i].start(timeout)

    def start_all(self, timeout: float = 60.0) -> None:
        """Start every server that is not running and wait until all serve."""
        for server in self.servers:
            if not server.running:
                server.launch()
        deadline = time.monotonic() + timeout
        for server in self.servers:
            server.wait_ready(max(deadline - time.monotonic(), 0.1))

    def stop_all_for(self, seconds: float, timeout: float = 60.0) -> None:
        """An outage of the whole ensemble: SIGKILL every server, wait ``seconds``, start them all again
        on their data dirs and wait until all serve."""
        for server in self.servers:
            server.kill()
        time.sleep(seconds)
        self.start_all(timeout)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def _started(self, timeout: float) -> Ensemble:
        """Start every member and wait until all serve; stop them all and raise if they do not."""
        try:
            self.start_all(timeout)
        except BaseException:
            self.stop()
            raise
        return self


def _free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


def zk_mode(port: int) -> str | None:
    """The ``Mode:`` a ZooKeeper server reports to ``srvr`` (leader, follower, standalone); None while it
    is not serving (no quorum, electing) or not answering."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"srvr")
            answer = b""
            while chunk := s.recv(4096):
                answer += chunk
    except OSError:
        return None
    for line in answer.decode(errors="replace").splitlines():
        if line.startswith("Mode:"):
            return line.partition(":")[2].strip()
    return None


def _zk_serving(port: int) -> bool:
    return zk_mode(port) is not None


class ZooKeeperEnsemble(Ensemble):
    """N ZooKeeper servers in one quorum (``myid`` is i+1). See :func:`zookeeper_ensemble`."""

    scheme = "zk"

    def modes(self) -> list[str | None]:
        """Each server's ``srvr`` Mode (None: down or not serving)."""
        return [zk_mode(server.port) if server.running else None for server in self.servers]

    def _leader(self) -> int | None:
        leaders = [i for i, mode in enumerate(self.modes()) if mode == "leader"]
        return leaders[0] if len(leaders) == 1 else None


def zookeeper_ensemble(base_dir: Path, n: int = 3, timeout: float = 60.0) -> ZooKeeperEnsemble:
    """Start ``n`` ``QuorumPeerMain`` servers (``-Xmx200m`` each) forming one ensemble on loopback, on free
    ports, each with its dataDir under ``base_dir`` (``myid`` 1..n, ``tickTime=500``, ``initLimit=10``,
    ``syncLimit=5``, the same ``server.N=127.0.0.1:PEER:ELECTION`` lines), and wait until every server
    answers ``srvr`` with a Mode line (about 3 s). Sessions may ask for up to 60 s (``maxSessionTimeout``)."""
    ports = _free_ports(3 * n)
    client, peer, election = (ports[k::3] for k in range(3))
    quorum = "".join(f"server.{i + 1}=127.0.0.1:{peer[i]}:{election[i]}\n" for i in range(n))
    settings = "tickTime=500\ninitLimit=10\nsyncLimit=5\nmaxSessionTimeout=60000\n" + quorum
    servers = []
    for i in range(n):
        data_dir = base_dir / f"zk{i + 1}"
        servers.append(_zk_server(f"zookeeper{i + 1}", data_dir, client[i], "200m", settings))
        (data_dir / "data" / "myid").write_text(f"{i + 1}\n")
    ensemble = ZooKeeperEnsemble(base_dir, servers)
    ensemble._started(timeout)
    return ensemble


def start_ensemble(n: int = 3) -> ZooKeeperEnsemble:
    """A fresh ZooKeeper ensemble of ``n`` servers in a new temp dir."""
    return zookeeper_ensemble(Path(tempfile.mkdtemp(prefix="statekeep-zk-ensemble-")), n)


def etcd_status(port: int) -> dict[str, Any] | None:
    """What the etcd member serving clients on ``port`` says of itself (the maintenance status API through
    its JSON gateway: ``header.member_id``, ``leader``, ...); None while it does not answer."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v3/maintenance/status", data=b"{}",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=1.0) as r:
            status: dict[str, Any] = json.loads(r.read())
            return status
    except (OSError, ValueError):
        return None


class EtcdCluster(Ensemble):
    """N etcd members in one cluster (named ``n0``..). A member started again on its data dir (after
    :meth:`kill`, :meth:`stop_all_for`) rejoins with ``--initial-cluster-state existing``. See
    :func:`etcd_cluster`."""

    scheme = "etcd"

    def _leader(self) -> int | None:
        # a member names the leader it follows; the one naming itself leads (a killed leader answers nothing)
        leaders = []
        for i, server in enumerate(self.servers):
            status = etcd_status(server.port) if server.running else None
            if status is not None and status.get("leader") not in (None, "0") and (
                    status["leader"] == status.get("header", {}).get("member_id")):
                leaders.append(i)
        return leaders[0] if len(leaders) == 1 else None


def etcd_cluster(base_dir: Path, n: int = 3, timeout: float = 60.0) -> EtcdCluster:
    """Start ``n`` etcd members forming one cluster on loopback (Debian's etcd 3.4: default heartbeat and
    election timeout), on free ports, each with its data dir under ``base_dir``, and wait until each
    reports itself healthy (a leader elected; a few seconds)."""
    _etcd_binary()
    ports = _free_ports(2 * n)
    client, peer = ports[0::2], ports[1::2]
    cluster = ",".join(f"n{i}=http://127.0.0.1:{peer[i]}" for i in range(n))
    token = f"statekeep-{uuid.uuid4().hex[:12]}"  # members of another cluster never join this one
    servers = []
    for i in range(n):
        data_dir = base_dir / f"etcd{i}"
        data_dir.mkdir(parents=True, exist_ok=True)
        command = _etcd_command(f"n{i}", data_dir, client[i], peer[i], cluster, token)
        servers.append(Server(f"etcd{i}", command, client[i], data_dir, _etcd_ready))
    ensemble = EtcdCluster(base_dir, servers)
    ensemble._started(timeout)
    for server in servers:  # from now on each member has its data dir: it rejoins, never founds a cluster
        server.command[server.command.index("--initial-cluster-state") + 1] = "existing"
    return ensemble


def start_etcd_cluster(n: int = 3) -> EtcdCluster:
    """A fresh etcd cluster of ``n`` members in a new temp dir."""
    return etcd_cluster(Path(tempfile.mkdtemp(prefix="statekeep-etcd-cluster-")), n)


# ---- Apache Kafka (KRaft: combined broker and controller nodes) -------------------------------------------

#: the JVM options of a Kafka node: a small heap (a test broker holds little), C1 only (short runs: see
#: statekeep.testing.cds.C1), the serial collector (no GC threads competing for the two cores), and
#: slf4j-simple's log (on stderr, into the node's log file) with times
KAFKA_JVM = ["-Xms64m", "-Xmx512m", C1, "-XX:+UseSerialGC", "-Djava.awt.headless=true",
             "-Dorg.slf4j.simpleLogger.showDateTime=true",
             "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS"]

#: settings every test node has: explicit topics only (an unknown topic is an error, not a new topic),
#: groups that start at once, internal topics of few partitions (created at the first group or
#: transaction: 50 each by default), fewer threads, transactions up to 15 minutes long, a killed producer's
#: expired transaction aborted within a second of its timeout, a killed broker fenced (its partitions'
#: leadership moved) within 3 s rather than 9, and the log cleaner looking for compacted topics to clean every
#: half second rather than 15 s (a test's compaction happens in seconds)
KAFKA_SETTINGS = {
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "num.network.threads": "2", "num.io.threads": "2", "background.threads": "2",
    "num.recovery.threads.per.data.dir": "1", "log.cleaner.threads": "1",
    "transaction.max.timeout.ms": "900000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500",
    "log.cleaner.backoff.ms": "500",
}


def _kafka_classpath() -> str:
    from statekeep import jars
    from statekeep.errors import MissingDependencyError

    if shutil.which("java") is None:
        raise ServerNotInstalled("Kafka needs a JVM (Debian's default-jre-headless)")
    if importlib.util.find_spec("confluent_kafka") is None:  # the readiness probe's client
        raise ServerNotInstalled("Kafka's tests need confluent-kafka: pip install 'statekeep[kafka]'")
    try:
        return jars.classpath("kafka")
    except MissingDependencyError as e:
        raise ServerNotInstalled(f"Kafka's jars are not installed: run scripts/kafka-jars ({e})") from e


def kafka_cluster_id() -> str:
    """A new KRaft cluster id, as ``kafka-storage random-uuid`` makes one (16 random bytes, URL-safe base64
    without padding, never starting with ``-``), without a JVM start."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _kafka_ready(port: int, node_id: int) -> bool:
    """Node ``node_id``, serving clients on ``port``, answers a metadata request that lists it among the
    brokers (a broker is listed once it has caught up with the metadata log and is unfenced: it serves)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    from statekeep.errors import StoreUnavailableError
    from statekeep.kafka import admin

    try:
        return node_id in admin.wait_reachable(f"127.0.0.1:{port}", timeout=2.0)
    except StoreUnavailableError:
        return False


class KafkaServer(Server):
    """One combined Kafka broker and controller (KRaft, no ZooKeeper) serving clients on ``127.0.0.1:port``
    (:attr:`address`: the bootstrap address) and its controller quorum on ``controller_port``. Its storage
    (``data_dir/logs``) is formatted at its first launch (``kafka.tools.StorageTool format``), so
    :meth:`restart` keeps the topics and every committed record. See :func:`kafka`.

    A hazard of Kafka's own (4.4.0, seen here): a transaction whose commit was logged but whose markers were not
    yet written when its coordinator's node is SIGKILLed can hang for good if, when the node comes back, the
    partitions it wrote have no leader while the coordinator resends the markers (Kafka then skips them as if
    the topic were deleted, and never writes the commit's end): read_committed readers stop before it. Every
    partition of a single node is leaderless until its restarted incarnation is unfenced: a single node
    SIGKILLed right after ``commit_transaction`` came back so in about one run of three. On the 3-node
    cluster, the coordinator's node or all three killed right after a commit, six runs out of six did not."""

    def __init__(self, name: str, data_dir: Path, port: int, controller_port: int, node_id: int,
                 voters: str, cluster_id: str, settings: dict[str, str]) -> None:
        classpath = _kafka_classpath()
        data_dir.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self.controller_port = controller_port
        self.cluster_id = cluster_id
        self.config_path = data_dir / "server.properties"
        properties = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(data_dir / "logs"),
            **KAFKA_SETTINGS,
            **settings,
        }
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
        self._format_command = ["java", "-Xmx256m", C1, "-cp", classpath,
                                "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.config_path)]
        command = ["java", *KAFKA_JVM, "-cp", classpath, "kafka.Kafka", str(self.config_path)]
        super().__init__(name, command, port, data_dir, lambda p: _kafka_ready(p, node_id))

    def launch(self) -> None:
        """Format the storage (the first time only), then start the node without waiting."""
        if not (self.data_dir / "logs" / "meta.properties").exists():
            with open(self.log_path, "ab") as log:
                done = subprocess.run(self._format_command, stdout=log, stderr=subprocess.STDOUT,
                                      cwd=self.data_dir, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"formatting {self.kind}'s storage failed ({done.returncode}); see {self.log_path}")
        super().launch()

    def create_topic(self, name: str, partitions: int = 1, replication: int = 1,
                     config: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        """:func:`statekeep.kafka.admin.create_topic` on this node."""
        from statekeep.kafka import admin

        admin.create_topic(self.address, name, partitions, replication, config, timeout)

    def stop(self) -> None:
        """SIGKILL the node and delete its data dir: a graceful shutdown (seconds, longer in a cluster
        losing its quorum) would only save data that is deleted anyway."""
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def kafka(data_dir: Path, port: int, settings: Mapping[str, str] | None = None) -> KafkaServer:
    """A single Kafka node (broker and its own one-voter controller quorum, node id 1) serving clients on
    ``127.0.0.1:port``, data in ``data_dir``: internal topics at replication 1, min ISR 1, :data:`KAFKA_SETTINGS`,
    then ``settings`` (``server.properties`` entries, e.g. ``{"message.max.bytes": "10000"}``). Ready when a
    metadata request answers and lists it (a few seconds). ServerNotInstalled when its jars are not installed
    (``scripts/kafka-jars``)."""
    controller = free_port()
    return KafkaServer("kafka", data_dir, port, controller, 1, f"1@127.0.0.1:{controller}", kafka_cluster_id(), {
        "num.partitions": "1", "default.replication.factor": "1", "min.insync.replicas": "1",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1", **(settings or {})})


def start_kafka(settings: Mapping[str, str] | None = None) -> KafkaServer:
    """A fresh single Kafka node (:func:`kafka`, with ``settings``) in a new temp dir, on a free port, ready."""
    _kafka_classpath()  # ServerNotInstalled before a temp dir is made
    server = kafka(Path(tempfile.mkdtemp(prefix="statekeep-kafka-")), free_port(), settings)
    server.start()
    return server


class KafkaCluster(Ensemble):
    """N combined Kafka nodes (node ids 1..N, indexes 0..N-1) of one cluster whose controller quorum is all
    N (static ``controller.quorum.voters``). :attr:`bootstrap` lists every node; topics default to
    replication 3 (min ISR 2). A node keeps its data across :meth:`kill` and :meth:`restart`. See
    :func:`kafka_cluster`."""

    scheme = "kafka"
    servers: list[KafkaServer]  # type: ignore[assignment]  # narrower than Ensemble's, set by kafka_cluster

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:p1,127.0.0.1:p2,...``: every node's client address (Kafka's ``bootstrap.servers``)."""
        return self.hosts

    def _running_bootstrap(self) -> str:
        running = [server.address for server in self.servers if server.running]
        if not running:
            raise RuntimeError("no Kafka node of the cluster is running")
        return ",".join(running)

    def leader(self, topic: str, partition: int = 0,  # type: ignore[override]  # one leader per partition
               timeout: float = 30.0) -> int:
        """The index of the node leading ``topic``'s ``partition``, waiting up to ``timeout`` seconds for one
        that runs (after a leader's SIGKILL the metadata names it until it is fenced, then a new one)."""
        from statekeep.errors import StoreUnavailableError
        from statekeep.kafka import admin

        deadline = time.monotonic() + timeout
        while True:
            try:
                found = admin.describe(self._running_bootstrap(), topic, timeout=5.0).get(partition)
            except StoreUnavailableError:
                found = None
            if found is not None and found[0] >= 1:
                index = found[0] - 1
                if index < len(self.servers) and self.servers[index].running:
                    return index
            if time.monotonic() >= deadline:
                raise RuntimeError(f"no running leader of {topic}[{partition}] after {timeout}s (last: {found})")
            time.sleep(0.1)

    def create_topic(self, name: str, partitions: int = 1, replication: int = 3,
                     config: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        """:func:`statekeep.kafka.admin.create_topic` on the cluster (default replication 3)."""
        from statekeep.kafka import admin

        admin.create_topic(self._running_bootstrap(), name, partitions, replication, config, timeout)


def kafka_cluster(base_dir: Path, n: int = 3, timeout: float = 90.0,
                  settings: Mapping[str, str] | None = None) -> KafkaCluster:
    """Start ``n`` combined Kafka nodes forming one cluster on loopback (one cluster id, a controller quorum of
    all ``n``), on free ports, each with its data dir under ``base_dir``: topics and internal topics at
    replication ``min(3, n)``, min ISR ``min(2, n)``, then ``settings`` (as :func:`kafka`'s); wait until every
    node serves."""
    ports = _free_ports(2 * n)
    client, controller = ports[0::2], ports[1::2]
    voters = ",".join(f"{i + 1}@127.0.0.1:{controller[i]}" for i in range(n))
    replication, isr = str(min(3, n)), str(min(2, n))
    settings = {"num.partitions": "1", "default.replication.factor": replication, "min.insync.replicas": isr,
                "offsets.topic.replication.factor": replication, "transaction.state.log.replication.factor":
                replication, "transaction.state.log.min.isr": isr, **(settings or {})}
    cluster_id = kafka_cluster_id()
    servers = [KafkaServer(f"kafka{i + 1}", base_dir / f"kafka{i + 1}", client[i], controller[i], i + 1, voters,
                           cluster_id, settings) for i in range(n)]
    cluster = KafkaCluster(base_dir, list(servers))
    cluster._started(timeout)
    return cluster


def start_kafka_cluster(n: int = 3, settings: Mapping[str, str] | None = None) -> KafkaCluster:
    """A fresh Kafka cluster of ``n`` nodes (:func:`kafka_cluster`, with ``settings``) in a new temp dir."""
    _kafka_classpath()  # ServerNotInstalled before a temp dir is made
    return kafka_cluster(Path(tempfile.mkdtemp(prefix="statekeep-kafka-cluster-")), n, settings=settings)


# ---- Apache Pulsar (a standalone: broker, one bookie and the functions worker in one JVM) -------------------

#: the JVM options of a Pulsar standalone: the module openings Pulsar 4 needs on Java 17, Netty's reflective
#: access, a small heap (about 400-440 MB resident with it), C1 only and the serial collector (see KAFKA_JVM)
PULSAR_JVM = ["-Xms64m", "-Xmx512m", C1, "-XX:+UseSerialGC", "-Djava.awt.headless=true",
              "-Dio.netty.tryReflectionSetAccessible=true",
              "--add-opens", "java.base/java.nio=ALL-UNNAMED", "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
              "--add-opens", "java.base/java.lang=ALL-UNNAMED", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
              "--add-opens", "java.management/sun.management=ALL-UNNAMED",
              "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED"]
#: the class the functions worker loads to keep function state in statekeep (java/pulsar-state-provider)
STATEKEEP_PROVIDER_CLASS = "io.statekeep.pulsar.StatekeepStateStoreProvider"
#: the repository's Java state provider module (a clone's; not in an installed package)
PROVIDER_SOURCES = Path(__file__).resolve().parents[3] / "java" / "pulsar-state-provider"


def pulsar_provider_jar() -> Path:
    """Where ``scripts/pulsar-setup`` builds the statekeep state provider's jar: a cache beside the jar cache,
    named after a hash of the module's pom and sources (another source, another build)."""
    import hashlib

    from statekeep import jars

    digest = hashlib.sha256(jars.PULSAR_VERSION.encode())
    for source in sorted([PROVIDER_SOURCES / "pom.xml", *PROVIDER_SOURCES.rglob("*.java")]):
        digest.update(source.relative_to(PROVIDER_SOURCES).as_posix().encode() + b"\0" + source.read_bytes())
    return (jars.cache_dir().parent / "pulsar-state-provider" / f"provider-{digest.hexdigest()[:12]}"
            / "statekeep-pulsar-state-provider.jar")


def build_pulsar_provider() -> Path:
    """Build the state provider with Maven (``mvn -q package``: at setup, never while tests run) unless it is
    built; its jar. RuntimeError when Maven fails."""
    jar = pulsar_provider_jar()
    if jar.exists():
        return jar
    jar.parent.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=jar.parent.parent))
    try:
        from statekeep import jars

        done = subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", "package", f"-Dapp.build={work}",
                               f"-Dpulsar.version={jars.PULSAR_VERSION}"], cwd=PROVIDER_SOURCES)
        if done.returncode != 0:
            raise RuntimeError(f"mvn could not build {PROVIDER_SOURCES} (exit {done.returncode})")
        (work / "out").mkdir()
        (work / jar.name).rename(work / "out" / jar.name)
        (work / "out").rename(jar.parent)  # whole, or not there
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return jar


def _pulsar_classpath(state_url: str | None) -> str:
    from statekeep import jars
    from statekeep.errors import MissingDependencyError

    if shutil.which("java") is None:
        raise ServerNotInstalled("Pulsar needs a JVM (Debian's default-jre-headless)")
    try:
        classpath = jars.classpath("pulsar")
    except MissingDependencyError as e:
        raise ServerNotInstalled(f"Pulsar's jars are not installed: run scripts/pulsar-setup ({e})") from e
    if state_url is None:
        return classpath
    jar = pulsar_provider_jar()
    if not jar.exists():
        raise ServerNotInstalled(f"the statekeep state provider for Pulsar is not built (no {jar}): "
                                 "run scripts/pulsar-setup")
    return f"{jar}{os.pathsep}{classpath}"


def _pulsar_ready(web_port: int) -> bool:
    """The broker serves its admin API, the standalone made its ``public/default`` namespace, and the functions
    worker answers a list of that namespace's functions and says its leader is ready (before it, a function's create
    answers 503 "Leader not yet ready")."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/admin/v2/namespaces/public", timeout=2) as answer:
            if "public/default" not in json.loads(answer.read()):
                return False
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/admin/v3/functions/public/default",
                                    timeout=2) as answer:
            if answer.status != 200:
                return False
        with urllib.request.urlopen(f"http://127.0.0.1:{web_port}/admin/v2/worker/cluster/leader/ready",
                                    timeout=2) as answer:
            return json.loads(answer.read()) is True
    except (OSError, ValueError):  # refused, 404/503 while starting (HTTPError is an OSError), not JSON yet
        return False


class PulsarServer(Server):
    """An Apache Pulsar standalone (``org.apache.pulsar.PulsarStandaloneStarter``: broker, one bookie, the
    functions worker with the thread runtime) on loopback: :attr:`service_url` ``pulsar://127.0.0.1:PORT``,
    :attr:`web_url` ``http://127.0.0.1:WEB`` (admin REST, the functions worker's REST). Broker deduplication is on
    (``brokerDeduplicationEnabled``), topics are not created by a consumer or producer of an unknown one
    (``allowAutoTopicCreation=false``) and not deleted when idle (``brokerDeleteInactiveTopicsEnabled=false``). Its
    data (metadata, ledgers) stays in ``data_dir`` across :meth:`kill` and :meth:`restart`, on the same ports.

    ``state_url``: a statekeep server's URL; the worker then keeps function state in statekeep
    (``stateStorageProviderImplementation`` :data:`STATEKEEP_PROVIDER_CLASS`, ``stateStorageServiceUrl`` that URL).
    In its default RocksDB-metadata mode the standalone replaces any state provider with its own, so with
    ``state_url`` it runs in its ZooKeeper mode (``PULSAR_STANDALONE_USE_ZOOKEEPER=1``: an in-process ZooKeeper on a
    free port, and BookKeeper's stream storage, which that mode starts and this worker does not use)."""

    def __init__(self, data_dir: Path, port: int, web_port: int, state_url: str | None = None,
                 settings: Mapping[str, str] | None = None) -> None:
        classpath = _pulsar_classpath(state_url)
        data_dir.mkdir(parents=True, exist_ok=True)
        self.web_port = web_port
        self.state_url = state_url
        self.bookie_port, self.stream_port, self.zk_port = _free_ports(3)
        conf = {
            "clusterName": "standalone", "bindAddress": "127.0.0.1", "advertisedAddress": "127.0.0.1",
            "brokerServicePort": str(port), "webServicePort": str(web_port), "allowLoopback": "true",
            "managedLedgerDefaultEnsembleSize": "1", "managedLedgerDefaultWriteQuorum": "1",
            "managedLedgerDefaultAckQuorum": "1", "brokerDeduplicationEnabled": "true",
            "allowAutoTopicCreation": "false", "brokerDeleteInactiveTopicsEnabled": "false",
            "functionsWorkerEnabled": "true", "dbStorage_writeCacheMaxSizeMb": "16",
            "dbStorage_readAheadCacheMaxSizeMb": "16", "dbStorage_rocksDB_blockCacheSize": "16777216",
            **({"metadataStoreUrl": f"zk:127.0.0.1:{self.zk_port}"} if state_url else {}),
            **(settings or {}),
        }
        (data_dir / "standalone.conf").write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        worker = {
            "workerId": "standalone", "workerHostname": "127.0.0.1", "workerPort": web_port,
            "pulsarFunctionsNamespace": "public/functions", "pulsarFunctionsCluster": "standalone",
            "functionMetadataTopicName": "metadata", "clusterCoordinationTopicName": "coordinate",
            "functionAssignmentTopicName": "assignments",
            "schedulerClassName": "org.apache.pulsar.functions.worker.scheduler.RoundRobinScheduler",
            "functionRuntimeFactoryClassName": "org.apache.pulsar.functions.runtime.thread.ThreadRuntimeFactory",
            "functionRuntimeFactoryConfigs": {"threadGroupName": "functions"},
            "numFunctionPackageReplicas": 1, "downloadDirectory": str(data_dir / "download"),
            "failureCheckFreqMs": 5000, "rescheduleTimeoutMs": 10000, "initialBrokerReconnectMaxRetries": 60,
            "assignmentWriteMaxRetries": 60, "instanceLivenessCheckFreqMs": 5000,
            **({"stateStorageServiceUrl": state_url, "stateStorageProviderImplementation": STATEKEEP_PROVIDER_CLASS}
               if state_url else {"stateStorageServiceUrl": f"rocksdb://{data_dir / 'state'}"}),
        }
        (data_dir / "functions_worker.yml").write_text(json.dumps(worker, indent=1))  # JSON is YAML
        command = ["java", *PULSAR_JVM, "-cp", classpath, "org.apache.pulsar.PulsarStandaloneStarter",
                   "--config", str(data_dir / "standalone.conf"), "-fwc", str(data_dir / "functions_worker.yml"),
                   "--advertised-address", "127.0.0.1", "--bookkeeper-port", str(self.bookie_port),
                   "--stream-storage-port", str(self.stream_port), "--metadata-dir", str(data_dir / "metadata"),
                   "--bookkeeper-dir", str(data_dir / "bookkeeper")]
        super().__init__("pulsar", command, port, data_dir, lambda _: _pulsar_ready(web_port))

    @property
    def service_url(self) -> str:
        """The broker's binary protocol URL, for clients: ``pulsar://127.0.0.1:PORT``."""
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def web_url(self) -> str:
        """The admin and functions REST URL: ``http://127.0.0.1:WEB``."""
        return f"http://127.0.0.1:{self.web_port}"

    def launch(self) -> None:
        log = open(self.log_path, "ab")
        env = {**os.environ, **({"PULSAR_STANDALONE_USE_ZOOKEEPER": "1"} if self.state_url else {})}
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, cwd=self.data_dir,
                                        start_new_session=True, env=env)
        log.close()

    def start(self, timeout: float = PULSAR_START_TIMEOUT) -> None:
        super().start(timeout)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        """SIGKILL the standalone and delete its data dir (as :meth:`KafkaServer.stop`)."""
        self.kill()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def pulsar(data_dir: Path, port: int, state_url: str | None = None,
           settings: Mapping[str, str] | None = None) -> PulsarServer:
    """A Pulsar standalone (:class:`PulsarServer`) serving its binary protocol on ``127.0.0.1:port`` and its REST
    API on a free port; ``settings``: more ``standalone.conf`` entries. ServerNotInstalled when its jars (or, with
    ``state_url``, the state provider) are not installed (``scripts/pulsar-setup``)."""
    return PulsarServer(data_dir, port, free_port(), state_url, settings)


def start_pulsar(state_url: str | None = None, settings: Mapping[str, str] | None = None) -> PulsarServer:
    """A fresh Pulsar standalone (:func:`pulsar`) in a new temp dir, on free ports, ready (its functions worker
    too): minutes on a loaded machine (:data:`PULSAR_START_TIMEOUT`)."""
    _pulsar_classpath(state_url)  # ServerNotInstalled before a temp dir is made
    server = pulsar(Path(tempfile.mkdtemp(prefix="statekeep-pulsar-")), free_port(), state_url, settings)
    server.start()
    return server


# ---- Kubernetes (kube-apiserver over etcd) ---------------------------------------------------------

def _apiserver_ready(token: str) -> Callable[[int], bool]:
    import ssl

    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # its certificate is made at its start

    def ready(port: int) -> bool:
        request = urllib.request.Request(f"https://127.0.0.1:{port}/readyz",
                                         headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, timeout=1, context=context) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    return ready


def _openssl(*args: str) -> None:
    if shutil.which("openssl") is None:
        raise ServerNotInstalled("the Kubernetes API server's keys are made with openssl (apt-get install openssl)")
    subprocess.run(["openssl", *args], check=True, capture_output=True)


class KubernetesServer(Server):
    """A Kubernetes API server (``kube-apiserver``, built by ``scripts/kube-apiserver``) on ``127.0.0.1:port``
    over an etcd of its own (``self.etcd``), with a bearer token in group ``system:masters``, a self-signed serving
    certificate (``ca_file``) and service-account keys made for the run, authorization ``AlwaysAllow``; ready when
    ``/readyz`` answers 200. ``kubeconfig``: a kubeconfig file for any client; ``namespace``: one made for the
    run. ``kill()``/``restart()`` act on the API server, ``kill_etcd()``/``restart_etcd()`` on its etcd."""

    NAMESPACE = "statekeep"

    def __init__(self, data_dir: Path, port: int) -> None:
        from statekeep.errors import MissingDependencyError
        from statekeep.testing import kubeapiserver

        try:
            binary = kubeapiserver.path()
        except MissingDependencyError as e:
            raise ServerNotInstalled(str(e)) from e
        self.etcd = etcd(data_dir / "etcd", free_port())
        self.etcd.data_dir.mkdir(parents=True, exist_ok=True)
        self.token = uuid.uuid4().hex
        keys = data_dir / "keys"
        keys.mkdir(parents=True, exist_ok=True)
        (keys / "tokens.csv").write_text(f'{self.token},statekeep-admin,statekeep-admin,"system:masters"\n')
        _openssl("genrsa", "-out", str(keys / "sa.key"), "2048")
        _openssl("rsa", "-in", str(keys / "sa.key"), "-pubout", "-out", str(keys / "sa.pub"))
        self.cert_dir = data_dir / "certs"
        command = [
            str(binary), f"--etcd-servers=http://{self.etcd.address}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={port}", f"--cert-dir={self.cert_dir}",
            "--authorization-mode=AlwaysAllow", f"--token-auth-file={keys / 'tokens.csv'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={keys / 'sa.pub'}", f"--service-account-signing-key-file={keys / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24", "--enable-priority-and-fairness=false",
            "--endpoint-reconciler-type=none", "--watch-cache=true",
        ]
        super().__init__("kube-apiserver", command, port, data_dir, _apiserver_ready(self.token))

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The API server's serving certificate (with the CA that signed it), made at its first start."""
        return self.cert_dir / "apiserver.crt"

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def namespace(self) -> str:
        return self.NAMESPACE

    def store_url(self, prefix: str = "") -> str:
        """A ``k8s://`` URL of this server's namespace and ``prefix`` (default: a fresh one)."""
        prefix = prefix or f"t{uuid.uuid4().hex[:12]}"
        return f"k8s://{self.namespace}/{prefix}?kubeconfig={self.kubeconfig}"

    def start(self, timeout: float = 60.0) -> None:
        if not self.etcd.running:
            self.etcd.start()
        try:
            super().start(timeout)
            if not self.kubeconfig.exists():
                self._write_kubeconfig()
                self._create_namespace()
        except BaseException:
            if not self.kubeconfig.exists():  # a first start that failed leaves nothing running
                self.kill()
                self.etcd.stop()
            raise

    def _write_kubeconfig(self) -> None:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "statekeep",
            "clusters": [{"name": "statekeep", "cluster": {"server": self.url, "certificate-authority-data": ca}}],
            "users": [{"name": "statekeep", "user": {"token": self.token}}],
            "contexts": [{"name": "statekeep", "context": {"cluster": "statekeep", "user": "statekeep",
                                                           "namespace": self.namespace}}],
        }
        self.kubeconfig.write_text(json.dumps(config, indent=1))  # JSON is YAML

    def _create_namespace(self) -> None:
        import ssl

        context = ssl.create_default_context(cafile=str(self.ca_file))
        body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/namespaces", data=body, method="POST", headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10, context=context) as r:
            r.read()

    def kill_etcd(self) -> None:
        self.etcd.kill()

    def restart_etcd(self) -> None:
        self.etcd.restart()

    def stop(self) -> None:
        self.kill()  # its graceful shutdown waits for open watches: nothing of a test server needs one
        self.etcd.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


def kubernetes(data_dir: Path, port: int) -> KubernetesServer:
    return KubernetesServer(data_dir, port)


def start(kind: str) -> Server:
    """Start a fresh server of ``kind`` ("zookeeper", "etcd", "kafka", "pulsar", "moto_s3" or "kubernetes") and wait
    until it is ready."""
    factories: dict[str, Callable[[Path, int], Server]] = {
        "zookeeper": zookeeper, "zk": zookeeper, "etcd": etcd, "kafka": kafka, "pulsar": pulsar, "moto_s3": moto_s3,
        "kubernetes": kubernetes, "k8s": kubernetes}
    factory = factories[kind]
    data_dir = Path(tempfile.mkdtemp(prefix=f"statekeep-{kind}-"))
    server = factory(data_dir, free_port())
    server.start()
    return server


_CLIENTS = {"zk": ("kazoo", "zookeeper"), "etcd": ("aetcd", "etcd"), "k8s": ("kubernetes", "kubernetes")}


@contextlib.contextmanager
def backend_urls(backends: Iterable[str], directory: str) -> Iterator[Iterator[tuple[str, str]]]:
    """For benchmarks: ``(backend, url)`` for each of "memory", "local", "zk", "etcd", "k8s", starting a
    fresh server (on a fresh chroot or prefix) as each remote one is reached, skipping with a message
    a backend whose client or server is not installed. Every server started is stopped on exit."""
    started: list[Server] = []

    def urls() -> Iterator[tuple[str, str]]:
        for backend in backends:
            if backend == "memory":
                yield backend, "memory://"
            elif backend == "local":
                yield backend, f"local://{directory}/store-{uuid.uuid4().hex[:8]}"
            else:
                module, kind = _CLIENTS[backend]
                if importlib.util.find_spec(module) is None:
                    print(f"skipping {backend}: {module} is not installed")
                    continue
                try:
                    started.append(start(kind))
                except ServerNotInstalled as e:
                    print(f"skipping {backend}: {e}")
                    continue
                server = started[-1]
                yield backend, (server.store_url(f"bench{uuid.uuid4().hex[:8]}") if isinstance(server, KubernetesServer)
                                else f"{backend}://{server.address}/bench{uuid.uuid4().hex[:8]}")

    try:
        yield urls()
    finally:
        for server in started:
            server.stop()
