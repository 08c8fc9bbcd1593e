"""The ``embedded`` state provider: function state in the ``local://`` store's own LMDB file.

    provider = open_provider("embedded", {"metadata_url": "local:///var/lib/statekeep"})

Why it exists: the ``metadata`` provider stores each key as a metadata node and each write as a
compare-and-set ``multi`` with a sequential changelog node, which is portable but costs tens of
microseconds of bookkeeping per key. A Spark micro-batch writes tens of thousands of keys per task;
here a whole batch is one LMDB transaction of plain puts (``benchmarks/state.py`` has the figures).
It needs a store with an embedded engine (:mod:`statekeep.metadata.embedded`: the ``embedded_state``
capability, e.g. ``local://``; several processes may share it: LMDB serializes writers), and writes
share the store's group commit, so every write is durable when it returns.

Layout, in three databases of the store's environment; ``F`` is ``tenant \\0 namespace \\0 name \\0``:

- ``state``: ``F + key (UTF-8)`` -> ``version (8 bytes) + tagged value`` (:mod:`statekeep.state.records`);
- ``changelog``: ``F + offset (8 bytes)`` -> a changelog record; offsets rise by one per record;
- ``state_meta``: ``F + b"m" + marker`` for applied batches, ``F + b"o"`` the next offset, and the
  changelog's epoch, compaction point and purge point (:mod:`statekeep.state.embedded.changelog`).

Keys follow the same rules as every provider (:func:`statekeep.state.keys.encode_key`).
"""

from statekeep.state.embedded.provider import EmbeddedStateProvider
from statekeep.state.embedded.store import DATABASES, EmbeddedStateStore

__all__ = ["DATABASES", "EmbeddedStateProvider", "EmbeddedStateStore"]
