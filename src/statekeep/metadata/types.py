"""Value types of the metadata contract: stats, results, operations, notifications, paths."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import NamedTuple

from statekeep.errors import InvalidArgumentError, InvalidPathError, ValueTooLargeError
from statekeep.lru import memo, remember
from statekeep.validate import check_int

# Any C0/C1 control character or DEL is refused, as are empty, "." and ".." segments.
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


# Paths already validated: reads of hot keys skip re-validation (a set lookup, no call).
_valid_paths: dict[str, bool] = memo()  # a hot-path memo (lru.remember)


def validate_path(path: object, *, allow_root: bool = True) -> str:
    """Return ``path`` if it is a valid absolute path, else raise :class:`InvalidPathError`."""
    if not isinstance(path, str):
        raise InvalidPathError(f"path must be a str, not {type(path).__name__}")
    if path in _valid_paths:
        return path
    if not path.startswith("/"):
        raise InvalidPathError(f"path must be absolute (start with '/'): {path!r}")
    if path == "/":
        if not allow_root:
            raise InvalidPathError("the root path '/' cannot be written or deleted")
        return path
    if path.endswith("/"):
        raise InvalidPathError(f"path must not end with '/': {path!r}")
    if _BAD_CHARS.search(path):
        raise InvalidPathError(f"path must not contain control characters: {path!r}")
    if any(segment in ("", ".", "..") for segment in path[1:].split("/")):
        raise InvalidPathError(f"path has an empty, '.' or '..' segment: {path!r}")
    remember(_valid_paths, path, True, 100_000)
    return path


def parent_of(path: str) -> str:
    """The parent path of ``path`` ("/" for a top-level key)."""
    return path.rpartition("/")[0] or "/"


def join(parent: str, child: str) -> str:
    return f"/{child}" if parent == "/" else f"{parent}/{child}"


def validate_version(expected_version: object) -> int | None:
    return check_int(expected_version, "expected_version", minimum=-1, optional=True)


def validate_value(value: object, max_size: int) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"value must be bytes, not {type(value).__name__}")
    value = bytes(value)
    if len(value) > max_size:
        raise ValueTooLargeError(f"value of {len(value)} bytes exceeds the limit of {max_size} bytes; keep large "
                                 "state in blob storage with statekeep.handles.StateHandleStore, its handle here")
    return value


class Stat(NamedTuple):
    """Metadata of a stored value. ``version`` is 0 on create and rises by one per put.
    ``created_by_self``: an ephemeral key owned by this store's own session."""

    path: str
    version: int
    created_ms: int
    modified_ms: int
    ephemeral: bool = False
    created_by_self: bool = False


class GetResult(NamedTuple):
    value: bytes
    stat: Stat


@dataclass(frozen=True, slots=True)
class Put:
    """A put inside :meth:`MetadataStore.multi`; same meaning as :meth:`MetadataStore.put`."""

    path: str
    value: bytes
    expected_version: int | None = None
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    expected_version: int | None = None


@dataclass(frozen=True, slots=True)
class Check:
    """Asserts that ``path`` has ``version`` (-1: that it does not exist); writes nothing."""

    path: str
    version: int


Op = Put | Delete | Check


class NotificationType(enum.Enum):
    Created = "Created"
    Modified = "Modified"
    Deleted = "Deleted"
    ChildrenChanged = "ChildrenChanged"


@dataclass(frozen=True, slots=True)
class Notification:
    type: NotificationType
    path: str


class SessionEvent(enum.Enum):
    ConnectionLost = "ConnectionLost"
    Reconnected = "Reconnected"
    SessionLost = "SessionLost"
    SessionReestablished = "SessionReestablished"
