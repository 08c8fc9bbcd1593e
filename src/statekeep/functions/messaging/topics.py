"""Pulsar topics on statekeep: a topic is a directory of message files under a topics root.

A function's ``inputs``, ``output``, ``logTopic``, ``deadLetterTopic`` or a ``publish`` target that is a
full Pulsar topic name (``persistent://TENANT/NAMESPACE/TOPIC`` or ``non-persistent://...``) names
the directory ``ROOT/persistent/TENANT/NAMESPACE/TOPIC``; anything else stays a path. The ``statekeep
topics`` commands also take Pulsar's short names, completed as Pulsar does (``TOPIC`` is
``persistent://public/default/TOPIC``, ``T/N/TOPIC`` is ``persistent://T/N/TOPIC``).

The root is ``--topics-dir`` of ``standalone``/``localrun``/``topics`` (set as ``$STATEKEEP_TOPICS_DIR``
for the processes they start), else ``DATA_DIR/topics`` for a ``local://DATA_DIR`` store, else
``./.statekeep-data/topics``: a local directory, or any fsspec URL (``s3://bucket/topics``), which a
cluster's workers reach without a shared filesystem. On a cluster a local root must be a directory every
worker reaches.

Each file holds message records (JSON lines, see :mod:`statekeep.functions.messaging.messages`), written and read
back in publish order by the one output sink (:mod:`statekeep.functions.messaging.sink`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

from statekeep.errors import InvalidArgumentError
# re-exported: topics are named by config's locations (moved there, see that module)
from statekeep.functions.config.locations import _SCHEMES
from statekeep.functions.config.locations import default_root as default_root
from statekeep.functions.config.locations import is_topic as is_topic
from statekeep.functions.messaging import sink

_SEGMENT = re.compile(r"^[A-Za-z0-9_.=:-]{1,256}$")


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


def directory(root: str, name: str) -> str:
    """The directory (a path or URL) holding topic ``name`` (completed) under ``root``."""
    scheme, _, rest = complete(name).partition("://")
    if sink.is_url(root):
        return "/".join([root.rstrip("/"), scheme, rest])
    return os.path.join(root, scheme, *rest.split("/"))


def location(name: str | None, root: str | None) -> str | None:
    """Where an input or output named ``name`` is: its topic directory for a topic name (with
    ``root``, else :func:`default_root`), the name itself otherwise."""
    if name is None or not is_topic(name):
        return name
    return directory(root or default_root(), name)


def list_topics(root: str) -> list[str]:
    """The full names of the topics under ``root`` that hold or held a file, sorted."""
    if sink.is_url(root):
        fs, base = sink.filesystem(root)
        fs.invalidate_cache()
        names = {"://".join(str(path)[len(base):].strip("/").split("/", 1))
                 for scheme in _SCHEMES for path in fs.glob(f"{base}/{scheme}/*/*/*")}
        return sorted(name for name in names if is_topic(name))
    found = []
    for scheme in _SCHEMES:
        base = os.path.join(root, scheme)
        for current, dirs, _ in os.walk(base):
            dirs.sort()
            relative = os.path.relpath(current, base).split(os.sep)
            if len(relative) == 3:
                dirs.clear()
                found.append(f"{scheme}://{'/'.join(relative)}")
    return sorted(found)


def write(root: str, name: str, records: list[dict[str, Any]], origin: str = "produce") -> str:
    """Write message records (see :mod:`statekeep.functions.messaging.messages`) as one new file of the topic,
    whole or not at all (see :mod:`statekeep.functions.messaging.sink`); returns its path."""
    path = sink.OutputSink(directory(root, name)).write_new(records, origin)
    assert path is not None  # a sink with a directory writes
    return path


def read(root: str, name: str) -> Iterator[dict[str, Any]]:
    """The message records of a topic in publish order (see :mod:`statekeep.functions.messaging.sink`). Raises
    :class:`InvalidArgumentError` for a line that is not a message record."""
    return sink.read_records(directory(root, name), f"topic {name}")


def files(root: str, name: str) -> list[str]:
    """The names of a topic's message files, in publish order."""
    return sink.data_files(directory(root, name))
