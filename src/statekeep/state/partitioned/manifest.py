"""Manifests: the small, fenced records in the coordination store that say what a partition's state is.

Under ``ROOT/T/N/F`` (:data:`ROOT`) the coordination store holds:

- ``layout``: ``{"groups", "parallelism", "generation"}``: the key groups and how many partitions own
  them now;
- ``g{generation}-p{partition}``: one :class:`Manifest` per partition of a generation.

A partition's state is its manifest's parents' state (filtered to its key groups; only after a
rescale, until its first snapshot), then its snapshot, then its segments in ``seq`` order. Every change
of a partition's state is one compare-and-set of its manifest (the fence: of two writers that read the
same version only one commits; a retired manifest commits nothing), so a commit writes one blob and one
small key, whatever the number of keys.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from statekeep import jsonrecords
from statekeep.handles.blobs import BlobRef

ROOT = "/statekeep/partitioned"


def function_path(tenant: str, namespace: str, name: str) -> str:
    return f"{ROOT}/{tenant}/{namespace}/{name}"


def manifest_name(generation: int, partition: int) -> str:
    return f"g{generation}-p{partition}"


@dataclass(frozen=True)
class Blob:
    """A segment or snapshot blob: where, its size and sha256, and the commit (``seq``) it ends at."""

    url: str
    size: int
    sha256: str
    seq: int
    entries: int

    @classmethod
    def of(cls, ref: BlobRef, seq: int, entries: int) -> Blob:
        return cls(ref.url, ref.size, ref.sha256, seq, entries)


@dataclass(frozen=True)
class Lineage:
    """What a partition inherits from one partition of the previous generation: its ``groups`` range
    and its snapshot and segments as they were when the generation changed."""

    groups: tuple[int, int]
    snapshot: Blob | None
    segments: tuple[Blob, ...]


@dataclass(frozen=True)
class Manifest:
    id: str                      # unique per manifest: a local copy of another lineage is rebuilt
    generation: int
    partition: int
    groups: tuple[int, int]      # [low, high) key groups owned
    seq: int = 0                 # commits so far
    batch: int = -1              # the last micro-batch applied
    snapshot: Blob | None = None
    segments: tuple[Blob, ...] = ()
    parents: tuple[Lineage, ...] = ()
    retired: bool = False        # a rescale replaced this generation: it commits nothing more
    version: int = field(default=-1, compare=False)  # the coordination store's version it was read at

    @classmethod
    def new(cls, generation: int, partition: int, groups: range, batch: int = -1,
            parents: tuple[Lineage, ...] = ()) -> Manifest:
        return cls(uuid.uuid4().hex, generation, partition, (groups.start, groups.stop), batch=batch, parents=parents)

    @property
    def since_snapshot(self) -> int:
        """Entries in the segments after the snapshot (and in inherited state): the cost of a restore
        beyond the snapshot."""
        return sum(s.entries for s in self.segments) + sum(
            (p.snapshot.entries if p.snapshot else 0) + sum(s.entries for s in p.segments) for p in self.parents)

    def committed(self, segment: Blob | None, batch: int | None) -> Manifest:
        """The manifest after one more commit."""
        return replace(self, seq=self.seq + 1, batch=self.batch if batch is None else max(self.batch, batch),
                       segments=self.segments + ((segment,) if segment is not None else ()))

    def with_snapshot(self, snapshot: Blob) -> Manifest:
        """The snapshot replaces inherited state and every segment it covers."""
        return replace(self, snapshot=snapshot, parents=(),
                       segments=tuple(s for s in self.segments if s.seq > snapshot.seq))

    def blobs(self) -> list[Blob]:
        """Every blob this manifest needs."""
        out = [*self.segments, *([self.snapshot] if self.snapshot else [])]
        for parent in self.parents:
            out += [*parent.segments, *([parent.snapshot] if parent.snapshot else [])]
        return out

    def lineage(self) -> Lineage:
        return Lineage(self.groups, self.snapshot, self.segments)

    def encode(self) -> bytes:
        data = {"id": self.id, "generation": self.generation, "partition": self.partition,
                "groups": list(self.groups), "seq": self.seq, "batch": self.batch,
                "snapshot": _blob(self.snapshot), "segments": [_blob(s) for s in self.segments],
                "parents": [{"groups": list(p.groups), "snapshot": _blob(p.snapshot),
                             "segments": [_blob(s) for s in p.segments]} for p in self.parents],
                "retired": self.retired}
        return json.dumps(data, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes, version: int, where: str) -> Manifest:
        """:class:`CorruptRecordError` naming ``where`` if ``raw`` is not a manifest."""
        return jsonrecords.decode(raw, where, "partition manifest", lambda d: cls(
            d["id"], d["generation"], d["partition"], (d["groups"][0], d["groups"][1]), d["seq"], d["batch"],
            _unblob(d["snapshot"]), _unblobs(d["segments"]),
            tuple(Lineage((p["groups"][0], p["groups"][1]), _unblob(p["snapshot"]), _unblobs(p["segments"]))
                  for p in d["parents"]),
            d["retired"], version))


@dataclass(frozen=True)
class Layout:
    groups: int
    parallelism: int
    generation: int
    version: int = field(default=-1, compare=False)

    def encode(self) -> bytes:
        return json.dumps({"groups": self.groups, "parallelism": self.parallelism,
                           "generation": self.generation}).encode()

    @classmethod
    def decode(cls, raw: bytes, version: int, where: str) -> Layout:
        """:class:`CorruptRecordError` naming ``where`` if ``raw`` is not a layout."""
        return jsonrecords.decode(raw, where, "partition layout", lambda d: cls(
            int(d["groups"]), int(d["parallelism"]), int(d["generation"]), version))


def _blob(b: Blob | None) -> dict[str, Any] | None:
    return None if b is None else {"url": b.url, "size": b.size, "sha256": b.sha256, "seq": b.seq,
                                   "entries": b.entries}


def _unblob(d: dict[str, Any] | None) -> Blob | None:
    return None if d is None else Blob(d["url"], d["size"], d["sha256"], d["seq"], d["entries"])


def _unblobs(ds: list[dict[str, Any]]) -> tuple[Blob, ...]:
    return tuple(Blob(d["url"], d["size"], d["sha256"], d["seq"], d["entries"]) for d in ds)
