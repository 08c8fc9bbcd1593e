"""Restoring one partition of partition-owned state on a machine with no local copy: from its snapshot plus
the segments after it, against replaying its whole history (the same partition's segments with snapshots
off), for a partition of ``--keys`` keys each updated ``--rounds`` times, state dir a local directory.

    python benchmarks/partitioned_restore.py [--keys 1000000] [--rounds 3] [--batch 100000]

Prints both restore times, the entries each read, and the ratio. Coordination: a local:// store.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time

from statekeep.state import open_provider
from statekeep.state.partitioned import partition as partition_module


def build(provider, name: str, keys: int, rounds: int, batch: int) -> None:
    state = provider.get_state_store("bench", "restore", name)
    batch_id = 0
    for _ in range(rounds):
        for start in range(0, keys, batch):
            task = state.task(batch_id, 0, 1)
            task.apply_batch({}, {f"key-{i:09d}": 1 for i in range(start, min(keys, start + batch))})
            batch_id += 1


def restore(work: str, name: str, cache: str) -> tuple[float, int, int]:
    provider = open_provider("partitioned", {"state_dir": f"file://{work}/shared", "metadata_url": f"local://{work}/meta",
                                             "cache_dir": f"{work}/{cache}"})
    try:
        state = provider.get_state_store("bench", "restore", name)
        partition = state.partition(state.layout(refresh=True), 0)
        manifest = partition.manifest()
        entries = (manifest.snapshot.entries if manifest.snapshot else 0) + sum(s.entries for s in manifest.segments)
        start = time.perf_counter()
        partition.sync(manifest)
        elapsed = time.perf_counter() - start
        return elapsed, entries, partition.count()
    finally:
        provider.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=100_000)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="sk-restore-bench-")
    try:
        config = {"state_dir": f"file://{work}/shared", "metadata_url": f"local://{work}/meta",
                  "cache_dir": f"{work}/writer"}
        provider = open_provider("partitioned", config)
        try:
            build(provider, "snapshotted", args.keys, args.rounds, args.batch)
            saved = partition_module.SNAPSHOT_MIN_ENTRIES, partition_module.MAX_SEGMENTS
            partition_module.SNAPSHOT_MIN_ENTRIES = partition_module.MAX_SEGMENTS = 1 << 62  # history only
            try:
                build(provider, "history", args.keys, args.rounds, args.batch)
            finally:
                partition_module.SNAPSHOT_MIN_ENTRIES, partition_module.MAX_SEGMENTS = saved
        finally:
            provider.close()
        snap = restore(work, "snapshotted", "fresh-1")
        replay = restore(work, "history", "fresh-2")
        print(f"one partition of {args.keys:,} keys, each updated {args.rounds} times in batches of {args.batch:,}")
        print(f"{'restore from':<28}{'seconds':>9}{'entries read':>14}{'keys':>11}")
        print(f"{'snapshot + segments after':<28}{snap[0]:>9.2f}{snap[1]:>14,}{snap[2]:>11,}")
        print(f"{'the whole history':<28}{replay[0]:>9.2f}{replay[1]:>14,}{replay[2]:>11,}")
        print(f"snapshot + tail vs replay: {replay[0] / snap[0]:.2f}x faster, {snap[1] / replay[1]:.2f}x the entries")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
