"""The one restore path of partition-owned state: what rebuilds a partition from its manifest, used by
the partition's own local copy (:class:`~statekeep.state.partitioned.partition.Partition`) and by
followers (:mod:`statekeep.changelog.partitioned_follower`) alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from statekeep.state.partitioned.entries import SEGMENT, SNAPSHOT, Source, decode
from statekeep.state.keygroups import key_group
from statekeep.state.partitioned.manifest import Blob, Manifest

Pairs = Iterator[tuple[bytes, bytes]]


def restore(manifest: Manifest, groups: int, read: Callable[[Blob], Source], *, after: int | None = None,
            key_prefix: bytes = b"") -> Iterator[tuple[Blob, bytes, Pairs]]:
    """``manifest``'s partition state, blob by blob in the order to apply them: ``(blob, kind, pairs)``
    with ``kind`` :data:`SNAPSHOT` (``pairs``: stored entries to put) or :data:`SEGMENT` (to put, or to
    delete where the entry is a tombstone), ``read(blob)`` giving each blob's bytes (or reader).

    From nothing (``after`` None): the state the manifest inherits (each parent's snapshot and segments,
    filtered to the key groups, of ``groups``, that both the partition and that parent own), its
    snapshot, then its segments after the snapshot. From a copy of the same lineage at commit ``after``
    (not behind the snapshot): the segments after ``after``. With ``key_prefix``, only keys that start
    with it. Decoding raises :class:`CorruptStateError` naming the blob, from the ``pairs`` iterator."""
    def blob(b: Blob, kind: bytes, keep: Callable[[bytes], bool] | None = None) -> tuple[Blob, bytes, Pairs]:
        pairs = decode(kind, read(b), b.url, key_prefix=key_prefix)
        return b, kind, pairs if keep is None else (p for p in pairs if keep(p[0]))

    if after is None:
        wanted = range(*manifest.groups)
        for parent in manifest.parents:
            inherited = range(*parent.groups)  # only the groups this lineage was the truth of

            def keep(key: bytes, inherited: range = inherited) -> bool:
                group = key_group(key.decode(), groups)  # an internal key: its user key's group
                return group in wanted and group in inherited

            if parent.snapshot is not None:
                yield blob(parent.snapshot, SNAPSHOT, keep)
            for segment in parent.segments:
                yield blob(segment, SEGMENT, keep)
        if manifest.snapshot is not None:
            yield blob(manifest.snapshot, SNAPSHOT)
        after = manifest.snapshot.seq if manifest.snapshot else 0
    for segment in manifest.segments:
        if segment.seq > after:
            yield blob(segment, SEGMENT)
