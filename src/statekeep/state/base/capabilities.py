"""What a state provider can do beyond reading and writing keys, declared up front."""

from __future__ import annotations

import enum


class Capability(str, enum.Enum):
    """What a state provider can do beyond reading and writing keys (after tooz's ``Characteristics``):
    declared in ``capabilities`` by the provider and its stores, checked by callers (``Capability.X in
    state.capabilities``) instead of catching an error; a call to an absent one raises
    :class:`UnsupportedCapabilityError` (:meth:`ReadableStateStore.require`)."""

    #: ``read_changelog`` / ``read_partition_changelog`` return the records (KIP-813)
    CHANGELOG_READ = "changelog_read"
    #: ``apply_batch(marker=)`` and ``has_marker`` on the store itself (otherwise only through ``task``)
    MARKERS = "markers"
    #: ``compact_changelog`` removes superseded records (otherwise the provider compacts on its own)
    COMPACTION = "compaction"
    #: partitions own key groups: ``partitioning`` decides the micro-batch's layout, the changelog has one
    #: position per partition, and the store offers its partitions' manifests to followers
    #: (:class:`~statekeep.state.partitioned.changelog.PartitionedChangelog`)
    PARTITIONED = "partitioned"


#: What the per-key providers (``metadata``, ``embedded``) offer.
PER_KEY = frozenset({Capability.CHANGELOG_READ, Capability.MARKERS, Capability.COMPACTION})
