"""Reading and raising a parent's sequential counter on each built-in backend.

The metadata contract hands out sequential numbers per parent but has no call to read or set that
counter, so a migration reaches each backend's own bookkeeping here (one function per backend, kept
in this module so the backends stay untouched):

- ``memory://`` and ``local://``: the last number handed out per parent (the next is one more);
- ``etcd://``: the key ``PREFIX + "\\0s" + parent`` holding that last number in decimal;
- ``zk://``: ZooKeeper numbers a sequential child after its parent's ``cversion`` (which counts child
  creations and deletions) and offers no way to set it: it is raised by creating sequential scratch
  children (up to 1000 per transaction) until one gets a number >= the wanted one, then deleting them,
  so listeners on the target see those Created/Deleted events.

Guarantee of :func:`raise_sequence`: afterwards, every sequential key created under ``parent`` gets a
number greater than ``at_least``. :func:`last_sequence` is an upper bound of the numbers handed out so
far (exact on memory, local and etcd; ``cversion - 1`` on ZooKeeper).
"""

from __future__ import annotations

import uuid

from statekeep.errors import InvalidArgumentError, StatekeepError
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.types import validate_path

__all__ = ["last_sequence", "raise_sequence", "supports_sequences"]

_U64_LEN = 8
_ZK_OPS_PER_TXN = 1000


def supports_sequences(store: MetadataStore) -> bool:
    """Whether this module can read and raise ``store``'s sequential counters."""
    return store.scheme in ("memory", "local", "etcd", "zk")


def last_sequence(store: MetadataStore, parent: str) -> int:
    """An upper bound of the sequential numbers handed out under ``parent`` (0: none).
    :class:`InvalidArgumentError` for a backend this module does not know."""
    validate_path(parent, allow_root=True)
    scheme = store.scheme
    if scheme == "memory":
        with store._tree.lock:  # type: ignore[attr-defined]
            return store._tree.last_sequence(parent)  # type: ignore[attr-defined]
    if scheme == "local":
        from statekeep.metadata.local import transaction

        with transaction(store._env) as txn:  # type: ignore[attr-defined]
            raw = txn.get(parent.encode(), db=store._engine.sequences)  # type: ignore[attr-defined]
        return 0 if raw is None else int.from_bytes(raw[:_U64_LEN], "big")
    if scheme == "etcd":
        from statekeep.metadata.etcd import _range

        kvs = store._read(_range(store._counter(parent))).kvs  # type: ignore[attr-defined]
        return int(kvs[0].value) if kvs else 0
    if scheme == "zk":
        zstat = _zk_stat(store, parent)
        return 0 if zstat is None else max(zstat.cversion - 1, 0)
    raise InvalidArgumentError(f"sequential counters of {scheme}:// stores cannot be read")


def raise_sequence(store: MetadataStore, parent: str, at_least: int) -> None:
    """Make every sequential number handed out under ``parent`` from now on greater than ``at_least``
    (nothing is written when that already holds). On ZooKeeper ``parent`` must exist."""
    validate_path(parent, allow_root=True)
    if isinstance(at_least, bool) or not isinstance(at_least, int) or at_least < 0:
        raise InvalidArgumentError(f"at_least must be an int >= 0, not {at_least!r}")
    store._check_open()
    scheme = store.scheme
    if scheme == "memory":
        tree = store._tree  # type: ignore[attr-defined]
        with tree.lock:
            if tree.sequences.get(parent, 0) < at_least:
                tree.sequences[parent] = at_least
    elif scheme == "local":
        _raise_local(store, parent, at_least)
    elif scheme == "etcd":
        _raise_etcd(store, parent, at_least)
    elif scheme == "zk":
        _raise_zk(store, parent, at_least)
    else:
        raise InvalidArgumentError(f"sequential counters of {scheme}:// stores cannot be raised")


def _raise_local(store: MetadataStore, parent: str, at_least: int) -> None:
    from statekeep.metadata._tree import Changes

    def build(reader, now_ms: int):  # type: ignore[no-untyped-def]
        changes = Changes(reader, store.session_id, now_ms)  # type: ignore[attr-defined]
        if reader.last_sequence(parent) < at_least:  # applied in the same transaction as the read
            changes.sequences[parent] = at_least
        return None, changes

    store._engine.submit(build)  # type: ignore[attr-defined]


def _raise_etcd(store: MetadataStore, parent: str, at_least: int) -> None:
    from statekeep.metadata.etcd import _C, _mod_is, _put, _range, _Retry, _version_is, rpc

    key = store._counter(parent)  # type: ignore[attr-defined]

    def attempt() -> object:
        kvs = store._read(_range(key)).kvs  # type: ignore[attr-defined]
        if kvs and int(kvs[0].value) >= at_least:
            return None
        # compare-and-set against the counter as read: a concurrent sequential put is never lost
        guard = _mod_is(key, _C.EQUAL, kvs[0].mod_revision) if kvs else _version_is(key, _C.EQUAL, 0)
        request = rpc.TxnRequest(compare=[guard], success=[_put(key, str(at_least).encode())])
        response = store._call(store._txn(request), write=True)  # type: ignore[attr-defined]
        return None if response.succeeded else _Retry

    store._retrying(attempt)  # type: ignore[attr-defined]
    store._sequence_hints.pop(parent, None)  # type: ignore[attr-defined]  # its guess of the last number


def _zk_stat(store: MetadataStore, parent: str):  # type: ignore[no-untyped-def]
    from statekeep.errors import NotFoundError

    try:
        return store._run(lambda: store._client.exists_async(parent), parent)  # type: ignore[attr-defined]
    except NotFoundError:
        return None


def _raise_zk(store: MetadataStore, parent: str, at_least: int) -> None:
    # ZooKeeper's next number follows the parent's cversion but not as a documented formula (a create and a
    # delete of one child in one transaction count differently), so numbers are handed out for real: create
    # sequential scratch children (up to 1000 per transaction), read the numbers they got, delete them.
    if _zk_stat(store, parent) is None:
        raise InvalidArgumentError(f"cannot raise the sequential counter of {parent}: it does not exist")
    scratch = parent.rstrip("/") + f"/.statekeep-sequence-{uuid.uuid4().hex[:8]}-"
    client = store._client  # type: ignore[attr-defined]
    handed_out = -1
    while handed_out < at_least:
        count = 1 if handed_out < 0 else min(at_least - handed_out, _ZK_OPS_PER_TXN)
        txn = client.transaction()
        for _ in range(count):
            txn.create(scratch, b"", sequence=True)
        created = _commit(store, txn, parent)
        handed_out = max(int(name[-10:]) for name in created)
        txn = client.transaction()
        for name in created:
            txn.delete(name)
        _commit(store, txn, parent)


def _commit(store: MetadataStore, txn, parent: str) -> list:  # type: ignore[no-untyped-def]
    results = store._run(txn.commit_async, parent, write=True)  # type: ignore[attr-defined]
    failed = [r for r in results if isinstance(r, Exception)]
    if failed:
        raise StatekeepError(f"raising the sequential counter of {parent} failed: {failed[0]!r}")
    return results
