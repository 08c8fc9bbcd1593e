"""The ``metadata`` state provider (see :mod:`statekeep.state.metadata`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.lru import BoundedLRU
from statekeep.metadata.types import validate_path
from statekeep.state import records
from statekeep.state.base import BatchLimits, StoreBackedProvider
from statekeep.state.keys import MAX_SEGMENT
from statekeep.state.metadata.store import (_EXTRA_OPS, _OPS_PER_KEY, _PER_KEY_OVERHEAD, DEFAULT_ROOT,
                                            MetadataStateStore)
from statekeep.validate import check_int


class MetadataStateStoreProvider(StoreBackedProvider):
    """State in a metadata store (any backend); see the module docstring."""

    name = "metadata"

    def __init__(self) -> None:
        super().__init__()
        self._handles: BoundedLRU[tuple[str, str, str], MetadataStateStore] = BoundedLRU(10_000)

    def init(self, config: Mapping[str, Any]) -> None:
        if not isinstance(config, Mapping):
            raise InvalidArgumentError("the metadata state provider's config must be a mapping")
        unknown = set(config) - {"metadata_url", "store", "root", "max_value_size", "retry_seconds"}
        if unknown:
            raise InvalidArgumentError(f"unknown metadata state provider options: {', '.join(sorted(unknown))}")
        self.root = validate_path(config.get("root", DEFAULT_ROOT), allow_root=False)
        self.retry_seconds = float(config.get("retry_seconds", 30.0))
        self.store = store = self._config_store(config, "the metadata state provider needs 'metadata_url' (or 'store')")
        # the backend's declared capabilities and limits, not its scheme: a third-party backend opts in
        self.nonblocking_reads = "nonblocking_reads" in store.capabilities
        max_keys = max(1, (store.max_multi_ops - _EXTRA_OPS) // _OPS_PER_KEY)
        self.limits = BatchLimits(max_keys, store.max_request_bytes - 8192)
        fits_store = store.max_value_size - records.RECORD_HEADER_SIZE - MAX_SEGMENT
        fits_request = (self.limits.max_bytes - _PER_KEY_OVERHEAD) // 2
        self.max_value_size = min(fits_store, fits_request)
        wanted = config.get("max_value_size")
        if wanted is not None:
            check_int(wanted, "max_value_size", minimum=1)
            self.max_value_size = min(self.max_value_size, wanted)

    def get_state_store(self, tenant: str, namespace: str, name: str) -> MetadataStateStore:
        # handles hold no state of their own (only paths), so one per function is shared
        store = self._handles.get((tenant, namespace, name))  # None also for an unhashable name
        if store is None:
            self._names(tenant, namespace, name)  # says what is wrong with a bad name
            store = self._handles.put((tenant, namespace, name), self._open(tenant, namespace, name))
        return store

    def _open(self, tenant: str, namespace: str, name: str) -> MetadataStateStore:
        assert self.store is not None  # handles come from an initialized provider
        return MetadataStateStore(self.store, self.root, tenant, namespace, name, retry_seconds=self.retry_seconds,
                                  max_value_size=self.max_value_size, limits=self.limits)

    def cleanup(self, tenant: str, namespace: str, name: str) -> None:
        names = self._names(tenant, namespace, name)  # raises unless initialized
        assert self.store is not None
        self.store.delete_recursive(f"{self.root}/{'/'.join(names)}")
        handle = self._handles.get((tenant, namespace, name))
        if handle is not None:
            handle._log_ready = False  # its next write starts a new incarnation, with a new token
