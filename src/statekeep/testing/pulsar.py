"""Helpers for tests and benchmarks on a real Pulsar standalone (:class:`statekeep.testing.servers.PulsarServer`):
topics through its admin REST API, a Java function compiled with ``javac`` against the "pulsar" jar bundle's
``pulsar-functions-api`` and deployed through the functions worker's REST API (as ``pulsar-admin functions create``
does), and reading a whole topic back."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

from statekeep.errors import MissingDependencyError

try:
    import httpx
except ImportError as e:
    raise MissingDependencyError(f"statekeep.testing.pulsar needs httpx: pip install 'statekeep[test]' ({e})") from e


def create_topic(web_url: str, topic: str, partitions: int = 0) -> None:
    """Create ``persistent://public/default/TOPIC`` (``partitions`` > 0: a partitioned topic of that many);
    RuntimeError with the broker's answer if it refuses."""
    path = f"{web_url}/admin/v2/persistent/public/default/{topic}"
    answer = (httpx.put(path + "/partitions", json=partitions, timeout=30) if partitions
              else httpx.put(path, timeout=30))
    if answer.status_code != 204:
        raise RuntimeError(f"creating topic {topic}: {answer.status_code} {answer.text}")


def function_jar(sources: Path, directory: Path) -> Path:
    """The Java sources in ``sources`` compiled (``javac`` against the "pulsar" bundle's ``pulsar-functions-api``)
    into a jar in ``directory``."""
    from statekeep import jars

    api = [p for p in jars.jar_paths("pulsar") if p.name.startswith("pulsar-functions-api-")]
    classes = directory / "classes"
    classes.mkdir(parents=True)
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("compiling a Pulsar function needs javac (a JDK: default-jdk-headless)")
    subprocess.run([javac, "-d", str(classes), "-cp", str(api[0]), *map(str, sources.glob("*.java"))], check=True)
    jar = directory / "function.jar"
    with zipfile.ZipFile(jar, "w") as out:
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    return jar


def deploy(web_url: str, name: str, jar: Path, class_name: str, inputs: str, output: str) -> None:
    """Create Java function ``public/default/NAME`` (``class_name`` of ``jar``, reading topic ``inputs`` from its
    earliest message, writing ``output``) and wait until it runs; RuntimeError if the worker refuses."""
    config = {"tenant": "public", "namespace": "default", "name": name, "className": class_name,
              "inputs": [f"persistent://public/default/{inputs}"], "output": f"persistent://public/default/{output}",
              "runtime": "JAVA", "parallelism": 1, "subscriptionPosition": "Earliest"}  # sent before it subscribed
    answer = httpx.post(f"{web_url}/admin/v3/functions/public/default/{name}", timeout=120, files={
        "functionConfig": (None, json.dumps(config), "application/json"),
        "data": (jar.name, jar.read_bytes(), "application/octet-stream")})
    if answer.status_code != 204:
        raise RuntimeError(f"creating function {name}: {answer.status_code} {answer.text}")
    wait_running(web_url, name)


def wait_running(web_url: str, name: str, timeout: float = 180) -> dict[str, Any]:
    """The function's status once its one instance runs; RuntimeError with the last status after ``timeout``."""
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
    raise RuntimeError(f"function {name} not running after {timeout}s: {status}")


def read_all(client: Any, topic: str, admin_url: str) -> list[Any]:
    """Every message of ``topic`` (each partition's, in order) through ``client`` (a ``pulsar.Client``), read with a
    Reader from the earliest up to each partition's last message id as the admin API at ``admin_url`` gives it (a
    Reader's ``has_message_available`` says no before the end, here: it cannot tell where a topic ends)."""
    import pulsar

    from statekeep.functions.messaging.pulsarclient import PulsarOptions, last_message_id

    options = PulsarOptions({"serviceUrl": "pulsar://unused", "adminUrl": admin_url, "topic": topic})
    messages = []
    for name in client.get_topic_partitions(topic):
        end = tuple(int(x) for x in last_message_id(options, name).split(":"))
        if end[1] < 0:
            continue  # no message
        reader = client.create_reader(name, pulsar.MessageId.earliest)
        while True:
            message = reader.read_next(30_000)
            messages.append(message)
            ident = message.message_id()
            if (ident.ledger_id(), ident.entry_id(), ident.batch_index()) >= end:
                break
        reader.close()
    return messages
