"""Helpers of the Pulsar tests: the run's Pulsar standalone with the statekeep server keeping its functions' state
(the ``pulsar`` fixture's object), and the Java test function (tests/pulsar_function); the rest is
:mod:`statekeep.testing.pulsar`'s (shared with benchmarks/pulsar_broker.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from statekeep.testing import pulsar as helpers
from statekeep.testing.pulsar import create_topic, read_all, wait_running  # noqa: F401 - the tests' helpers
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


def function_jar(directory: Path) -> Path:
    """The test function (CounterFunction) compiled into a jar in ``directory``."""
    return helpers.function_jar(FUNCTION_SOURCES, directory)


def deploy(web_url: str, name: str, jar: Path, inputs: str, output: str) -> None:
    """Create the test function as ``public/default/NAME`` and wait until it runs."""
    helpers.deploy(web_url, name, jar, "CounterFunction", inputs, output)
