"""Pulsar topics on statekeep: a topic is a directory of message files under a topics root.

A function's ``inputs``, ``output``, ``logTopic``, ``deadLetterTopic`` or a ``publish`` target that is a
full Pulsar topic name (``persistent://TENANT/NAMESPACE/TOPIC`` or ``non-persistent://...``) names
the directory ``ROOT/persistent/TENANT/NAMESPACE/TOPIC``; anything else stays a path. The ``statekeep
topics`` commands also take Pulsar's short names, completed as Pulsar does (``TOPIC`` is
``persistent://public/default/TOPIC``, ``T/N/TOPIC`` is ``persistent://T/N/TOPIC``).

The root is ``--topics-dir`` of ``standalone``/``localrun``/``topics`` (set as ``$STATEKEEP_TOPICS_DIR``
for the processes they start), else ``DATA_DIR/topics`` for a ``local://DATA_DIR`` store, else
``./.statekeep-data/topics``. On a cluster it must be a directory every worker reaches.

Each file holds message records (JSON lines, see :mod:`statekeep.functions.messages`); writers name
files so a replayed batch replaces its own file (each message lands once) and readers take files in
name order.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from typing import Any

from statekeep.errors import InvalidArgumentError

ENV = "STATEKEEP_TOPICS_DIR"
_SEGMENT = re.compile(r"^[A-Za-z0-9_.=:-]{1,256}$")
_SCHEMES = ("persistent", "non-persistent")


def is_topic(name: str | None) -> bool:
    """Whether ``name`` is a full Pulsar topic name (and so a statekeep topic, not a path)."""
    return isinstance(name, str) and name.startswith(tuple(s + "://" for s in _SCHEMES))


def complete(name: str) -> str:
    """A topic name completed as Pulsar does (short names are ``persistent://public/default/...``).
    Raises :class:`InvalidArgumentError` for a name that is not a topic name."""
    scheme, sep, rest = name.partition("://")
    if not sep:
        scheme, rest = "persistent", name
    parts = rest.split("/")
    if len(parts) == 1:
        parts = ["public", "default", *parts]
    if scheme not in _SCHEMES or len(parts) != 3 or not all(_SEGMENT.match(p) and p not in (".", "..")
                                                            for p in parts):
        raise InvalidArgumentError(f"{name!r} is not a Pulsar topic name (persistent://TENANT/NAMESPACE/TOPIC, "
                                   "TENANT/NAMESPACE/TOPIC or TOPIC)")
    return f"{scheme}://{'/'.join(parts)}"


def default_root(metadata_url: str | None = None) -> str:
    """The topics root: ``$STATEKEEP_TOPICS_DIR``, else ``DATA_DIR/topics`` of a ``local://`` store,
    else ``./.statekeep-data/topics`` (absolute)."""
    if os.environ.get(ENV):
        return os.path.abspath(os.environ[ENV])
    if metadata_url and metadata_url.startswith("local://"):
        return os.path.join(metadata_url.removeprefix("local://"), "topics")
    return os.path.abspath(os.path.join(".statekeep-data", "topics"))


def directory(root: str, name: str) -> str:
    """The directory holding topic ``name`` (completed) under ``root``."""
    scheme, _, rest = complete(name).partition("://")
    return os.path.join(root, scheme, *rest.split("/"))


def location(name: str | None, root: str | None) -> str | None:
    """Where an input or output named ``name`` is: its topic directory for a topic name (with
    ``root``, else :func:`default_root`), the name itself otherwise."""
    if name is None or not is_topic(name):
        return name
    return directory(root or default_root(), name)


def list_topics(root: str) -> list[str]:
    """The full names of the topics under ``root`` that hold or held a file, sorted."""
    found = []
    for scheme in _SCHEMES:
        base = os.path.join(root, scheme)
        for current, dirs, files in os.walk(base):
            dirs.sort()
            relative = os.path.relpath(current, base).split(os.sep)
            if len(relative) == 3:
                dirs.clear()
                found.append(f"{scheme}://{'/'.join(relative)}")
    return sorted(found)


def write(root: str, name: str, records: list[dict[str, Any]], file_name: str | None = None) -> str:
    """Write message records (see :mod:`statekeep.functions.messages`) as one new file of the topic
    (write then rename, so readers never see half a file); returns its path."""
    target = directory(root, name)
    os.makedirs(target, exist_ok=True)
    final = os.path.join(target, file_name or f"produce-{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:8]}.jsonl")
    temp = os.path.join(target, f".{os.path.basename(final)}.tmp")
    with open(temp, "w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, separators=(",", ":")) + "\n")
    os.replace(temp, final)
    return final


def read(root: str, name: str) -> Iterator[dict[str, Any]]:
    """The message records of a topic, file by file in name order (hidden and temporary files skipped).
    Raises :class:`InvalidArgumentError` for a line that is not a message record."""
    target = directory(root, name)
    if not os.path.isdir(target):
        return
    for file_name in sorted(os.listdir(target)):
        if file_name.startswith(".") or file_name.endswith(".tmp"):
            continue
        with open(os.path.join(target, file_name), encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    record = None
                if not isinstance(record, dict):
                    raise InvalidArgumentError(f"{file_name}:{number} of topic {name} is not a message record")
                yield record
