"""State handles (after Flink's ``StateHandleStore``): large state in blob storage through fsspec,
small leader-fenced handles in the metadata store.

    store = open_store("zk://127.0.0.1:2181/sk")
    leadership = CoordinationService(store).become_leader("/jobs/j1/leader", b"me").result()
    handles = StateHandleStore(store, "/jobs/j1/state", "file:///var/lib/blobs", leadership=leadership)
    handle = handles.add_and_lock("snapshot-42", open("big.bin", "rb"), attributes={"offset": 42})
    with handles.get_and_lock("snapshot-42").open() as stream: ...   # streamed, checksum-verified

Unreferenced blobs (left by writes whose outcome was unknown, or kept for readers) are reclaimed by
:func:`collect_garbage` (``statekeep handles gc``).
"""

from statekeep.handles.blobs import BlobInfo, BlobRef, BlobStore, StateSource
from statekeep.handles.gc import GcReport, collect_garbage
from statekeep.handles.handle import StateHandle
from statekeep.handles.reader import BlobReader
from statekeep.handles.store import StateHandleStore

__all__ = ["BlobInfo", "BlobReader", "BlobRef", "BlobStore", "GcReport", "StateHandle", "StateHandleStore",
           "StateSource", "collect_garbage"]
