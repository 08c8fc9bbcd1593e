"""Contract semantics shared by the embedded backends (memory and local).

A backend supplies a :class:`TreeReader` over its committed data; :class:`Changes` applies
operations on top of it as a buffered overlay, enforcing versions, children and sequences.
Only when every operation of a request succeeded does the backend write the overlay, so a
failing request writes nothing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Protocol

from statekeep.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    NotEmptyError,
    NotFoundError,
)
from statekeep.metadata.types import (
    Check,
    Delete,
    Notification,
    NotificationType,
    Op,
    Put,
    Stat,
    join,
    parent_of,
)

_HEADER = struct.Struct(">qqqQ")  # version, created_ms, modified_ms, owner session (0: persistent)


@dataclass(slots=True)
class Record:
    version: int
    created_ms: int
    modified_ms: int
    owner: int  # session id of an ephemeral key's owner; 0 for a persistent key
    value: bytes

    def encode(self) -> bytes:
        return _HEADER.pack(self.version, self.created_ms, self.modified_ms, self.owner) + self.value

    @staticmethod
    def decode(raw: bytes) -> Record:
        version, created, modified, owner = _HEADER.unpack_from(raw)
        return Record(version, created, modified, owner, bytes(raw[_HEADER.size :]))

    def stat(self, path: str, session: int) -> Stat:
        return Stat(path, self.version, self.created_ms, self.modified_ms, self.owner != 0,
                    self.owner != 0 and self.owner == session)


class TreeReader(Protocol):
    def read(self, path: str) -> Record | None: ...
    def children(self, path: str) -> list[str]: ...
    def has_children(self, path: str) -> bool: ...
    def last_sequence(self, parent: str) -> int: ...


class Changes:
    """Operations applied over a reader, buffered until the backend writes them."""

    def __init__(self, base: TreeReader, session: int, now_ms: int) -> None:
        self.base = base
        self.session = session
        self.now_ms = now_ms
        self.writes: dict[str, Record | None] = {}  # None: deleted
        self.originals: dict[str, Record | None] = {}  # committed record before this request
        self.sequences: dict[str, int] = {}
        self.events: list[Notification] = []  # ChildrenChanged is implied: MetadataStore._emit_change
        #: parent -> {path written: still there}: has_children looks at a path's own children, not every write
        self._written: dict[str, dict[str, bool]] = {}

    def read(self, path: str) -> Record | None:
        return self.writes[path] if path in self.writes else self.base.read(path)

    def has_children(self, path: str) -> bool:
        written = self._written.get(path, {})
        if any(written.values()):
            return True
        if not self.base.has_children(path):
            return False
        deleted = {p for p, alive in written.items() if not alive}
        return not deleted or any(join(path, c) not in deleted for c in self.base.children(path))

    def apply(self, op: Op) -> Stat | None:
        if isinstance(op, Put):
            return self._put(op)
        if isinstance(op, Delete):
            self._delete(op)
        else:
            self._check(op)
        return None

    def _write(self, path: str, record: Record | None) -> None:
        if path not in self.originals:
            self.originals[path] = self.base.read(path) if path not in self.writes else self.writes[path]
        self.writes[path] = record
        self._written.setdefault(parent_of(path), {})[path] = record is not None

    def _put(self, op: Put) -> Stat:
        path = op.path
        if op.sequential:
            parent = parent_of(path)
            seq = self.sequences.get(parent)
            if seq is None:
                seq = self.base.last_sequence(parent)
            seq += 1
            self.sequences[parent] = seq
            path = f"{path}{seq:010d}"
        current = self.read(path)
        expected = op.expected_version
        if current is not None and (expected == -1 or op.sequential):
            raise AlreadyExistsError(f"{path} already exists")
        if expected is not None and expected >= 0:
            if current is None:  # PIP-45: a version that cannot match is a BadVersion, absent or not
                raise BadVersionError(f"{path} does not exist (expected version {expected})")
            if current.version != expected:
                raise BadVersionError(f"{path} is at version {current.version}, not {expected}")
        if current is None:
            self._create_ancestors(path)
            record = Record(0, self.now_ms, self.now_ms, self.session if op.ephemeral else 0, op.value)
            self.events.append(Notification(NotificationType.Created, path))
        else:
            record = Record(current.version + 1, current.created_ms, self.now_ms, current.owner, op.value)
            self.events.append(Notification(NotificationType.Modified, path))
        self._write(path, record)
        return record.stat(path, self.session)

    def _create_ancestors(self, path: str) -> None:
        """Create missing ancestors as empty persistent keys, as ZooKeeper needs them."""
        missing = []
        parent = parent_of(path)
        while parent != "/" and (existing := self.read(parent)) is None:
            missing.append(parent)
            parent = parent_of(parent)
        if parent != "/" and existing is not None and existing.owner:
            raise InvalidArgumentError(f"{path} cannot be created: an ephemeral key ({parent}) has no children")
        for ancestor in reversed(missing):
            self._write(ancestor, Record(0, self.now_ms, self.now_ms, 0, b""))
            self.events.append(Notification(NotificationType.Created, ancestor))

    def _delete(self, op: Delete) -> None:
        current = self.read(op.path)
        if current is None:
            raise NotFoundError(f"{op.path} does not exist")
        if op.expected_version is not None and current.version != op.expected_version:
            raise BadVersionError(f"{op.path} is at version {current.version}, not {op.expected_version}")
        if self.has_children(op.path):
            raise NotEmptyError(f"{op.path} has children; use delete_recursive")
        self.remove(op.path)

    def remove(self, path: str) -> None:
        """Remove ``path`` unconditionally (an ephemeral key whose session ended); no-op if absent."""
        if self.read(path) is None:
            return
        self._write(path, None)
        self.events.append(Notification(NotificationType.Deleted, path))

    def _check(self, op: Check) -> None:
        current = self.read(op.path)
        if op.version == -1:
            if current is not None:
                raise AlreadyExistsError(f"{op.path} exists (check expected it absent)")
        elif current is None:
            raise NotFoundError(f"{op.path} does not exist (check expected version {op.version})")
        elif current.version != op.version:
            raise BadVersionError(f"{op.path} is at version {current.version}, not {op.version}")
