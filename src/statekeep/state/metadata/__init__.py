"""The ``metadata`` state provider: each function's state in its own subtree of any metadata store.

    provider = open_provider("metadata", {"metadata_url": "etcd://127.0.0.1:2379/sk"})

Config: ``metadata_url`` (a store URL; the provider opens and closes it) or ``store`` (an open
:class:`MetadataStore` shared with the caller, who closes it); ``root`` (default ``/statekeep/state``);
``max_value_size`` (only lowers the backend-derived limit); ``retry_seconds`` (default 30: how long a
write keeps retrying lost compare-and-set races before raising :class:`BadVersionError`).

Layout, under ``ROOT/TENANT/NAMESPACE/NAME`` (``cleanup`` removes exactly this subtree):

- ``kv/<segment>``: one key (``segment`` from :func:`statekeep.state.keys.encode_key`), its value in
  the tagged form of :mod:`statekeep.state.records`; the key's version is the metadata version.
- ``log/r<10 digits>``: changelog records, created by sequential puts in the same ``multi`` as the
  change, so offsets rise with commit order (gaps possible; ZooKeeper numbers restart after cleanup).
- ``applied/<segment>``: one empty key per applied ``apply_batch`` marker (kept until cleanup).
- ``compaction``: the changelog's compaction and purge points (:mod:`statekeep.state.metadata.changelog`).

Every write is a compare-and-set on the key's version, retried on a lost race, so ``incr`` is exact
across processes and each changelog record carries the version its change produced.

Batch limits (``batch_limits``), conservative for the backends' defaults: etcd at most 27 keys
(``--max-txn-ops`` 128: a created key costs two operations, its record two more, plus the marker
and missing parents) and 1.5 MiB; ZooKeeper 1000 keys and ``jute.maxbuffer`` (1 MiB) for the whole
request; memory and local 10000 keys and 64 MiB. A value and its changelog copy travel in one
request, so ``max_value_size`` is about half the request limit on ZooKeeper and etcd. A batch
within them is one ``multi``; a larger one is staged, committed by one write and applied in
groups within them (:mod:`statekeep.state.metadata.staged`), with the same exactly-once guarantee.
"""

from statekeep.state.metadata.provider import MetadataStateStoreProvider
from statekeep.state.metadata.store import DEFAULT_ROOT, MetadataStateStore

__all__ = ["DEFAULT_ROOT", "MetadataStateStore", "MetadataStateStoreProvider"]
