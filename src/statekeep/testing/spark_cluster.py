"""A real Spark standalone cluster on loopback, for tests and benchmarks: one master and N workers
started from the launcher PySpark ships (``$SPARK_HOME/bin/spark-class``), ``SPARK_HOME`` being the
installed ``pyspark`` package directory.

    cluster = SparkCluster.start(workers=2)   # 1 core, 1 GiB each
    cluster.master_url                         # "spark://127.0.0.1:PORT"
    cluster.kill_worker(0)                     # SIGKILL the worker and its executors (a crash)
    cluster.restart_worker(0)                  # start it again; waits until it has registered
    cluster.stop()

Every daemon runs in its own process group: executors (child JVMs of a worker) and their Python
workers are in their worker's group, so killing the group kills them all. Nothing is left behind:
each process is stopped by its own PID (group), and the temporary directory is removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeep.functions.driver.sparkpython import spark_python
from statekeep.testing.servers import ServerNotInstalled, free_port

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The installed ``pyspark`` package directory (it holds ``bin/spark-class`` and ``jars/``).
    Raises :class:`ServerNotInstalled` without PySpark or Java."""
    try:
        import pyspark
    except ImportError as e:
        raise ServerNotInstalled("a Spark cluster needs PySpark: pip install 'statekeep[spark]'") from e
    home = Path(pyspark.__file__).parent
    if not (home / "bin" / "spark-class").exists() or not (home / "jars").is_dir():
        raise ServerNotInstalled(f"{home} has no bin/spark-class or jars/")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ServerNotInstalled("a Spark cluster needs a JVM (java on PATH or JAVA_HOME)")
    return home


@dataclass
class _Daemon:
    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self, env: dict[str, str], cwd: Path) -> None:
        with open(self.log_path, "ab") as log:
            # a group of its own: the daemon, the JVMs it forks (executors) and their Python workers
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                            start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the daemon's whole process group and reap the daemon."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the group (the daemon stops its executors), SIGKILL whatever is left after ``timeout``."""
        if self.process is None:
            return
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=timeout)
        self.kill()  # the group may outlive its leader (an executor still shutting down)

    def log_tail(self, size: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""


class SparkCluster:
    """A Spark standalone master and its workers on 127.0.0.1, on free ports, in a temporary directory.
    Use :meth:`start`; call :meth:`stop` (also on failure: it is safe at any point)."""

    def __init__(self, directory: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g",
                 python: str | None = None) -> None:
        self.directory = directory
        self.home = spark_home()
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.webui_port = free_port()
        self.python = python or os.environ.get("PYSPARK_PYTHON") or spark_python()
        # PySpark's own conf directory (its package has none: no spark-env.sh or defaults from elsewhere), as a
        # driver of this PySpark has it: their classpaths are then equal, and they map one class-data archive
        # (statekeep.testing.cds)
        conf_dir = self.home / "conf"
        self.env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_CONF_DIR": str(conf_dir),
                    "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": self.python,
                    "SPARK_DAEMON_MEMORY": os.environ.get("SPARK_DAEMON_MEMORY", "256m")}
        spark_class = str(self.home / "bin" / "spark-class")
        self.master = _Daemon("master", [spark_class, MASTER_CLASS, "--host", "127.0.0.1", "--port", str(self.port),
                                         "--webui-port", str(self.webui_port)], directory / "master.log")
        self.workers: list[_Daemon] = []
        self.worker_ports: list[int] = []
        for i in range(workers):
            work_dir = directory / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            self.worker_ports.append(free_port())
            self.workers.append(_Daemon(f"worker-{i}", [
                spark_class, WORKER_CLASS, "--host", "127.0.0.1", "--port", str(self.worker_ports[-1]),
                "--cores", str(cores), "--memory", memory, "--webui-port", str(free_port()),
                "--work-dir", str(work_dir), self.master_url,
            ], directory / f"worker-{i}.log"))

    @classmethod
    def start(cls, *, workers: int = 2, cores: int = 1, memory: str = "1g", python: str | None = None,
              timeout: float = 120.0) -> SparkCluster:
        """Start a master and ``workers`` workers, and wait until the master is ALIVE and every worker
        has registered. Raises :class:`ServerNotInstalled` without PySpark or Java, ``RuntimeError``
        (with the log's tail) if a daemon exits or is not ready within ``timeout``."""
        cluster = cls(Path(tempfile.mkdtemp(prefix="statekeep-spark-")), workers=workers, cores=cores,
                      memory=memory, python=python)
        try:
            cluster.master.start(cluster.env, cluster.directory)
            cluster._wait(lambda s: s.get("status") == "ALIVE", [cluster.master], timeout)
            for worker in cluster.workers:
                worker.start(cluster.env, cluster.directory)
            for index in range(len(cluster.workers)):
                cluster._wait_registered(index, set(), timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}"

    def state(self) -> dict[str, Any]:
        """The master's JSON status (``/json``: status, workers, aliveworkers, activeapps, ...);
        ``{}`` while it does not answer."""
        try:
            with urllib.request.urlopen(self.webui_url + "/json", timeout=2) as response:
                state: dict[str, Any] = json.loads(response.read())
                return state
        except (OSError, ValueError):
            return {}

    def _registrations(self, index: int, state: dict[str, Any]) -> set[str]:
        """The ids of worker ``index``'s registrations the master holds ALIVE in ``state``."""
        port = self.worker_ports[index]
        return {w["id"] for w in state.get("workers", []) if w.get("port") == port and w.get("state") == "ALIVE"}

    def _wait_registered(self, index: int, old: set[str], timeout: float) -> None:
        self._wait(lambda s: bool(self._registrations(index, s) - old), [self.master, self.workers[index]], timeout)

    def worker_pids(self, index: int) -> list[int]:
        """PIDs in worker ``index``'s process group: the worker, its executors and their Python workers."""
        worker = self.workers[index]
        if not worker.alive:
            return []
        assert worker.process is not None  # alive
        group = worker.process.pid
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == group:
                        pids.append(int(entry.name))
                except (ProcessLookupError, PermissionError):
                    continue
        return sorted(pids)

    def executor_pids(self, index: int) -> list[int]:
        """PIDs of the executor JVMs worker ``index`` runs now."""
        found = []
        for pid in self.worker_pids(index):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in cmdline:
                found.append(pid)
        return found

    def kill_worker(self, index: int) -> None:
        """SIGKILL worker ``index`` with its executors and their Python workers (a machine lost)."""
        self.workers[index].kill()

    def restart_worker(self, index: int, timeout: float = 60.0) -> None:
        """Start worker ``index`` again (after :meth:`kill_worker`) and wait until the master has
        its new registration (the old one may still show ALIVE for a moment)."""
        old = self._registrations(index, self.state())
        self.workers[index].kill()
        self.workers[index].start(self.env, self.directory)
        self._wait_registered(index, old, timeout)

    def stop(self) -> None:
        """Stop every worker (and so its executors), then the master; remove the directory. Idempotent."""
        for worker in self.workers:
            worker.stop()
        self.master.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def logs(self) -> str:
        """The tail of every daemon's log, for a failing test's message."""
        return "\n".join(f"--- {d.name}\n{d.log_tail()}" for d in [self.master, *self.workers])

    def _wait(self, ready: Callable[[dict[str, Any]], bool], daemons: list[_Daemon], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for d in daemons:
                if not d.alive:
                    code = None if d.process is None else d.process.returncode
                    raise RuntimeError(f"spark {d.name} exited with {code}:\n{d.log_tail()}")
            if ready(self.state()):
                return
            time.sleep(0.1)
        raise RuntimeError(f"spark cluster not ready after {timeout}s:\n{self.logs()}")
