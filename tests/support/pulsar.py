"""Helpers of the Pulsar tests: the run's Pulsar standalone with the statekeep server keeping its functions' state
(the ``pulsar`` fixture's object), topics, and the Java test function (tests/pulsar_function) compiled with javac
against ``pulsar-functions-api`` and deployed through Pulsar's own REST API."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from statekeep.testing.servers import PulsarServer
from support.server_process import ServerProcess

FUNCTION_SOURCES = Path(__file__).resolve().parent.parent / "pulsar_function"


@dataclass
class PulsarWithState:
    """A Pulsar standalone (``broker``) whose functions worker keeps function state in ``statekeep`` (a
    ``statekeep standalone`` process) through statekeep's state provider (java/pulsar-state-provider)."""

    broker: PulsarServer
    statekeep: ServerProcess

    @property
    def service_url(self) -> str:
        return self.broker.service_url

    @property
    def web_url(self) -> str:
        return self.broker.web_url

    def stop(self) -> None:
        self.broker.stop()
        self.statekeep.stop()


def create_topic(web_url: str, topic: str, partitions: int = 0) -> None:
    """Create ``persistent://public/default/TOPIC`` (``partitions`` > 0: a partitioned topic of that many)."""
    path = f"{web_url}/admin/v2/persistent/public/default/{topic}"
    answer = (httpx.put(path + "/partitions", json=partitions, timeout=30) if partitions
              else httpx.put(path, timeout=30))
    assert answer.status_code == 204, answer.text


def function_jar(directory: Path) -> Path:
    """The Java test function compiled (``javac`` against the "pulsar" bundle's ``pulsar-functions-api``) into a
    jar in ``directory``."""
    from statekeep import jars

    api = [p for p in jars.jar_paths("pulsar") if p.name.startswith("pulsar-functions-api-")]
    classes = directory / "classes"
    classes.mkdir(parents=True)
    javac = shutil.which("javac")
    assert javac is not None, "javac (a JDK) is needed to compile the test function"
    subprocess.run([javac, "-d", str(classes), "-cp", str(api[0]), *map(str, FUNCTION_SOURCES.glob("*.java"))],
                   check=True)
    jar = directory / "counter-function.jar"
    with zipfile.ZipFile(jar, "w") as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    return jar


def deploy(web_url: str, name: str, jar: Path, inputs: str, output: str) -> None:
    """Create Java function ``public/default/NAME`` (class CounterFunction of ``jar``) on the worker, as
    ``pulsar-admin functions create`` does (multipart functionConfig + data), and wait until it runs."""
    config = {"tenant": "public", "namespace": "default", "name": name, "className": "CounterFunction",
              "inputs": [f"persistent://public/default/{inputs}"], "output": f"persistent://public/default/{output}",
              "runtime": "JAVA", "parallelism": 1, "subscriptionPosition": "Earliest"}  # sent before it subscribed
    answer = httpx.post(f"{web_url}/admin/v3/functions/public/default/{name}", timeout=120, files={
        "functionConfig": (None, json.dumps(config), "application/json"),
        "data": (jar.name, jar.read_bytes(), "application/octet-stream")})
    assert answer.status_code == 204, answer.text
    wait_running(web_url, name)


def wait_running(web_url: str, name: str, timeout: float = 180) -> dict[str, Any]:
    """The function's status once its one instance runs; AssertionError with the last status after ``timeout``."""
    deadline = time.monotonic() + timeout
    status: Any = None
    while time.monotonic() < deadline:
        try:
            status = httpx.get(f"{web_url}/admin/v3/functions/public/default/{name}/status", timeout=10).json()
            if status.get("numRunning") == 1:
                return dict(status)
        except (httpx.TransportError, ValueError):
            pass  # the worker restarting
        time.sleep(0.5)
    raise AssertionError(f"function {name} not running after {timeout}s: {status}")


def read_all(client: Any, topic: str) -> list[Any]:
    """Every message of ``topic`` (each partition's, in order), read with a Reader from the earliest."""
    import pulsar

    messages = []
    for name in client.get_topic_partitions(topic):
        reader = client.create_reader(name, pulsar.MessageId.earliest)
        while reader.has_message_available():
            messages.append(reader.read_next(30_000))
        reader.close()
    return messages
