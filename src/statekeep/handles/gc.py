"""Reclaiming blobs that no state handle points to (``statekeep handles gc``).

Orphans come from writes whose outcome was unknown (:class:`PossibleInconsistentStateError` keeps the
blob), from old blobs kept because a reader had the key locked, from cleared handles and from uploads a
crash interrupted. A blob is an orphan if no handle under the root points to it and it was last written more
than ``grace_seconds`` ago: the grace must exceed the longest upload-to-commit time and the longest read of a
replaced state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from statekeep.errors import CorruptStateError, StatekeepError
from statekeep.handles.blobs import BlobInfo, BlobStore
from statekeep.handles.handle import decode
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.types import validate_path
from statekeep.validate import check_number

DEFAULT_GRACE_SECONDS = 3600.0


@dataclass
class GcReport:
    """What a gc run found: ``orphans`` (to reclaim), how many blobs were scanned, referenced, or too young
    to judge; ``deleted`` and ``failed`` (url, error) when run with ``delete=True``."""

    scanned: int = 0
    referenced: int = 0
    young: int = 0
    orphans: list[BlobInfo] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    dry_run: bool = True

    @property
    def orphan_bytes(self) -> int:
        return sum(blob.size for blob in self.orphans)

    def to_json(self) -> dict[str, Any]:
        return {"dryRun": self.dry_run, "scanned": self.scanned, "referenced": self.referenced,
                "young": self.young, "orphans": len(self.orphans), "orphanBytes": self.orphan_bytes,
                "deleted": len(self.deleted), "failed": [{"url": u, "error": e} for u, e in self.failed],
                "blobs": [{"url": b.url, "size": b.size, "writtenMs": b.written_ms, "temporary": b.temporary}
                          for b in self.orphans]}


def collect_garbage(store: MetadataStore, root_path: str, blobs: str | BlobStore, *,
                    grace_seconds: float = DEFAULT_GRACE_SECONDS, delete: bool = False,
                    blob_options: dict[str, Any] | None = None, now_ms: int | None = None) -> GcReport:
    """Find the blobs under ``root_path``'s blob scope that no handle points to and that are older than
    ``grace_seconds``; delete them only if ``delete`` (a dry run changes nothing).

    Blobs are listed *before* handles are read, so a blob whose handle was committed before the read is
    always seen as referenced. Raises :class:`CorruptStateError` (deleting nothing) if a handle cannot be
    decoded, since what it points to is then unknown. Deletion failures are reported in ``failed``.
    """
    validate_path(root_path)
    check_number(grace_seconds, "grace_seconds", minimum=0, unit=" of seconds")
    blob_store = blobs if isinstance(blobs, BlobStore) else BlobStore(blobs, options=blob_options)
    found = blob_store.list(root_path)
    referenced = _referenced(store, root_path)
    now = int(time.time() * 1000) if now_ms is None else now_ms
    report = GcReport(scanned=len(found), dry_run=not delete)
    for blob in found:
        if blob.url in referenced:
            report.referenced += 1
        elif now - blob.written_ms < grace_seconds * 1000:
            report.young += 1
        else:
            report.orphans.append(blob)
    if delete:
        for blob in report.orphans:
            try:
                blob_store.delete(blob.url)
                report.deleted.append(blob.url)
            except StatekeepError as e:
                report.failed.append((blob.url, str(e)))
    return report


def list_handles(store: MetadataStore, root_path: str) -> list[dict[str, Any]]:
    """The handles under ``root_path`` as JSON objects: ``key``, ``version``, ``size``, ``sha256``,
    ``createdMs``, ``blob``, ``attributes`` and ``lockedBy`` (the identities holding it locked); one that
    cannot be decoded has ``error`` instead of the handle's own fields."""
    handles = f"{root_path.rstrip('/')}/handles"
    rows: list[dict[str, Any]] = []
    for key in store.get_children(handles):
        current = store.get(f"{handles}/{key}")
        if current is None:
            continue
        locks = store.get_children(f"{handles}/{key}/locks")
        try:
            h = decode(key, current.stat.version, current.value, None)
            rows.append({"key": key, "version": h.version, "size": h.size, "sha256": h.sha256,
                         "createdMs": h.created_ms, "blob": h.blob_url, "attributes": dict(h.attributes),
                         "lockedBy": locks})
        except CorruptStateError as e:
            rows.append({"key": key, "version": current.stat.version, "error": str(e), "lockedBy": locks})
    return rows


def _referenced(store: MetadataStore, root_path: str) -> set[str]:
    handles = f"{root_path.rstrip('/')}/handles"
    keys = store.get_children(handles)
    try:
        return {decode(key, current.stat.version, current.value, None).blob_url
                for key, current in zip(keys, store.get_many([f"{handles}/{key}" for key in keys]))
                if current is not None}
    except CorruptStateError as e:
        raise CorruptStateError(f"gc stopped, nothing deleted: {e}") from e
