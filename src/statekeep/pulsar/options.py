"""The options the ``statekeep-pulsar`` source and sink share (``serviceUrl``, ``adminUrl``, ``topic``,
``startingOffsets``, ``timeoutSeconds``: see :mod:`statekeep.pulsar.source`), and the Python client they use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError, MissingDependencyError

DEFAULT_TIMEOUT = 30.0


def client_module() -> Any:
    """pulsar-client's ``pulsar`` module; MissingDependencyError naming the extra without it."""
    try:
        import pulsar
    except ImportError as e:
        raise MissingDependencyError(f"the statekeep-pulsar source needs pulsar-client: pip install "
                                     f"'statekeep[pulsar]' ({e})") from e
    return pulsar


class PulsarOptions:
    """The checked options (InvalidArgumentError, in one line, for a missing or malformed one)."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        def required(name: str, prefixes: tuple[str, ...], example: str) -> str:
            value = options.get(name)
            if not value or not str(value).startswith(prefixes):
                raise InvalidArgumentError(f'option "{name}" must be given, e.g. {example}, not {value!r}')
            return str(value).rstrip("/")

        self.service_url = required("serviceUrl", ("pulsar://", "pulsar+ssl://"), "pulsar://127.0.0.1:6650")
        self.admin_url = required("adminUrl", ("http://", "https://"), "http://127.0.0.1:8080")
        self.topic = required("topic", ("persistent://", "non-persistent://"), "persistent://public/default/t")
        parts = self.topic.split("://", 1)[1].split("/")
        if len(parts) != 3 or not all(parts):
            raise InvalidArgumentError(f'option "topic" must be persistent://TENANT/NAMESPACE/TOPIC, not '
                                       f'{self.topic!r}')
        self.starting = str(options.get("startingOffsets", "latest")).lower()
        if self.starting not in ("earliest", "latest"):
            raise InvalidArgumentError(f'option "startingOffsets" must be earliest or latest, not '
                                       f'{options.get("startingOffsets")!r}')
        try:
            self.timeout = float(options.get("timeoutSeconds", DEFAULT_TIMEOUT))
        except ValueError:
            raise InvalidArgumentError(f'option "timeoutSeconds" must be a number of seconds, not '
                                       f'{options.get("timeoutSeconds")!r}') from None
        if not self.timeout > 0:
            raise InvalidArgumentError(f'option "timeoutSeconds" must be positive, not {self.timeout}')

    def client(self) -> Any:
        pulsar = client_module()
        seconds = max(1, int(self.timeout))
        return pulsar.Client(self.service_url, operation_timeout_seconds=seconds,
                             connection_timeout_ms=seconds * 1000, logger=_quiet_logger())


def _quiet_logger() -> Any:
    import logging

    logger = logging.getLogger("statekeep.pulsar.client")
    logger.setLevel(logging.WARNING)  # the C++ client logs every connection at INFO
    return logger
