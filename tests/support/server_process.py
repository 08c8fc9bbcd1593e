"""Run ``statekeep standalone`` as a real server process for the REST and CLI tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from statekeep.testing.servers import free_port

FUNCTION = b"def process(input, context):\n    context.incr_counter(input, 1)\n    return input\n"


class ServerProcess:
    """``statekeep standalone`` on ``--data-dir data_dir``, or with ``store`` on ``--store store`` (then
    ``data_dir`` only holds the log). ``extra``: more options. In a process group of its own, so
    :meth:`kill` takes its Spark JVM with it, as a lost machine would (PySpark's daemon keeps a group of
    its own and ends its Python workers within a second of the JVM's death)."""

    def __init__(self, data_dir: Path, tokens: dict | None = None, worker: bool = False, *,
                 store: str | None = None, extra: list[str] = ()) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.worker_id = f"127.0.0.1:{self.port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        where = ["--store", store] if store else ["--data-dir", str(data_dir)]
        argv = [sys.executable, "-c", "from statekeep.cli import main; import sys; sys.exit(main())",
                "standalone", *where, "--port", str(self.port), *extra]
        if not worker:
            argv.append("--no-worker")  # REST tests need no Spark; tests of the worker ask for it
        if tokens is not None:
            tokens_file = data_dir.parent / f"tokens-{self.port}.json"
            tokens_file.write_text(json.dumps(tokens))
            argv += ["--tokens-file", str(tokens_file)]
        self.log = open(data_dir.parent / f"server-{self.port}.log", "wb")  # noqa: SIM115 - open as long as the server
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start; see {self.log.name}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the server with its whole process group (its Spark driver JVM; see the class docstring)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.log.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30 if "--no-worker" not in self.process.args else 10)
            except subprocess.TimeoutExpired:
                pass
        try:  # whatever is left of its group (a Spark JVM still shutting down)
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        self.log.close()


def create_function(client: httpx.Client, tenant: str, namespace: str, name: str, code: bytes = FUNCTION,
                    **config) -> httpx.Response:
    """POST a function the way pulsar-admin does: multipart functionConfig (JSON) + data (the file)."""
    body = {"tenant": tenant, "namespace": namespace, "name": name, "inputs": ["in.jsonl"], "py": "f.py",
            "runtime": "PYTHON", "autoAck": True, **config}
    return client.post(f"/admin/v3/functions/{tenant}/{namespace}/{name}", files={
        "functionConfig": (None, json.dumps(body), "application/json"),
        "data": ("f.py", code, "application/octet-stream")})
