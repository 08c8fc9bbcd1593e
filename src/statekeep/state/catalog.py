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
    catalog.state_provider("public", "default", "wc")     # (provider name, config): function_provider's rule
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statekeep import jsonrecords
from statekeep.errors import InvalidArgumentError, NotFoundError
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.embedded import has_embedded_engine
from statekeep.metadata.types import GetResult, validate_path
from statekeep.state.keys import validate_name
from statekeep.lru import cached

DEFAULT_ROOT = "/statekeep/functions"


@cached(10_000)  # on every REST call; only validated names get cached
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


#: the default of a function's state provider, as a server is configured: ``(name, config)``, either None
#: for the rule's own choice (see :func:`function_provider`)
Default = tuple[str | None, Mapping[str, Any] | None]


def function_provider(storage: object, store: MetadataStore | str,
                      default: Default | None = None) -> tuple[str, dict[str, Any]]:
    """THE rule of which provider, with which config, keeps a function's state; every caller asks here.

    - A function naming its ``stateStorage`` gets that provider and config; a config naming no
      coordination store (``store`` or ``metadata_url``) gets ``store``, the registry's: the open store,
      or its URL for another process (nothing is opened).
    - One naming none gets ``default`` (the server's configured provider and config, either None for
      the rule's own), else the provider on ``store`` itself: ``embedded`` (the fast one) where the store
      has an embedded engine (:func:`has_embedded_engine`: ``local://``), ``metadata`` elsewhere, with
      ``store`` as its config (a configured provider of another name gets an empty one). Given a URL, a
      default config naming the open store names it by that URL instead (an open store cannot travel).

    ``storage`` is the ``stateStorage`` value of a function's configuration (None: absent).
    :class:`InvalidArgumentError` for a malformed ``stateStorage``."""
    parsed = parse_state_storage(storage)
    if parsed is not None:
        name, config = parsed
        if "store" not in config and "metadata_url" not in config:
            config.update(_on(store))
        return name, config
    configured, wanted = default if default is not None else (None, None)
    name = configured or ("embedded" if has_embedded_engine(store) else "metadata")
    if wanted is None:
        return name, _on(store) if name in ("metadata", "embedded") else {}
    config = dict(wanted)
    if isinstance(store, str) and "store" in config:
        del config["store"]
        config["metadata_url"] = store
    return name, config


def _on(store: MetadataStore | str) -> dict[str, Any]:
    return {"metadata_url": store} if isinstance(store, str) else {"store": store}


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

    def state_provider(self, tenant: str, namespace: str, name: str) -> tuple[str, dict[str, Any]]:
        """:func:`function_provider` of a function as registered here (the default while it is not).
        :class:`CorruptRecordError` or :class:`InvalidArgumentError` for an entry that is not a configuration."""
        entry = self.get(tenant, namespace, name)
        config = {} if entry is None else self.decode(entry.value, self.path(tenant, namespace, name))
        return function_provider(config.get("stateStorage"), self.store)

    def list(self, tenant: str, namespace: str) -> list[str]:
        """Names of the functions in a namespace, sorted; ``[]`` for an unknown namespace."""
        return self.store.get_children(self.namespace_path(tenant, namespace))
