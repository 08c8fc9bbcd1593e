"""Reading the changelog every leader state store writes (after Kafka KIP-813, "shareable state stores"):
compaction, read-only followers that materialize a leader's state elsewhere, and snapshots.

    from statekeep.changelog import FollowerStore, SnapshotStore, Compactor, compact

    follower = FollowerStore.open("local:///var/lib/statekeep", "public", "default", "wc", local_dir="/tmp/f")
    follower.wait_until_caught_up(10); follower.get_counter("hello"); follower.lag
"""

from statekeep.changelog.compaction import DEFAULT_TOMBSTONE_RETENTION_S, Compactor, compact
from statekeep.changelog.follower import FollowerStore
from statekeep.changelog.partitioned_follower import PartitionedFollowerStore  # registers itself with open()
from statekeep.changelog.snapshots import SnapshotInfo, SnapshotStore

__all__ = ["DEFAULT_TOMBSTONE_RETENTION_S", "Compactor", "FollowerStore", "PartitionedFollowerStore", "SnapshotInfo",
           "SnapshotStore", "compact"]
