"""``BlobReader``: a verifying, read-ahead stream over one blob."""

from __future__ import annotations

import contextlib
import hashlib
import io
import queue
import threading
from typing import Any

from statekeep.errors import BlobStorageError, CorruptStateError


class BlobReader(io.RawIOBase):
    """Streams one blob, reading ahead on a helper thread while the caller's thread checks the sha256.

    A size or checksum mismatch raises :class:`CorruptStateError` from the read that reaches the end
    (or earlier, if the blob is longer than recorded): act on the bytes only after reading to the end.
    """

    def __init__(self, f: Any, url: str, size: int, sha256: str, chunk_size: int, read_ahead: int) -> None:
        super().__init__()
        self._f, self.url, self.size, self._sha256 = f, url, size, sha256
        self._hash = hashlib.sha256()
        self._seen = 0
        self._buf = memoryview(b"")
        self._eof = False
        self._error: Exception | None = None  # a verification failure is raised again by every later read
        self._chunk = chunk_size
        self._queue: queue.Queue[bytes | BaseException] | None = None
        self._stop = threading.Event()
        if size > chunk_size:  # small blobs: one read, no thread
            self._queue = queue.Queue(read_ahead)
            # not background's: a producer filling a bounded queue to the blob's end; its errors go to the reader
            self._thread = threading.Thread(target=self._read_ahead, name="statekeep-blob-read", daemon=True)
            self._thread.start()

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if not self._buf and (self._eof or not self._fill()):
            return 0
        n = min(len(b), len(self._buf))
        memoryview(b).cast("B")[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all that remain if negative); fewer only at the end."""
        if size is None or size < 0:
            return self.readall()
        parts = []
        while size > 0 and (self._buf or (not self._eof and self._fill())):
            part = self._buf[:size]
            self._buf = self._buf[len(part):]
            size -= len(part)
            parts.append(part)
        if len(parts) == 1 and isinstance(parts[0].obj, bytes) and len(parts[0]) == len(parts[0].obj):
            return parts[0].obj  # a whole chunk: no copy
        return b"".join(parts)

    def readall(self) -> bytes:
        parts = []
        while chunk := self.read(self._chunk):
            parts.append(chunk)
        return b"".join(parts)

    def _fill(self) -> bool:
        """Take the next chunk into the buffer; False (after verifying) at the end."""
        if self.closed:
            raise ValueError("read of a closed blob reader")
        if self._error is not None:
            raise self._error
        try:
            chunk = self._next()
            if not chunk:
                self._finish()
                return False
            self._seen += len(chunk)
            if self._seen > self.size:
                raise CorruptStateError(f"blob {self.url} holds more than the {self.size} bytes its handle records")
        except (CorruptStateError, BlobStorageError) as e:
            self._error = e
            raise
        self._hash.update(chunk)
        self._buf = memoryview(chunk)
        return True

    def _next(self) -> bytes:
        if self._queue is None:
            return self._read_once()
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def _read_once(self) -> bytes:
        try:
            chunk: bytes = self._f.read(self._chunk) or b""
            return chunk
        except FileNotFoundError as e:
            raise CorruptStateError(f"blob {self.url} is missing") from e
        except OSError as e:
            raise BlobStorageError(f"cannot read blob {self.url}: {e}") from e

    def _read_ahead(self) -> None:
        assert self._queue is not None  # started with the queue
        while not self._stop.is_set():
            chunk: bytes | BaseException
            try:
                chunk = self._read_once()
            except BaseException as e:
                chunk = e
            self._queue.put(chunk)
            if not isinstance(chunk, bytes) or not chunk:
                return

    def _finish(self) -> None:
        self._eof = True
        if self._seen != self.size:
            raise CorruptStateError(f"blob {self.url} is truncated: {self._seen} of {self.size} bytes")
        if self._hash.hexdigest() != self._sha256:
            raise CorruptStateError(f"blob {self.url} is corrupt: its sha256 differs from its handle's")

    def close(self) -> None:
        if self.closed:
            return
        self._stop.set()
        if self._queue is not None:
            while self._thread.is_alive():  # unblock a read-ahead waiting on a full queue
                with contextlib.suppress(queue.Empty):
                    self._queue.get(timeout=0.05)
        try:
            self._f.close()
        finally:
            super().close()
