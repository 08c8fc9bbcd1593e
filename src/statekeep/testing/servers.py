"""Start real ZooKeeper and etcd servers on loopback, on free ports, with temporary data dirs.

    server = start("zookeeper")      # or "etcd"
    server.address                   # "127.0.0.1:PORT"
    server.kill(); server.restart()  # SIGKILL, then start again on the same port and data dir
    server.stop()

The servers come from Debian's packages (``zookeeper``; ``etcd-server``), which ``scripts/test``
installs. Each is stopped by its own PID.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

ZK_CLASSPATH = "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"


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

    def start(self, timeout: float = 30.0) -> None:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                        cwd=self.data_dir, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.process.returncode}; see {self.log_path}")
            if self._ready(self.port):
                return
            time.sleep(0.05)
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


def _zk_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"ruok")
            return s.recv(4) == b"imok"
    except OSError:
        return False


def _etcd_ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=0.5) as r:
            return b'"true"' in r.read()
    except OSError:
        return False


def zookeeper(data_dir: Path, port: int) -> Server:
    if not all(Path(p).exists() for p in ZK_CLASSPATH.split(":")) or shutil.which("java") is None:
        raise ServerNotInstalled("ZooKeeper needs Debian's 'zookeeper' package and a JVM")
    (data_dir / "data").mkdir(parents=True, exist_ok=True)
    cfg = data_dir / "zoo.cfg"
    cfg.write_text(
        "tickTime=2000\n"
        f"dataDir={data_dir / 'data'}\n"
        f"clientPort={port}\n"
        "clientPortAddress=127.0.0.1\n"
        "maxClientCnxns=0\n"
        "admin.enableServer=false\n"
        "minSessionTimeout=1000\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr,envi,conf\n"
    )
    command = ["java", "-Xmx1g", "-cp", ZK_CLASSPATH,  # holds the whole tree in memory
               "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)]
    return Server("zookeeper", command, port, data_dir, _zk_ready)


def etcd(data_dir: Path, port: int) -> Server:
    binary = shutil.which("etcd") or "/usr/bin/etcd"
    if not Path(binary).exists():
        raise ServerNotInstalled("etcd needs Debian's 'etcd-server' package")
    peer = free_port()
    command = [
        binary, "--logger=zap", "--name", "n1", "--data-dir", str(data_dir / "data"),
        "--listen-client-urls", f"http://127.0.0.1:{port}", "--advertise-client-urls", f"http://127.0.0.1:{port}",
        "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
        "--initial-cluster", f"n1=http://127.0.0.1:{peer}", "--initial-cluster-state", "new",
    ]
    return Server("etcd", command, port, data_dir, _etcd_ready)


def start(kind: str) -> Server:
    """Start a fresh server of ``kind`` ("zookeeper" or "etcd") and wait until it is ready."""
    factory = {"zookeeper": zookeeper, "zk": zookeeper, "etcd": etcd}[kind]
    data_dir = Path(tempfile.mkdtemp(prefix=f"statekeep-{kind}-"))
    server = factory(data_dir, free_port())
    server.start()
    return server


_CLIENTS = {"zk": ("kazoo", "zookeeper"), "etcd": ("aetcd", "etcd")}


@contextlib.contextmanager
def backend_urls(backends: Iterable[str], directory: str) -> Iterator[Iterator[tuple[str, str]]]:
    """For benchmarks: ``(backend, url)`` for each of "memory", "local", "zk", "etcd", starting a
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
                yield backend, f"{backend}://{started[-1].address}/bench{uuid.uuid4().hex[:8]}"

    try:
        yield urls()
    finally:
        for server in started:
            server.stop()
