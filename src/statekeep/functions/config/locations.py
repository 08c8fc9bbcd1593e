"""Where a function's inputs and outputs are, by name (what a function is, so config's: the messaging room's topics
and sink name them with these): a URL or a local path, a Pulsar topic name, a Kafka topic name, the topics root."""

from __future__ import annotations

import os
from dataclasses import dataclass

from statekeep.errors import InvalidArgumentError

ENV = "STATEKEEP_TOPICS_DIR"
_SCHEMES = ("persistent", "non-persistent")


def is_url(path: str) -> bool:
    """Whether ``path`` is a URL (``s3://...``, ``file://...``), not a local path."""
    return "://" in path


def is_topic(name: str | None) -> bool:
    """Whether ``name`` is a full Pulsar topic name (and so a statekeep topic, not a path)."""
    return isinstance(name, str) and name.startswith(tuple(s + "://" for s in _SCHEMES))


def carries_messages(name: str) -> bool:
    """Whether an input is a topic of messages, each with its own key: a statekeep topic or a Kafka topic."""
    return is_topic(name) or is_kafka(name)


#: a Kafka topic's name: ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC`` (see :mod:`statekeep.functions.messaging.kafka`)
SCHEME = "kafka://"


def is_kafka(name: object) -> bool:
    """Whether ``name`` names a Kafka topic (``kafka://...``)."""
    return isinstance(name, str) and name.startswith(SCHEME)


@dataclass(frozen=True)
class KafkaTopic:
    """A Kafka topic as a statekeep name gives it: its cluster's bootstrap servers and its Kafka name."""

    bootstrap: str
    topic: str

    @property
    def name(self) -> str:
        return f"{SCHEME}{self.bootstrap}/{self.topic}"


def parse(name: str) -> KafkaTopic:
    """The Kafka topic ``kafka://HOST:PORT[,HOST:PORT...]/TOPIC`` names. :class:`InvalidArgumentError` naming
    ``name`` for any other form (no servers, a port that is not a number, a topic name Kafka refuses)."""
    from statekeep.kafka import check_bootstrap
    from statekeep.kafka.admin import check_topic

    if not is_kafka(name):
        raise InvalidArgumentError(f"{name!r} is not a Kafka topic name (kafka://HOST:PORT/TOPIC)")
    servers, _, topic = name[len(SCHEME):].partition("/")
    try:
        check_bootstrap(servers)
        if not all(0 < int(h.rsplit(":", 1)[1]) < 65536 for h in servers.split(",")):
            raise InvalidArgumentError(f"a port is out of range in {servers!r}")
        check_topic(topic)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"{name!r} is not a Kafka topic name (kafka://HOST:PORT[,HOST:PORT...]/TOPIC): "
                                   f"{e}") from None
    return KafkaTopic(servers, topic)


def absolute(root: str) -> str:
    """A topics root as used: a URL as it is (without a trailing ``/``), a local path made absolute."""
    return root.rstrip("/") if is_url(root) else os.path.abspath(root)


def default_root(metadata_url: str | None = None) -> str:
    """The topics root: ``$STATEKEEP_TOPICS_DIR``, else ``DATA_DIR/topics`` of a ``local://`` store,
    else ``./.statekeep-data/topics`` (absolute)."""
    if os.environ.get(ENV):
        return absolute(os.environ[ENV])
    if metadata_url and metadata_url.startswith("local://"):
        return os.path.join(metadata_url.removeprefix("local://"), "topics")
    return os.path.abspath(os.path.join(".statekeep-data", "topics"))
