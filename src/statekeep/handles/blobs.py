"""Blob storage for state handles, through fsspec (``file://`` by default, ``s3://`` with ``statekeep[s3]``).

fsspec is optional (``pip install 'statekeep[blobs]'``): it is imported when a :class:`BlobStore` is
created, which raises :class:`MissingDependencyError` naming the extra without it. Importing this
module, the handle store or anything that uses them (snapshots, followers) needs nothing beyond the core.

Guarantees of :class:`BlobStore`:

- :meth:`~BlobStore.write` streams its source in chunks: memory stays bounded by a few chunks whatever the
  size. Every write gets a fresh, unique name (``<ms>-<uuid>.blob``), so a blob is never overwritten and a
  reader never sees another write's bytes. When ``write`` returns, the blob is complete and durable: on
  ``file://`` it was written under a temporary name, fsynced, renamed and its directory fsynced; on an object
  store the upload is committed only after its last byte (never a partial object under the final name).
  On failure nothing is left under a final name; a crash may leave a temporary file, which ``gc`` reclaims.
- :meth:`~BlobStore.open` returns a reader that checks size and sha256 as it streams and raises
  :class:`CorruptStateError` from the read that reaches the end if they differ (a missing blob raises at open).
- Storage I/O failures raise :class:`BlobStorageError` (chained); errors of the caller's source propagate as is.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Union
from urllib.parse import quote

from statekeep.background import Consumer
from statekeep.errors import BlobStorageError, CorruptStateError, InvalidArgumentError, MissingDependencyError
from statekeep.handles.reader import BlobReader
from statekeep.retry import DEFAULT as RETRY
from statekeep.validate import check_int

log = logging.getLogger(__name__)


def _fsspec() -> Any:
    """The fsspec module, imported on first use: the core does not need it."""
    try:
        import fsspec
        import fsspec.implementations.local
    except ImportError as e:
        raise MissingDependencyError(f"blob storage (state handles, snapshots) needs fsspec: "
                                     f"pip install 'statekeep[blobs]' ({e})") from e
    return fsspec


def _is_local(fs: Any) -> bool:
    return isinstance(fs, _fsspec().implementations.local.LocalFileSystem)


#: What a state may be: bytes, a binary file-like object (``read(n)``), or an iterable of bytes-like chunks.
StateSource = Union[bytes, bytearray, memoryview, BinaryIO, Iterable[bytes]]

DEFAULT_CHUNK_SIZE = 8 << 20
_INLINE_HASH = 1 << 20  # below this a helper thread costs more than it saves
# Linux starts writeback of dirty pages on POSIX_FADV_DONTNEED without waiting for it.
_START_WRITEBACK = hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED")
_NAME = re.compile(r"^\.?(\d{13})-([0-9a-f]{32})\.(blob|tmp)$")


@dataclass(frozen=True, slots=True)
class BlobRef:
    """A written blob: where it is, how many bytes, their sha256 (hex) and when it was written (ms)."""

    url: str
    size: int
    sha256: str
    created_ms: int


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """A file found under a blob scope by :meth:`BlobStore.list` (``temporary``: an unfinished upload)."""

    url: str
    size: int
    written_ms: int
    temporary: bool


class BlobStore:
    """Blobs under one base URL. Thread-safe. ``options`` go to fsspec (e.g. s3fs credentials, endpoint)."""

    def __init__(self, url: str, *, options: dict[str, Any] | None = None,
                 chunk_size: int = DEFAULT_CHUNK_SIZE, read_ahead: int = 2) -> None:
        if not isinstance(url, str) or not url:
            raise InvalidArgumentError(f"blobs must be a URL such as file:///var/lib/blobs, got {url!r}")
        check_int(chunk_size, "chunk_size", minimum=4096)
        self.options = dict(options or {})
        fsspec = _fsspec()
        try:
            self.fs, base = fsspec.core.url_to_fs(url, **self.options)
        except ImportError as e:
            raise MissingDependencyError(f"blobs at {url}: {e} (for s3:// install 'statekeep[s3]')") from e
        except (ValueError, OSError) as e:
            raise InvalidArgumentError(f"cannot use {url!r} for blobs: {e}") from e
        self.base = base.rstrip("/") or "/"
        self.local = _is_local(self.fs)
        self.chunk_size = chunk_size
        self.read_ahead = max(1, int(read_ahead))

    @property
    def url(self) -> str:
        return str(self.fs.unstrip_protocol(self.base))

    # ---- naming ----------------------------------------------------------------------------------

    def scope_path(self, scope: str) -> str:
        """Directory of one handle store's blobs: the root path, quoted into one segment, so that
        roots never nest (gc of ``/a`` must not see the blobs of ``/a/b``)."""
        return f"{self.base}/{quote(scope.strip('/') or '_root', safe='')}"

    def _path(self, url: str) -> tuple[Any, str]:
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        fsspec = _fsspec()
        if fsspec.utils.get_protocol(url) in protocols:
            return self.fs, self.fs._strip_protocol(url)
        fs, path = fsspec.core.url_to_fs(url, **self.options)
        return fs, str(path)

    # ---- writing ---------------------------------------------------------------------------------

    def write(self, scope: str, key: str, source: StateSource) -> BlobRef:
        """Store ``source`` as a new blob of ``key`` under ``scope``; see the module docstring."""
        chunks = _chunks(source, self.chunk_size)
        created_ms = int(time.time() * 1000)
        path = f"{self.scope_path(scope)}/{quote(key, safe='')}/{created_ms:013d}-{uuid.uuid4().hex}.blob"
        hasher = _Hasher(self.read_ahead)
        try:
            size = self._write_local(path, chunks, hasher) if self.local else self._write_remote(path, chunks, hasher)
        finally:
            hasher.close()
        return BlobRef(self.fs.unstrip_protocol(path), size, hasher.hexdigest(), created_ms)

    def _write_local(self, path: str, chunks: Iterator[bytes | memoryview], hasher: _Hasher) -> int:
        directory, name = os.path.split(path)
        tmp = os.path.join(directory, "." + name[: -len(".blob")] + ".tmp")
        size = 0
        for _ in RETRY.bounded(attempts=3).attempts():
            try:
                created = _makedirs(directory)
                f = open(tmp, "xb")
                break
            except FileNotFoundError:  # a concurrent delete removed the emptied key directory: again
                continue
            except OSError as e:
                raise BlobStorageError(f"cannot create blob {path}: {e}") from e
        else:
            raise BlobStorageError(f"cannot create blob {path}: its directory keeps vanishing")
        try:
            with f:
                for chunk in chunks:
                    hasher.feed(chunk)  # hashed on a helper thread while this one writes
                    try:
                        f.write(chunk)
                        if _START_WRITEBACK and len(chunk) >= _INLINE_HASH:
                            # start writing this chunk to disk now, so the final fsync has little left
                            f.flush()
                            os.posix_fadvise(f.fileno(), size, len(chunk), os.POSIX_FADV_DONTNEED)
                    except OSError as e:
                        raise BlobStorageError(f"cannot write blob {path}: {e}") from e
                    size += len(chunk)
                try:
                    f.flush()
                    os.fsync(f.fileno())
                except OSError as e:
                    raise BlobStorageError(f"cannot fsync blob {path}: {e}") from e
            os.rename(tmp, path)
            # the rename (and any directory we created) must survive a crash too
            for d in [directory, *(os.path.dirname(c) for c in created)]:
                _fsync_dir(d)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            if isinstance(e, OSError):
                raise BlobStorageError(f"cannot store blob {path}: {e}") from e
            raise
        return size

    def _write_remote(self, path: str, chunks: Iterator[bytes | memoryview], hasher: _Hasher) -> int:
        size = 0
        try:
            # autocommit=False: an object store publishes the object only on commit(), never half of it
            f = self.fs.open(path, "wb", autocommit=False, block_size=max(self.chunk_size, 5 << 20))
        except OSError as e:
            raise BlobStorageError(f"cannot create blob {self.fs.unstrip_protocol(path)}: {e}") from e
        try:
            for chunk in chunks:
                hasher.feed(chunk)
                f.write(chunk)
                size += len(chunk)
            f.close()
            f.commit()
        except BaseException as e:
            with contextlib.suppress(Exception):
                f.discard()
            if isinstance(e, OSError):
                raise BlobStorageError(f"cannot write blob {self.fs.unstrip_protocol(path)}: {e}") from e
            raise
        return size

    # ---- reading and deleting --------------------------------------------------------------------

    def open(self, url: str, size: int, sha256: str) -> BlobReader:
        """A verifying reader of the blob at ``url``. :class:`CorruptStateError` if it is missing."""
        fs, path = self._path(url)
        try:
            if _is_local(fs):
                f = open(path, "rb", buffering=0)
            else:
                f = fs.open(path, "rb", block_size=self.chunk_size, cache_type="none")
        except FileNotFoundError as e:
            raise CorruptStateError(f"blob {url} is missing") from e
        except OSError as e:
            raise BlobStorageError(f"cannot open blob {url}: {e}") from e
        return BlobReader(f, url, size, sha256, self.chunk_size, self.read_ahead)

    def exists(self, url: str) -> bool:
        fs, path = self._path(url)
        try:
            return bool(fs.exists(path))
        except OSError as e:
            raise BlobStorageError(f"cannot look up blob {url}: {e}") from e

    def delete(self, url: str) -> bool:
        """Delete the blob at ``url``; False if it was already gone. :class:`BlobStorageError` on failure."""
        fs, path = self._path(url)
        try:
            if not _is_local(fs) and not fs.exists(path):  # an object store answers a delete of nothing OK
                return False
            fs.rm_file(path)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise BlobStorageError(f"cannot delete blob {url}: {e}") from e
        if _is_local(fs):  # leave no empty key directories behind
            with contextlib.suppress(OSError):
                os.rmdir(os.path.dirname(path))
        return True

    def delete_scope(self, scope: str) -> None:
        """Delete every blob under ``scope`` (a no-op if there are none). :class:`BlobStorageError` on failure."""
        path = self.scope_path(scope)
        try:
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
        except OSError as e:
            raise BlobStorageError(f"cannot delete the blobs under {path}: {e}") from e

    def list(self, scope: str) -> list[BlobInfo]:
        """Every blob and temporary upload under ``scope`` (files of other names are not ours: left out)."""
        try:
            self.fs.invalidate_cache(self.scope_path(scope))  # listings of object stores are cached
            found = self.fs.find(self.scope_path(scope), detail=True, withdirs=False)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise BlobStorageError(f"cannot list blobs under {self.scope_path(scope)}: {e}") from e
        infos = []
        for path, info in sorted(found.items()):
            match = _NAME.match(path.rpartition("/")[2])
            if match is None or info.get("type", "file") != "file":
                continue
            # the later of the name's time (write start) and the storage's time (last write)
            written = max(int(match.group(1)), _modified_ms(info))
            infos.append(BlobInfo(self.fs.unstrip_protocol(path), int(info.get("size") or 0), written,
                                  match.group(3) == "tmp"))
        return infos


class _Hasher:
    """sha256 of the chunks fed to it; large inputs are hashed on a helper thread (hashlib releases the
    GIL), so hashing overlaps the writing. Chunks must not change after ``feed``."""

    def __init__(self, depth: int) -> None:
        self._hash = hashlib.sha256()
        self._depth = depth
        self._consumer: Consumer[bytes | memoryview] | None = None
        self._fed = 0

    def feed(self, chunk: bytes | memoryview) -> None:
        self._fed += 1
        if self._consumer is None and self._fed == 1 and len(chunk) <= _INLINE_HASH:
            self._hash.update(chunk)
            return
        if self._consumer is None:
            self._consumer = Consumer("statekeep-blob-hash", self._hash.update, what="hashing a blob", log=log,
                                      maxsize=self._depth)
        self._consumer.put(chunk)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.stop(timeout=None)  # every chunk hashed before the digest is read
            self._consumer = None

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def _chunks(source: StateSource, chunk_size: int) -> Iterator[bytes | memoryview]:
    """Chunks of ``source`` that cannot change afterwards (mutable buffers are copied chunk by chunk)."""
    if isinstance(source, str):
        raise InvalidArgumentError("state must be bytes, a binary file or an iterable of bytes, not str")
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        return (view[i:i + chunk_size] if view.readonly else bytes(view[i:i + chunk_size])
                for i in range(0, len(view), chunk_size))
    if hasattr(source, "read"):
        return _read_chunks(source, chunk_size)  # type: ignore[arg-type]  # has read(): a binary file
    if isinstance(source, Iterable):
        return (_immutable(chunk) for chunk in source)
    raise InvalidArgumentError(f"state must be bytes, a binary file or an iterable of bytes, "
                               f"not {type(source).__name__}")


def _read_chunks(f: BinaryIO, chunk_size: int) -> Iterator[bytes | memoryview]:
    while chunk := f.read(chunk_size):
        yield _immutable(chunk)


def _immutable(chunk: object) -> bytes | memoryview:
    if isinstance(chunk, bytes):
        return chunk
    if isinstance(chunk, (bytearray, memoryview)):
        return bytes(chunk)
    raise InvalidArgumentError(f"state chunks must be bytes-like, not {type(chunk).__name__}")


def _makedirs(directory: str) -> list[str]:
    """Create ``directory`` and its missing parents; returns those created, outermost first."""
    missing = []
    d = directory
    while not os.path.isdir(d):
        missing.append(d)
        d = os.path.dirname(d)
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d)
    return list(reversed(missing))


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _modified_ms(info: dict[str, Any]) -> int:
    value = info.get("mtime", info.get("LastModified", info.get("last_modified")))
    if value is None:
        return 0
    if hasattr(value, "timestamp"):
        return int(value.timestamp() * 1000)
    try:
        return int(float(value) * 1000)
    except (TypeError, ValueError):
        return 0
