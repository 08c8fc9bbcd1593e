"""The one output sink: every file of records a function (or ``topics produce``) writes, and how they are read back.

A function's output, its dead letters, its log topic, its ``context.publish`` messages, a trigger's results and
``statekeep topics produce`` all go through :func:`write_file`, under one naming scheme:

    STEM@MS.FMT      STEM = batch-BATCH(12 digits)-part-PARTITION(5 digits)-KIND-TENANT.NAMESPACE.NAME
                            (a micro-batch's partition), or ORIGIN-UUID8[-KIND-TENANT.NAMESPACE.NAME]
                            (a trigger's, a produce's: no batch)
                     MS   = the write's commit time, ms since the epoch (13 digits)

``KIND`` is ``out``, ``pub`` (published), ``log`` or ``dead``, so the functions and kinds of records sharing a
directory (a topic's) never replace each other's files. ``@`` occurs in no tenant, namespace, function or topic
name, so the stem and time parse back unambiguously.

- **Replays overwrite.** Before writing a (batch, partition)'s file the writer looks for a file of the same stem
  (a prefix listing) and, if one exists, writes under that name again: a replayed (batch, partition) replaces its
  own file, so each record lands once, and a reader that already took the file does not take it twice. A file of
  the scheme before this one, ``batch-BATCH-part-PARTITION[-KIND-T.N.F].FMT``, counts as the same stem.
- **Durable before the state commit.** On a local path a file is written under a hidden temporary name
  (``.NAME.PID.tmp``, which readers and Spark's file source skip), fsynced, renamed, and its directory fsynced. On
  any other fsspec URL (``s3://``, ...) it is one object PUT: atomic, and durable when it returns.
- **Publish order.** Readers (:func:`data_files`, ``topics consume``, the console, the ``statekeep-topic`` source)
  take files by (MS, name): messages come back in the order their files were committed, whoever wrote them (a
  file a replay rewrites keeps its first time). A function reading a topic under a local root goes through
  Spark's text source, which orders the files of a micro-batch by their modification time. Files of earlier
  schemes stay readable: ``produce-MS-UUID.jsonl`` and ``trigger-MS-UUID.jsonl`` by their MS;
  ``batch-...`` files (which carry no time) first, by name; any other file also first, by name.

Topics and outputs live on a local path or any fsspec URL (``--topics-dir s3://bucket/topics``); fsspec is
needed only for URLs.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from statekeep.errors import InvalidArgumentError, MissingDependencyError
from statekeep.functions.config.locations import default_root
from statekeep.functions.config.locations import is_url as is_url  # re-exported (moved there)
from statekeep.functions.messaging.jsonscan import dumps
from statekeep.lru import cached

_NEW = re.compile(r"^(?P<stem>[^@]+)@(?P<ms>\d{13})\.(?P<fmt>[A-Za-z0-9]+)$")
_TIMED_LEGACY = re.compile(r"^(?:produce|trigger)-(?P<ms>\d{13})-[0-9a-f]{8}\.jsonl$")
_filesystems: dict[str, tuple[Any, str]] = {}
_fs_lock = threading.Lock()


def filesystem(url: str) -> tuple[Any, str]:
    """(fsspec filesystem, path in it) of a URL, one filesystem per URL and process. Raises
    :class:`MissingDependencyError` without fsspec (or the URL's backend, e.g. s3fs)."""
    with _fs_lock:
        if url not in _filesystems:
            try:
                import fsspec

                _filesystems[url] = fsspec.core.url_to_fs(url)
            except ImportError as e:
                raise MissingDependencyError(f"{url}: topics and outputs on a URL need fsspec and its backend "
                                             f"(pip install 'statekeep[s3]' for s3://): {e}") from e
        return _filesystems[url]


@cached(1 << 16)  # a topic's reader lists the same names at every micro-batch
def file_key(name: str) -> tuple[int, str] | None:
    """Where a file of a sink directory comes in publish order: ``(MS, name)`` (0 for a file with no time);
    None for a file that holds no records (hidden, temporary)."""
    if name.startswith((".", "_")) or name.endswith(".tmp"):
        return None
    match = _NEW.match(name) or _TIMED_LEGACY.match(name)
    return (int(match["ms"]) if match else 0, name)


def data_files(directory: str) -> list[str]:
    """The names of the record files in ``directory`` (a path or URL), in publish order (see the module
    docstring); ``[]`` if it does not exist."""
    keyed = [key for key in map(file_key, file_names(directory)) if key is not None]
    return [name for _, name in sorted(keyed)]


def file_names(directory: str, prefix: str = "") -> list[str]:
    """The names in ``directory`` (a path or URL) starting with ``prefix``, record files or not, in no order
    (listed fresh: no cached listing); ``[]`` if it does not exist."""
    if not is_url(directory):
        try:
            listed = os.listdir(directory)  # plain names: no DirEntry object each, as os.scandir makes
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [n for n in listed if n.startswith(prefix)] if prefix else listed
    fs, path = filesystem(directory)
    fs.invalidate_cache(path)
    try:
        found = fs.find(path, maxdepth=1, prefix=prefix) if prefix else fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    names = (str(f).rstrip("/").rsplit("/", 1)[-1] for f in found)
    return [n for n in names if n.startswith(prefix)]


def read_text(directory: str, name: str) -> str:
    """The text of file ``name`` of ``directory`` (a path or URL)."""
    return read_bytes(directory, name).decode("utf-8")


def read_bytes(directory: str, name: str) -> bytes:
    """The bytes of file ``name`` of ``directory`` (a path or URL)."""
    if not is_url(directory):
        with open(os.path.join(directory, name), "rb") as f:
            return f.read()
    fs, path = filesystem(directory)
    data: bytes = fs.cat_file(f"{path}/{name}")
    return data


def read_records(directory: str, label: str = "") -> Iterator[dict[str, Any]]:
    """The JSON-object lines of a directory's files in publish order. Raises :class:`InvalidArgumentError`
    for a line that is not a JSON object, naming the file and line (and ``label``, e.g. a topic's name)."""
    for name in data_files(directory):
        yield from file_records(directory, name, label)


def file_records(directory: str, name: str, label: str = "") -> Iterator[dict[str, Any]]:
    """The JSON-object lines of one file of ``directory`` (errors as :func:`read_records`)."""
    for number, line in enumerate(read_text(directory, name).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict):
            raise InvalidArgumentError(f"{name}:{number}{' of ' + label if label else ''} is not a message record")
        yield record


def _encode(records: Any, fmt: str) -> bytes:
    """Records (a list, or a pyarrow Table) as a file's bytes: JSON lines, Parquet for ``fmt`` ``parquet``, or an
    Arrow IPC stream of a Table for ``arrow`` (the DataFrame operator's kept rows, read back by
    :meth:`OutputSink.read`)."""
    if fmt == "arrow":
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, records.schema) as writer:
            writer.write_table(records)
        return bytes(sink.getvalue())
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not isinstance(records, pa.Table):
            records = pa.Table.from_pylist([r if isinstance(r, dict) else {"value": r} for r in records])
        buffer = io.BytesIO()
        pq.write_table(records, buffer)
        return buffer.getvalue()
    if not isinstance(records, list):
        records = records.to_pylist()
    return "".join(dumps(r) + "\n" for r in records).encode("utf-8")


def write_file(directory: str, name: str, records: Any, fmt: str = "jsonl") -> str:
    """Write records (a list, or a pyarrow Table) as the file ``name`` of ``directory`` (a path or URL),
    whole or not at all (see the module docstring); returns its path."""
    data = _encode(records, fmt)
    if is_url(directory):
        fs, path = filesystem(directory)
        fs.pipe_file(f"{path}/{name}", data)
        return f"{directory.rstrip('/')}/{name}"
    os.makedirs(directory, exist_ok=True)
    final = os.path.join(directory, name)
    temp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    with open(temp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, final)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the rename itself survives a crash
    finally:
        os.close(descriptor)
    return final


def _remove(directory: str, name: str) -> None:
    if is_url(directory):
        fs, path = filesystem(directory)
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(f"{path}/{name}")
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(directory, name))


@dataclass(frozen=True)
class OutputSink:
    """Where one kind of a function's records goes (see :func:`output_sink`): ``directory`` (a path or URL;
    None: nowhere, for no output or ``console``), the files' ``fmt`` and the ``suffix`` naming this function's
    and kind's files; ``topic``: the directory is a topic's, whose records are message records."""

    directory: str | None
    fmt: str = "jsonl"
    suffix: str = ""
    topic: bool = False

    def existing(self, batch_id: int, partition: int) -> str | None:
        """The name of the file an earlier run of (batch, partition) wrote, if any (this scheme's or the
        one before it)."""
        if self.directory is None:
            return None
        prefix = f"batch-{batch_id:012d}-part-{partition:05d}"
        stem = prefix + self.suffix
        legacy = {f"{stem}.{self.fmt}", f"{prefix}.{self.fmt}"}
        for name in sorted(file_names(self.directory, prefix)):  # the batch and partition: one prefix listing
            match = _NEW.match(name)
            if match and match["stem"] == stem and match["fmt"] == self.fmt or name in legacy:
                return name
        return None

    def write(self, batch_id: int, partition: int, records: Any) -> None:
        """Write a partition's records of a micro-batch (a list, or a pyarrow Table): a replay replaces the
        file an earlier run of (batch, partition) wrote, so each record exists once."""
        if self.directory is not None:
            name = (self.existing(batch_id, partition)
                    or f"batch-{batch_id:012d}-part-{partition:05d}{self.suffix}@{_now():013d}.{self.fmt}")
            write_file(self.directory, name, records, self.fmt)

    def write_new(self, records: Any, origin: str) -> str | None:
        """Write records of no (batch, partition), e.g. a trigger's (``origin``), as a new file; returns its path."""
        if self.directory is None:
            return None
        name = f"{origin}-{uuid.uuid4().hex[:8]}{self.suffix}@{_now():013d}.{self.fmt}"
        return write_file(self.directory, name, records, self.fmt)

    def read(self, batch_id: int, partition: int) -> Any:
        """What :meth:`write` wrote for (batch, partition) in the ``arrow`` format, as a pyarrow Table; None if
        nothing was written (a partition without output)."""
        name = self.existing(batch_id, partition)
        if name is None or self.directory is None:
            return None
        import pyarrow as pa

        with pa.ipc.open_stream(read_bytes(self.directory, name)) as reader:
            return reader.read_all()

    def batches(self, partition: int | None = None) -> list[tuple[int, int]]:
        """The (batch, partition) pairs :meth:`write` wrote and :meth:`discard` has not removed (of ``partition``
        only, if given), in order: one listing."""
        if self.directory is None:
            return []
        found = set()
        for name in file_names(self.directory, "batch-"):  # batch-BATCH-part-PARTITION{suffix}@MS.{fmt}
            match = _NEW.match(name)
            stem = match["stem"] if match and match["fmt"] == self.fmt else ""
            if (stem[29:] == self.suffix and stem[6:18].isdigit() and stem[18:24] == "-part-"
                    and stem[24:29].isdigit() and (partition is None or int(stem[24:29]) == partition)):
                found.add((int(stem[6:18]), int(stem[24:29])))
        return sorted(found)

    def discard(self, batch_id: int, partition: int) -> None:
        """Remove what :meth:`write` wrote for (batch, partition), if anything."""
        name = self.existing(batch_id, partition)
        if name is not None and self.directory is not None:
            _remove(self.directory, name)


def kept_sink(spec: Any, broker: str) -> OutputSink:
    """Where a function (its :class:`~statekeep.functions.config.spec.ExecutorSpec`) keeps each (batch,
    partition)'s records for ``broker`` ("kafka" or "pulsar") until they are delivered: under its topics root
    (``--topics-dir``, which on a cluster is one every worker reaches), per function incarnation."""
    root = (spec.topics_dir or default_root()).rstrip("/")
    return OutputSink(f"{root}/_{broker}/{spec.tenant}/{spec.namespace}/{spec.name}/{spec.function_id or 'none'}",
                      "arrow", f"-{broker}-{spec.tenant}.{spec.namespace}.{spec.name}")


_claimed: set[tuple[str, str]] = set()


def claim(directory: str, owner: str, what: str) -> None:
    """Record ``owner`` (a streaming query's id) as the one writer of ``directory`` (a path or URL), once per
    process: the first claim writes it, a later one by the same owner passes. :class:`InvalidArgumentError`
    naming ``what`` if another owner claimed it."""
    if (directory, owner) in _claimed:
        return
    names = file_names(directory, "_owner")
    if "_owner" not in names:
        write_file(directory, "_owner", [{"query": owner}])
    found = json.loads(read_text(directory, "_owner"))["query"]
    if found != owner:
        raise InvalidArgumentError(
            f"{what}'s state belongs to streaming query {found} (its checkpoint); this is query {owner}, with "
            "another checkpoint, whose micro-batches would count as applied: restart the query from its "
            "checkpoint, or give the function another name")
    _claimed.add((directory, owner))


def _now() -> int:
    return int(time.time() * 1000)
