"""Helpers shared by the state handle tests: a leader that cannot notice its deposition, a store whose
acknowledgements get lost, and a look at what blob storage holds."""

from __future__ import annotations

from collections.abc import Callable

from statekeep.errors import StoreUnavailableError
from statekeep.handles import BlobStore, StateHandleStore
from statekeep.metadata import MetadataStore
from statekeep.metadata.types import GetResult, Op, Stat


class Unaware:
    """A leadership view frozen at the moment it was taken: it never learns that the lock is lost,
    like a leader paused (GC, swap, partition) across its deposition. Only the store can stop it."""

    held = True
    expired = None

    def __init__(self, lock) -> None:
        self.path, self.version = lock.path, lock.version


class LostAckStore(MetadataStore):
    """Wraps a store; when armed, the next ``multi`` is applied (or not, with ``apply=False``) and then
    StoreUnavailableError is raised, as when the connection drops before the acknowledgement."""

    scheme = "lostack"

    def __init__(self, inner: MetadataStore) -> None:
        super().__init__(max_value_size=inner.max_value_size)
        self.inner = inner
        self._armed: bool | None = None  # None: pass through; True: apply then fail; False: fail unapplied
        self.when: Callable[[list[Op]], bool] = lambda ops: True

    def arm(self, *, apply: bool = True, when: Callable[[list[Op]], bool] = lambda ops: True) -> None:
        self._armed, self.when = apply, when

    def _get(self, path: str) -> GetResult | None:
        return self.inner.get(path)

    def _get_children(self, path: str) -> list[str]:
        return self.inner.get_children(path)

    def _multi(self, ops: list[Op]) -> list[Stat | None]:
        armed = self._armed
        if armed is None or not self.when(ops):
            return self.inner.multi(ops)
        self._armed = None
        if armed:
            self.inner.multi(ops)
        raise StoreUnavailableError("connection lost before the acknowledgement (injected)")

    def _close(self) -> None:
        self.inner.close()


def blob_urls(handles: StateHandleStore | BlobStore, root: str | None = None) -> set[str]:
    """URLs of the finished blobs in the store's blob scope."""
    blobs = handles.blobs if isinstance(handles, StateHandleStore) else handles
    scope = handles.root if isinstance(handles, StateHandleStore) else root
    return {b.url for b in blobs.list(scope) if not b.temporary}


def snapshot(handles: StateHandleStore) -> dict[str, tuple[int, bytes]]:
    """Every key's (version, state), read without locking."""
    out = {}
    for key in handles.get_all_handles():
        current = handles.store.get(f"{handles.root}/handles/{key}")
        if current is not None:
            from statekeep.handles.handle import decode

            handle = decode(key, current.stat.version, current.value, handles.blobs)
            out[key] = (current.stat.version, handle.read_bytes())
    return out
