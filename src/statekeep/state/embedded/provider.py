"""The ``embedded`` state provider (see :mod:`statekeep.state.embedded.store`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.metadata.embedded import embedded_engine, has_embedded_engine
from statekeep.state.base import StoreBackedProvider
from statekeep.state.embedded.store import DATABASES, EmbeddedStateStore


class EmbeddedStateProvider(StoreBackedProvider):
    """State in the LMDB file of a store with an embedded engine (``local://``); see the module docstring.

    Config: ``metadata_url`` (the URL of such a store, opened and closed by the provider) or ``store``
    (an open one shared with the caller)."""

    name = "embedded"
    nonblocking_reads = True

    def init(self, config: Mapping[str, Any]) -> None:
        if not isinstance(config, Mapping) or set(config) - {"metadata_url", "store"}:
            raise InvalidArgumentError("the embedded provider takes 'metadata_url' (local://...) or 'store'")
        missing = "the embedded provider needs the 'metadata_url' of a store with an embedded engine (local://...)"
        url = config.get("metadata_url")
        if config.get("store") is None and isinstance(url, str) and not has_embedded_engine(url):
            raise InvalidArgumentError(missing)  # the backend's capability, before opening
        self.store = self._config_store(config, missing)
        try:
            engine = embedded_engine(self.store)  # InvalidArgumentError for a store without one
            for db in DATABASES:  # now, not on a first read (a server's may come on its event loop)
                engine.open_db(db)
        except BaseException:
            self.close()
            raise

    def get_state_store(self, tenant: str, namespace: str, name: str) -> EmbeddedStateStore:
        names = self._names(tenant, namespace, name)
        assert self.store is not None  # _names raises unless initialized
        return EmbeddedStateStore(self.store, *names)

    def cleanup(self, tenant: str, namespace: str, name: str) -> None:
        self.get_state_store(tenant, namespace, name).cleanup()
