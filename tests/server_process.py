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
    def __init__(self, data_dir: Path, tokens: dict | None = None, worker: bool = False) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [sys.executable, "-c", "from statekeep.cli import main; import sys; sys.exit(main())",
                "standalone", "--data-dir", str(data_dir), "--port", str(self.port)]
        if not worker:
            argv.append("--no-worker")  # REST tests need no Spark; tests of the worker ask for it
        if tokens is not None:
            tokens_file = data_dir.parent / f"tokens-{self.port}.json"
            tokens_file.write_text(json.dumps(tokens))
            argv += ["--tokens-file", str(tokens_file)]
        self.log = open(data_dir.parent / f"server-{self.port}.log", "wb")
        self.process = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    self.startup_seconds = 30 - (deadline - time.monotonic())
                    return
            except httpx.TransportError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start; see {self.log.name}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
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
