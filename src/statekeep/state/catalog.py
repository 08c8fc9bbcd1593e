"""Where the function registry keeps each function, and reading it: :class:`FunctionCatalog`.

Layout: ``ROOT/TENANT/NAMESPACE/NAME`` (default root ``/statekeep/functions``) holds a function's
configuration as a JSON object (Pulsar's ``FunctionConfig`` shape); an empty key there is a parent
(a tenant or namespace), not a function. The configuration's ``stateStorage``
(``{"provider": NAME, "config": {...}}``, absent: the default) names the function's state provider.

This is the one implementation of that layout and of reading an entry.
:class:`statekeep.functions.config.registry.FunctionRegistry` (the writer, one layer up) builds on it, and
layers below ``functions`` that must find a function and its state provider (followers) use it
directly, so they never parse the registry's JSON themselves nor import ``statekeep.functions``.

    catalog = FunctionCatalog(store)                      # root=... where the registry keeps functions
    catalog.get("public", "default", "wc")                # GetResult | None
    catalog.config("public", "default", "wc")             # its JSON; NotFoundError if no such function
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from statekeep import jsonrecords
from statekeep.errors import InvalidArgumentError, NotFoundError
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.embedded import has_embedded_engine
from statekeep.metadata.types import GetResult, validate_path
from statekeep.state.keys import validate_name

DEFAULT_ROOT = "/statekeep/functions"


@functools.lru_cache(maxsize=10_000)  # on every REST call; only validated names get cached
def _function_path(root: str, tenant: str, namespace: str, name: str) -> str:
    return (f"{root}/{validate_name(tenant, 'tenant')}/{validate_name(namespace, 'namespace')}/"
            f"{validate_name(name, 'function name')}")


def parse_state_storage(storage: object) -> tuple[str, dict[str, Any]] | None:
    """``(provider name, config)`` of a ``stateStorage`` value, ``None`` when absent (the default
    provider). :class:`InvalidArgumentError` unless it is ``{"provider": NAME, "config": {...}}``."""
    if storage is None:
        return None
    if (not isinstance(storage, Mapping) or not isinstance(storage.get("provider"), str)
            or not isinstance(storage.get("config", {}), Mapping) or set(storage) - {"provider", "config"}):
        raise InvalidArgumentError('stateStorage must be {"provider": NAME, "config": {...}}')
    return storage["provider"], dict(storage.get("config", {}))


def default_provider(store: MetadataStore | str) -> tuple[str, dict[str, Any]]:
    """The state provider of a function that names none, with its state on ``store`` itself (an open
    store, or its URL: nothing is opened): ``embedded`` (the fast one) where the store has an embedded
    engine (:func:`has_embedded_engine`: ``local://``), ``metadata`` elsewhere."""
    return ("embedded" if has_embedded_engine(store) else "metadata"), _on(store)


def _on(store: MetadataStore | str) -> dict[str, Any]:
    return {"metadata_url": store} if isinstance(store, str) else {"store": store}


def function_provider(storage: object, store: MetadataStore | str,
                      default: tuple[str, Mapping[str, Any]] | None = None) -> tuple[str, dict[str, Any]]:
    """THE rule of which provider, with which config, keeps a function's state: the ``stateStorage`` it
    names (a config naming no coordination store gets the registry's ``store``: the open store, or
    its URL for another process), else ``default`` (the server's configured one), else
    :func:`default_provider`. :class:`InvalidArgumentError` for a malformed ``stateStorage``."""
    parsed = parse_state_storage(storage)
    if parsed is None:
        return (default[0], dict(default[1])) if default is not None else default_provider(store)
    name, config = parsed
    if "store" not in config and "metadata_url" not in config:
        config.update(_on(store))
    return name, config


class FunctionCatalog:
    """Read access to the functions registered in ``store`` under ``root``. Thread-safe; reads only."""

    def __init__(self, store: MetadataStore, root: str = DEFAULT_ROOT) -> None:
        if not isinstance(root, str):
            raise InvalidArgumentError(f"the functions root must be a path such as {DEFAULT_ROOT}, not {root!r}")
        self.store = store
        self.root = root.rstrip("/")
        if self.root:
            validate_path(self.root)

    def path(self, tenant: str, namespace: str, name: str) -> str:
        """The key of a function's configuration. :class:`InvalidArgumentError` for an invalid name."""
        try:
            return _function_path(self.root, tenant, namespace, name)
        except TypeError:  # unhashable: not a name at all; let the validation say why
            return f"{self.namespace_path(tenant, namespace)}/{validate_name(name, 'function name')}"

    def namespace_path(self, tenant: str, namespace: str) -> str:
        return f"{self.root}/{validate_name(tenant, 'tenant')}/{validate_name(namespace, 'namespace')}"

    def get(self, tenant: str, namespace: str, name: str) -> GetResult | None:
        """The stored configuration (raw JSON and its stat), or ``None`` if there is no such function."""
        result = self.store.get(self.path(tenant, namespace, name))
        return result if result is not None and result.value else None  # empty: a parent, not a function

    def require(self, tenant: str, namespace: str, name: str) -> GetResult:
        """:meth:`get`, or :class:`NotFoundError` if there is no such function."""
        result = self.get(tenant, namespace, name)
        if result is None:
            raise NotFoundError(f"function {tenant}/{namespace}/{name} does not exist")
        return result

    def exists(self, tenant: str, namespace: str, name: str) -> bool:
        return self.get(tenant, namespace, name) is not None

    def config(self, tenant: str, namespace: str, name: str) -> dict[str, Any]:
        """The configuration as a JSON object. :class:`NotFoundError` if there is no such function,
        :class:`CorruptRecordError` if what is stored is not a JSON object."""
        return self.decode(self.require(tenant, namespace, name).value, self.path(tenant, namespace, name))

    @staticmethod
    def decode(raw: bytes, key: str = "?") -> dict[str, Any]:
        """A stored configuration as a JSON object; :class:`CorruptRecordError` (a
        :class:`CorruptStateError`) if it is not one."""
        config: dict[str, Any] = jsonrecords.decode(raw, key, "registry entry")
        return config

    def list(self, tenant: str, namespace: str) -> list[str]:
        """Names of the functions in a namespace, sorted; ``[]`` for an unknown namespace."""
        return self.store.get_children(self.namespace_path(tenant, namespace))
