"""The ``partitioned`` state provider: partition-owned state, durable in shared storage.

    provider = open_provider("partitioned", {"state_dir": "s3://bucket/statekeep",
                                             "metadata_url": "zk://zk1:2181,zk2:2181/sk"})

Per-key providers write every changed key into the coordination store, which caps a cluster at that
store's write rate and memory. Here, as in Spark's, Flink's and Kafka Streams' state stores, a
function's keys hash to a fixed number of key groups (:mod:`statekeep.state.keygroups`), each
partition of the running function owns a range of them, and a partition's state lives in an embedded
LMDB on the local disk of the machine that runs its task (a cache, :mod:`.partition`). Its truth is in
shared storage under ``state_dir`` (any fsspec URL: a shared directory, ``s3://``, ``hdfs://``): one
segment blob per commit and snapshots (:mod:`.entries`). The coordination store holds only each
partition's small manifest (:mod:`.manifest`), compare-and-set once per commit: the number of writes
per (batch, partition) is constant, whatever the number of keys.

The files, as every provider's: :mod:`.provider` (the provider), :mod:`.store` (a function's state as
REST, the CLI and followers see it), :mod:`.changelog` (its per-partition changelog); and its own:
:mod:`.task` (what a Spark task sees: its partition), :mod:`.partition` (the local copy and the commit),
:mod:`.manifest`, :mod:`.entries` and :mod:`.restore` (the one restore path of tasks and followers).

Config: ``state_dir`` (required), ``metadata_url`` or ``store`` (the coordination store),
``key_groups`` (default 128; fixed once the function's state exists), ``cache_dir`` (the local
copies; default ``$STATEKEEP_STATE_CACHE`` or a directory under the system's temp dir),
``storage_options`` (passed to fsspec, e.g. an S3 endpoint).
"""

import os
from typing import Any

from statekeep.state.partitioned.provider import PartitionedStateProvider
from statekeep.state.partitioned.store import PartitionedStateStore
from statekeep.state.partitioned.task import PartitionTask

__all__ = ["PartitionTask", "PartitionedStateProvider", "PartitionedStateStore", "state_storage"]


def state_storage(state_dir: str) -> dict[str, Any]:
    """The ``stateStorage`` of a function's config that keeps its state under ``state_dir`` (a URL, or a
    local path made absolute), with the registry's store as coordination store."""
    url = state_dir if "://" in state_dir else "file://" + os.path.abspath(state_dir)
    return {"provider": PartitionedStateProvider.name, "config": {"state_dir": url}}
