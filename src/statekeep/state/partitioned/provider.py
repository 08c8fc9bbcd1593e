"""The ``partitioned`` state provider (see :mod:`statekeep.state.partitioned`)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError, StatekeepError
from statekeep.handles.blobs import BlobStore
from statekeep.state.base import StoreBackedProvider
from statekeep.state.keygroups import KEY_GROUPS, validate_layout
from statekeep.state.partitioned.changelog import CAPABILITIES
from statekeep.state.partitioned.store import PartitionedStateStore

_CONFIG_KEYS = {"state_dir", "metadata_url", "store", "key_groups", "cache_dir", "storage_options"}


def default_cache_dir() -> str:
    return os.environ.get("STATEKEEP_STATE_CACHE") or os.path.join(tempfile.gettempdir(), "statekeep-state-cache")


class PartitionedStateProvider(StoreBackedProvider):
    """See the package docstring."""

    name = "partitioned"
    capabilities = CAPABILITIES

    def __init__(self) -> None:
        super().__init__()
        self.blobs: BlobStore | None = None
        self.key_groups = KEY_GROUPS
        self.cache_dir = default_cache_dir()

    def init(self, config: Mapping[str, Any]) -> None:
        if not isinstance(config, Mapping) or set(config) - _CONFIG_KEYS:
            unknown = sorted(set(config) - _CONFIG_KEYS) if isinstance(config, Mapping) else config
            raise InvalidArgumentError(f"the partitioned provider takes {', '.join(sorted(_CONFIG_KEYS))}; "
                                       f"unknown: {unknown}")
        state_dir = config.get("state_dir")
        if not isinstance(state_dir, str) or not state_dir:
            raise InvalidArgumentError("the partitioned provider needs 'state_dir': a shared directory "
                                       "(file:///...) or an fsspec URL (s3://bucket/prefix, hdfs://...)")
        options = config.get("storage_options") or {}
        if not isinstance(options, Mapping):
            raise InvalidArgumentError("'storage_options' must be a mapping of fsspec options")
        groups = config.get("key_groups", KEY_GROUPS)
        self.key_groups = validate_layout(groups, 1)[0]
        cache_dir = config.get("cache_dir") or default_cache_dir()
        if not isinstance(cache_dir, str):
            raise InvalidArgumentError("'cache_dir' must be a local directory")
        # one cache per state_dir, so two stores' partitions never share a local copy
        self.cache_dir = os.path.join(cache_dir, hashlib.sha256(state_dir.encode()).hexdigest()[:16])
        self.store = self._config_store(config, "the partitioned provider needs the coordination store: "
                                                "'metadata_url' (zk://..., etcd://..., local://...) or 'store'")
        try:
            self.blobs = BlobStore(state_dir, options=dict(options))
        except StatekeepError:
            self.close()
            raise

    def get_state_store(self, tenant: str, namespace: str, name: str) -> PartitionedStateStore:
        names = self._names(tenant, namespace, name)
        assert self.store is not None and self.blobs is not None  # _names raises unless initialized
        return PartitionedStateStore(self.store, self.blobs, *names, key_groups=self.key_groups,
                                     cache_dir=self.cache_dir)

    def cleanup(self, tenant: str, namespace: str, name: str) -> None:
        self.get_state_store(tenant, namespace, name).cleanup()
