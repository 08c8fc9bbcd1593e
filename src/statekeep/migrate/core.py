"""``migrate``, ``export_store`` and ``import_file``: a whole store (metadata tree, functions, their
state) moved between backends directly or through a portable file.

Each run: (1) a plan: the source is read once and its records counted (the progress total; all a
dry run does, with the target checked but never written); (2) the copy, resumable (see
:mod:`statekeep.migrate.sink`); (3) verification: the source read again and compared with the target,
counts and checksums (:mod:`statekeep.migrate.verify`); (4) the journal removed, a :class:`Report`.

The source is only read: a store opened for reading (on ``local://`` opening registers a session,
as every client does, but no key or state changes) or a file. A ``local://`` source must exist.
Errors: :class:`TargetNotEmptyError`, :class:`MigrationError` (also when verification fails: the
journal then stays, so a rerun resumes), :class:`CorruptFileError`, and the store's own errors
(:class:`StoreUnavailableError` for an unreachable store), each before any write where it can be known.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeep.metadata import open_store
from statekeep.metadata.base import MetadataStore
from statekeep.state.catalog import function_provider
from statekeep.migrate import portable
from statekeep.migrate.progress import Progress
from statekeep.migrate.records import Entry, Function, Node, Record, Sequence, Skipped
from statekeep.migrate.sink import MigrationError, StoreSink, check_target, read_journal
from statekeep.migrate.source import StoreSource
from statekeep.migrate.verify import Check, verify
from statekeep.state import typed
from statekeep.validate import check_int


@dataclass
class Report:
    """What a run found and did. ``counts``: records of the source by kind; ``skipped``: paths not copied
    (ephemeral); ``functions``: each function, its state mode and provider on each side, its state keys
    (``entries``) and how many of them are typed variables' entries (``variables``); ``checks``:
    verification per kind (empty for a dry run or an export)."""

    operation: str
    source: str
    target: str
    dry_run: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    functions: list[dict[str, Any]] = field(default_factory=list)
    resumed_from: int = 0
    target_state: str = ""
    checks: dict[str, Check] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks.values())

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["checks"] = {name: {**asdict(c), "ok": c.ok} for name, c in self.checks.items()}
        out["ok"] = self.ok
        return out

    def text(self) -> str:
        verb = "would copy" if self.dry_run else "copied"
        lines = [f"{self.operation}: {self.source} -> {self.target}" + (" (dry run: nothing written)"
                                                                          if self.dry_run else "")]
        if self.target_state:
            lines.append(f"  target: {self.target_state}")
        c = self.counts
        lines.append(f"  {verb}: {c.get('nodes', 0)} metadata keys, {c.get('sequences', 0)} sequential counters, "
                     f"{c.get('functions', 0)} functions, {c.get('entries', 0)} state keys")
        for f in self.functions:
            if f["state"] == "copied":
                where = f"{f['from']} -> {f['to'] or 'file'}"
            elif f["from"] == "partitioned":  # its manifests are keys of the tree; its blobs stay in the state dir
                where = "partition-owned state: manifests copied with the keys, blobs kept in its state dir"
            else:
                where = f"state kept by its own provider {f['from']!r} (not copied)"
            typed_entries = f" ({f['variables']} of typed state variables)" if f.get("variables") else ""
            lines.append(f"    function {f['fqfn']}: {f['entries']} state keys{typed_entries}, {where}")
        if self.skipped:
            lines.append(f"  skipped {len(self.skipped)} ephemeral keys: {', '.join(self.skipped[:10])}"
                         + (" ..." if len(self.skipped) > 10 else ""))
        if self.resumed_from:
            lines.append(f"  resumed after record {self.resumed_from} of {self.total}")
        if self.checks:
            lines.append("  verification:    source  matched  checksum (source / target)")
            for name, check in self.checks.items():
                if name == "skipped":
                    continue
                mark = "ok" if check.ok else "MISMATCH"
                lines.append(f"    {name:<12} {check.source:>9} {check.matched:>8}  {check.source_sha256[:16]} / "
                             f"{check.target_sha256[:16]}  {mark}")
                lines += [f"      differs: {what}" for what in check.mismatches]
        if self.seconds:
            lines.append("  time: " + ", ".join(f"{k} {v:.2f}s" for k, v in self.seconds.items()))
        return "\n".join(lines)


def _local_dir(url: str) -> Path | None:
    return Path(url[len("local://"):].split("?", 1)[0]).expanduser() if url.startswith("local://") else None


def open_source(url: str) -> MetadataStore:
    """Open a store to read from; :class:`MigrationError` for a ``local://`` directory that holds no store
    (opening it would create one)."""
    directory = _local_dir(url)
    if directory is not None and not (directory / "data").is_dir():
        raise MigrationError(f"no statekeep store at {url} (no {directory / 'data'} directory)")
    return open_store(url)


def _plan(records: Iterator[Record], report: Report, target_provider: str) -> None:
    counts = {"nodes": 0, "skipped": 0, "sequences": 0, "functions": 0, "entries": 0}
    current: dict[str, Any] | None = None
    kinds = {Node: "nodes", Skipped: "skipped", Sequence: "sequences", Function: "functions", Entry: "entries"}
    for record in records:
        counts[kinds[type(record)]] += 1
        if isinstance(record, Entry) and current is not None:
            current["entries"] += 1
            current["variables"] += typed.entry_variable(record.key) is not None
        elif isinstance(record, Skipped):
            report.skipped.append(record.path)
        elif isinstance(record, Function):
            current = {"fqfn": record.fqfn, "state": record.state, "from": record.provider,
                       "to": target_provider if record.state == "copied" else record.provider, "entries": 0,
                       "variables": 0}
            report.functions.append(current)
    report.counts = counts


def _copy(report: Report, records: Callable[[], Iterator[Record]], source_id: str, target_url: str, *,
          dry_run: bool, force: bool, batch_keys: int | None, progress: bool) -> Report:
    """The part shared by migrate and import: plan, check the target, copy, verify."""
    t0 = time.monotonic()
    _plan(records(), report, function_provider(None, target_url)[0])  # known from the URL: nothing opened
    report.seconds["plan"] = time.monotonic() - t0
    directory = _local_dir(target_url)
    if dry_run and directory is not None and not (directory / "data").is_dir():
        report.target_state = "does not exist; would be created"
        return report
    with open_store(target_url) as target:
        report.resumed_from = check_target(target, source_id, force)
        journal = read_journal(target, strict=False)
        ours = journal is not None and journal.get("source") == source_id
        merge = bool(journal.get("merge", True)) if journal is not None and ours else bool(target.get_children("/"))
        resume = "would resume" if dry_run else "resuming"
        report.target_state = (f"holds an unfinished copy of this source; {resume} after record "
                               f"{report.resumed_from}" if ours else
                               "not empty; source keys overwrite target keys (--force)" if merge else "empty")
        if dry_run:
            return report
        t1 = time.monotonic()
        with (Progress(report.operation, report.total, enabled=progress) as bar,
              StoreSink(target, source_id, merge=merge, batch_keys=batch_keys, on_progress=bar.update) as sink):
            sink.consume(records(), skip=report.resumed_from)
        report.seconds["copy"] = time.monotonic() - t1
        t2 = time.monotonic()
        report.checks = verify(records(), target)
        report.seconds["verify"] = time.monotonic() - t2
        if not report.ok:
            raise MigrationError("verification failed, the target differs from the source:\n" + report.text())
        sink.finish()
    return report


def migrate(from_url: str, to_url: str, *, dry_run: bool = False, force: bool = False,
            batch_keys: int | None = None, progress: bool = True) -> Report:
    """Copy the store at ``from_url`` into ``to_url`` (see the module docstring); returns the report.
    Resumes an unfinished copy from the same source. ``batch_keys`` overrides the keys per write."""
    check_int(batch_keys, "batch_keys", minimum=1, optional=True)  # before anything is opened
    if from_url.split("?")[0].rstrip("/") == to_url.split("?")[0].rstrip("/"):
        raise MigrationError("--from and --to name the same store")
    report = Report("migrate", from_url, to_url, dry_run=dry_run)
    with open_source(from_url) as store, StoreSource(store) as source:
        return _copy(report, source.records, from_url.split("?")[0], to_url, dry_run=dry_run, force=force,
                     batch_keys=batch_keys, progress=progress)


def export_store(url: str, path: str | os.PathLike[str], *, progress: bool = True) -> Report:
    """Write the store at ``url`` to the portable file ``path`` (:mod:`statekeep.migrate.portable`)."""
    report = Report("export", url, os.fspath(path))
    with open_source(url) as store, StoreSource(store) as source:
        t0 = time.monotonic()
        _plan(source.records(), report, "")
        done = 0
        with Progress("export", report.total, enabled=progress) as bar:

            def counted() -> Iterator[Record]:
                nonlocal done
                for done, record in enumerate(source.records(), 1):
                    if done % 1000 == 0:
                        bar.update(done)
                    yield record

            try:
                portable.write_file(path, counted(), store.scheme)
            finally:
                bar.update(done)
        report.seconds["export"] = time.monotonic() - t0
    return report


def file_id(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"file:sha256:{digest.hexdigest()}"


def import_file(url: str, path: str | os.PathLike[str], *, dry_run: bool = False, force: bool = False,
                batch_keys: int | None = None, progress: bool = True) -> Report:
    """Load the portable file ``path`` into the store at ``url``. The whole file is checked first
    (:class:`CorruptFileError`, nothing written); then as :func:`migrate`."""
    check_int(batch_keys, "batch_keys", minimum=1, optional=True)  # before anything is opened
    try:
        portable.check_file(path)
        source_id = file_id(path)
    except OSError as e:
        raise MigrationError(f"cannot read {os.fspath(path)}: {e}") from e
    report = Report("import", os.fspath(path), url, dry_run=dry_run)
    return _copy(report, lambda: portable.read_file(path), source_id, url, dry_run=dry_run, force=force,
                 batch_keys=batch_keys, progress=progress)
