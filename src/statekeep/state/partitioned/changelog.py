"""The changelog of partition-owned state: one per partition, its offsets and epoch (see
:class:`~statekeep.state.partitioned.store.PartitionedStateStore`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from statekeep.handles.blobs import BlobStore
from statekeep.metadata.base import MetadataStore
from statekeep.state.base import Capability, ChangelogPosition
from statekeep.state.partitioned.manifest import Layout, Manifest

#: a changelog offset of partition-owned state is ``seq << SEQ_SHIFT | index``: the entry ``index`` of
#: the segment its partition committed as commit ``seq``
SEQ_SHIFT = 32
#: what partition-owned state offers: markers go through task(), snapshots compact it as it runs
CAPABILITIES = frozenset({Capability.CHANGELOG_READ, Capability.PARTITIONED})


class PartitionedChangelog(Protocol):
    """What a reader of partition-owned state's changelog reads it through, beside the state contract: the
    layout, each partition's manifest, and the blobs they name. A store declaring
    :attr:`Capability.PARTITIONED` offers it (followers read it so, :mod:`statekeep.changelog.partitioned_follower`)."""

    #: the coordination store holding the layout and manifests, under ``root``
    store: MetadataStore
    root: str
    #: the shared storage of segments and snapshots, and this function's scope in it
    blobs: BlobStore
    scope: str

    def layout(self, refresh: bool = False) -> Layout | None:
        """The key groups and partitions now (None until the state is first written)."""

    def manifests(self, layout: Layout, partitions: Iterable[int] | None = None) -> list[Manifest]:
        """The manifests of ``partitions`` (default: all) of ``layout``, as the store holds them now."""


def epoch_of(generation: int, first: Manifest | str) -> str:
    """The changelog epoch of a layout generation whose partition 0 is ``first`` (its manifest or id):
    unique per incarnation, since a deleted and created again state has new manifest ids."""
    return f"g{generation}.{(first if isinstance(first, str) else first.id)[:12]}"


def partition_position(manifest: Manifest, epoch: str) -> ChangelogPosition:
    """Where ``manifest``'s partition's changelog stands (its offsets: see :data:`SEQ_SHIFT`). Records a
    snapshot (or, after a rescale, the inherited state) replaced are gone: ``purged_offset`` and
    ``compacted_offset`` are the end of the commit it covers (-1: none)."""
    covered = manifest.snapshot.seq if manifest.snapshot else (0 if manifest.parents else -1)
    purged = ((covered + 1) << SEQ_SHIFT) - 1 if covered >= 0 else -1
    last = max([purged, *((s.seq << SEQ_SHIFT) + s.entries - 1 for s in manifest.segments)])
    return ChangelogPosition(epoch, last, purged, purged)
