"""Apache Kafka through confluent-kafka (librdkafka): what every statekeep Kafka client shares.

- :func:`confluent` imports ``confluent_kafka`` (``pip install 'statekeep[kafka]'``), else raises
  MissingDependencyError naming the extra; nothing in this package imports it at module level.
- :func:`client_config` is the configuration every client starts from: the bootstrap address, bounded
  socket and connection timeouts (librdkafka's defaults retry an unreachable broker for a minute or
  forever), and librdkafka's log sent to the ``statekeep.kafka`` logger instead of stderr.
- :func:`translate` maps a confluent-kafka error onto statekeep's error tree (the cause chained by the
  caller: ``raise translate(e, what) from e``): unreachable or timed out -> StoreUnavailableError, an
  unknown topic -> NotFoundError, an existing one -> AlreadyExistsError, a refused argument (partitions,
  replication factor, config, topic name) -> InvalidArgumentError, too large -> ValueTooLargeError.
- :mod:`statekeep.kafka.admin`: topics (create, describe, delete) and reachability.

Addresses are ``HOST:PORT[,HOST:PORT...]`` (Kafka's ``bootstrap.servers``).
"""

from __future__ import annotations

import logging
import re
from types import ModuleType
from typing import Any

from statekeep.errors import (AlreadyExistsError, InvalidArgumentError, MissingDependencyError, NotFoundError,
                              StatekeepError, StoreUnavailableError, ValueTooLargeError)

#: the logger librdkafka's log lines go to (its connection errors would otherwise go to stderr)
LOG = logging.getLogger("statekeep.kafka")
LOG.addHandler(logging.NullHandler())  # a library's logger: shown only where the application configures logging

#: a client's socket timeout (ms): a request to a broker that does not answer fails after this
SOCKET_TIMEOUT_MS = 10_000

_HOST_PORT = r"([^\s,:/\[\]]+|\[[0-9a-fA-F:.]+\]):\d{1,5}"  # a name, IPv4, or a bracketed IPv6 address
_BOOTSTRAP = re.compile(f"{_HOST_PORT}(,{_HOST_PORT})*")


def confluent() -> ModuleType:
    """The ``confluent_kafka`` module (its ``admin`` imported too); MissingDependencyError naming the extra
    when it is not installed."""
    try:
        import confluent_kafka
        import confluent_kafka.admin  # noqa: F401 - confluent_kafka.admin, for the callers
    except ImportError as e:
        raise MissingDependencyError(f"Kafka needs confluent-kafka: pip install 'statekeep[kafka]' ({e})") from e
    return confluent_kafka


def check_bootstrap(bootstrap: object) -> str:
    """``bootstrap`` if it is ``HOST:PORT[,HOST:PORT...]``; InvalidArgumentError otherwise."""
    if not isinstance(bootstrap, str) or not _BOOTSTRAP.fullmatch(bootstrap):
        raise InvalidArgumentError(f"a Kafka bootstrap address must be HOST:PORT[,HOST:PORT...], got {bootstrap!r}")
    return bootstrap


def client_config(bootstrap: str, **settings: Any) -> dict[str, Any]:
    """librdkafka settings for a client of ``bootstrap`` (checked), ``settings`` added or overriding
    (Kafka's dotted names, e.g. ``client_config(b, **{"transactional.id": "t"})``)."""
    return {
        "bootstrap.servers": check_bootstrap(bootstrap),
        "socket.timeout.ms": SOCKET_TIMEOUT_MS,
        "socket.connection.setup.timeout.ms": SOCKET_TIMEOUT_MS,
        "reconnect.backoff.max.ms": 1000,  # a broker back from a restart is seen within a second
        "logger": LOG,
        **settings,
    }


#: librdkafka and broker error names -> statekeep's class for them
_UNAVAILABLE = {"_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE", "_WAIT_COORD", "REQUEST_TIMED_OUT",
                "NOT_CONTROLLER", "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "BROKER_NOT_AVAILABLE",
                "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "NETWORK_EXCEPTION",
                "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS",
                "_TIMED_OUT_QUEUE", "_MSG_TIMED_OUT", "KAFKA_STORAGE_ERROR"}
_BY_NAME: dict[str, type[StatekeepError]] = {
    **{name: StoreUnavailableError for name in _UNAVAILABLE},
    "UNKNOWN_TOPIC_OR_PART": NotFoundError, "_UNKNOWN_TOPIC": NotFoundError, "_UNKNOWN_PARTITION": NotFoundError,
    "UNKNOWN_TOPIC_ID": NotFoundError,
    "TOPIC_ALREADY_EXISTS": AlreadyExistsError,
    "INVALID_PARTITIONS": InvalidArgumentError, "INVALID_REPLICATION_FACTOR": InvalidArgumentError,
    "INVALID_CONFIG": InvalidArgumentError, "TOPIC_EXCEPTION": InvalidArgumentError,
    "INVALID_REQUEST": InvalidArgumentError, "POLICY_VIOLATION": InvalidArgumentError,
    "_INVALID_ARG": InvalidArgumentError,
    "MSG_SIZE_TOO_LARGE": ValueTooLargeError, "_MSG_SIZE_TOO_LARGE": ValueTooLargeError,
    "RECORD_LIST_TOO_LARGE": ValueTooLargeError,
}


def _kafka_error(error: object) -> object:
    """The ``KafkaError`` a ``KafkaException`` carries (its first argument), else ``error`` itself."""
    return error.args[0] if isinstance(error, Exception) and error.args else error


def error_name(error: object) -> str | None:
    """The librdkafka/broker error name (``KafkaError.name()``, e.g. ``"UNKNOWN_TOPIC_OR_PART"``) of a
    ``KafkaException`` or ``KafkaError``; None for anything else (None too)."""
    name = getattr(_kafka_error(error), "name", None)
    return str(name()) if callable(name) else None


def translate(error: BaseException, what: str) -> StatekeepError:
    """The statekeep error for a confluent-kafka ``error`` met while doing ``what`` (named in the message,
    e.g. ``"creating topic 'orders' on 127.0.0.1:9092"``); raise it ``from error``. An error this module
    does not know is a plain StatekeepError."""
    name = error_name(error)
    cls = _BY_NAME.get(name or "", StatekeepError)
    text = getattr(_kafka_error(error), "str", None)
    detail = str(text()) if callable(text) else str(error)
    return cls(f"{what}: {name or type(error).__name__}: {detail}")
