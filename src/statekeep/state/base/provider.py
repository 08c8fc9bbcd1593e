"""The state provider, the contract (after Pulsar PIP-312): :class:`StateStoreProvider`, and
:class:`StoreBackedProvider`, the base of providers keeping state in a metadata store."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar

from statekeep.errors import InvalidArgumentError
from statekeep.metadata import MetadataStore, open_store
from statekeep.metadata.base import Closing
from statekeep.state.base.capabilities import PER_KEY, Capability
from statekeep.state.base.store import StateStore
from statekeep.state.keys import validate_name


class StateStoreProvider(Closing):
    """Creates each function's :class:`StateStore` (Pulsar's ``StateStoreProvider``).

    ``init(config)`` is called once before anything else (``open_provider`` calls it); ``cleanup``
    deletes all of a function's state (called when the function is deleted; a no-op if there is none);
    ``close`` releases the provider's resources. Providers register by name: see
    :mod:`statekeep.state.registry`.
    """

    #: Registered name, e.g. "metadata".
    name: ClassVar[str] = ""
    #: True when reads are local and never block on the network (the REST server then reads inline).
    nonblocking_reads: bool = False
    #: what its stores can do (see :class:`Capability`)
    capabilities: ClassVar[frozenset[Capability]] = PER_KEY

    @abc.abstractmethod
    def init(self, config: Mapping[str, Any]) -> None: ...

    @abc.abstractmethod
    def get_state_store(self, tenant: str, namespace: str, name: str) -> StateStore: ...

    @abc.abstractmethod
    def cleanup(self, tenant: str, namespace: str, name: str) -> None: ...

    def close(self) -> None:
        """Release resources; stores obtained from this provider stop working."""


class StoreBackedProvider(StateStoreProvider):
    """A provider keeping its state in a metadata store: the config's open ``store`` (the caller's,
    left open) or the one its ``metadata_url`` names (opened by :meth:`_config_store`, closed by
    :meth:`close`)."""

    def __init__(self) -> None:
        self.store: MetadataStore | None = None
        self._owns_store = False

    def _config_store(self, config: Mapping[str, Any], missing: str) -> MetadataStore:
        """``config``'s ``store``, else the store its ``metadata_url`` names, opened here;
        :class:`InvalidArgumentError` (``missing``) without either, or for a ``store`` that is not one."""
        store = config.get("store")
        if store is None:
            url = config.get("metadata_url")
            if not isinstance(url, str):
                raise InvalidArgumentError(missing)
            store, self._owns_store = open_store(url), True
        elif not isinstance(store, MetadataStore):
            raise InvalidArgumentError(f"'store' must be an open statekeep MetadataStore, not {type(store).__name__}")
        return store

    def _names(self, tenant: str, namespace: str, name: str) -> tuple[str, str, str]:
        """A function's names, validated; :class:`InvalidArgumentError` before :meth:`init`."""
        if self.store is None:
            raise InvalidArgumentError("the provider was not initialized: call init(config) first")
        return (validate_name(tenant, "tenant"), validate_name(namespace, "namespace"),
                validate_name(name, "function name"))

    def close(self) -> None:
        if self._owns_store and self.store is not None:
            self.store.close()
        self.store = None
