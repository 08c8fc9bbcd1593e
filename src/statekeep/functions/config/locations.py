"""Where a function's inputs and outputs are, by name (what a function is, so config's: the messaging room's topics
and sink name them with these): a URL or a local path, a Pulsar topic name, a Kafka topic name, the topics root."""

from __future__ import annotations

import os
import re
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
    """Whether an input is a topic of messages, each with its own key: a statekeep topic or a broker's topic."""
    return is_topic(name) or is_broker(name)


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


#: a Pulsar broker's topic: ``pulsar://HOST:PORT/persistent://TENANT/NAMESPACE/TOPIC[?admin=http://HOST:PORT]``
#: (see :mod:`statekeep.functions.messaging.pulsartopics`)
PULSAR_SCHEME = "pulsar://"
#: the admin REST API's port a Pulsar name without ``?admin=`` is taken to have (Pulsar's default ``webServicePort``)
PULSAR_ADMIN_PORT = 8080

#: the one registry of broker topic schemes: a name's prefix -> the kind of broker that keeps it
BROKER_SCHEMES = {SCHEME: "kafka", PULSAR_SCHEME: "pulsar"}


def broker_of(name: object) -> str | None:
    """The kind of broker (``"kafka"``, ``"pulsar"``) whose topic ``name`` is, or None (a statekeep topic, a path)."""
    if isinstance(name, str):
        for prefix, kind in BROKER_SCHEMES.items():
            if name.startswith(prefix):
                return kind
    return None


def is_broker(name: object) -> bool:
    """Whether ``name`` names a broker's topic (Kafka's or Pulsar's): records that go out after the state commit."""
    return broker_of(name) is not None


def is_pulsar(name: object) -> bool:
    """Whether ``name`` names a Pulsar broker's topic (``pulsar://...``)."""
    return broker_of(name) == "pulsar"


@dataclass(frozen=True)
class PulsarTopic:
    """A Pulsar topic as a statekeep name gives it: the broker's ``service_url`` (``pulsar://HOST:PORT``), the full
    ``topic`` name (``persistent://TENANT/NAMESPACE/TOPIC``) and the broker's admin REST ``admin_url``."""

    service_url: str
    topic: str
    admin_url: str

    @property
    def name(self) -> str:
        return f"{self.service_url}/{self.topic}?admin={self.admin_url}"


_PULSAR_SEGMENT = re.compile(r"^[A-Za-z0-9_.=:-]{1,256}$")


def parse_pulsar(name: str) -> PulsarTopic:
    """The Pulsar topic ``pulsar://HOST:PORT/persistent://TENANT/NAMESPACE/TOPIC[?admin=http://HOST:PORT]`` names
    (``non-persistent://`` too; a partitioned topic by its own name, not a partition's); without ``?admin=`` the
    admin API is ``http://HOST:8080``. :class:`InvalidArgumentError` naming ``name`` for any other form."""
    form = "pulsar://HOST:PORT/persistent://TENANT/NAMESPACE/TOPIC[?admin=http://HOST:PORT]"
    rest, _, query = str(name).partition("?")
    admin = None
    if query:
        field, _, value = query.partition("=")
        if field != "admin" or not re.fullmatch(r"https?://[^/?#\s]+", value):
            raise InvalidArgumentError(f"{name!r} is not a Pulsar topic name ({form}): the query may only be "
                                       "admin=http://HOST:PORT")
        admin = value
    host, sep, topic = rest[len(PULSAR_SCHEME):].partition("/") if is_pulsar(rest) else ("", "", "")
    scheme, _, path = topic.partition("://")
    parts = path.split("/")
    address = re.fullmatch(r"([A-Za-z0-9_.-]+|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})", host)
    if (not sep or address is None or not 0 < int(address.group(2)) < 65536 or scheme not in _SCHEMES
            or len(parts) != 3 or not all(_PULSAR_SEGMENT.match(p) and p not in (".", "..") for p in parts)):
        raise InvalidArgumentError(f"{name!r} is not a Pulsar topic name ({form})")
    return PulsarTopic(f"{PULSAR_SCHEME}{host}", topic, admin or f"http://{address.group(1)}:{PULSAR_ADMIN_PORT}")


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
