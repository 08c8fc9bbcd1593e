"""Where a function's inputs and outputs are, by name (what a function is, so config's: the messaging room's topics
and sink name them with these): a URL or a local path, a Pulsar topic name, the topics root."""

from __future__ import annotations

import os

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
    from statekeep.functions.messaging.kafka import is_kafka

    return is_topic(name) or is_kafka(name)


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
