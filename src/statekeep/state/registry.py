"""State providers by name: a built-in map, :func:`register_provider`, and the entry-point group
``statekeep.state_providers`` (name -> a :class:`StateStoreProvider` subclass), so a third party can
add one without touching statekeep; and the process's cache of open providers' stores (:func:`cached_store`,
:func:`close_cached_state_stores`), which every executor and driver of a function opens its state through.

    provider = open_provider("metadata", {"metadata_url": "local:///var/lib/statekeep"})
"""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.base import StateStore, StateStoreProvider

ENTRY_POINT_GROUP = "statekeep.state_providers"
BUILTIN_PROVIDERS: dict[str, str] = {
    "metadata": "statekeep.state.metadata.provider:MetadataStateStoreProvider",
    "embedded": "statekeep.state.embedded.provider:EmbeddedStateProvider",
    "partitioned": "statekeep.state.partitioned.provider:PartitionedStateProvider",
}
_registered: dict[str, type[StateStoreProvider]] = {}


def register_provider(name: str, cls: type[StateStoreProvider]) -> None:
    """Make ``cls`` available as ``name`` in this process (overrides an entry point of that name)."""
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError("a provider name must be a non-empty str")
    if not (isinstance(cls, type) and issubclass(cls, StateStoreProvider)):
        raise InvalidArgumentError(f"{cls!r} is not a StateStoreProvider subclass")
    _registered[name] = cls


def provider_names() -> list[str]:
    return sorted(set(BUILTIN_PROVIDERS) | set(_registered) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def _provider_class(found: object, where: str) -> type[StateStoreProvider]:
    if not (isinstance(found, type) and issubclass(found, StateStoreProvider)):
        raise InvalidArgumentError(f"{where} is not a StateStoreProvider subclass: {found!r}")
    return found


def provider_class(name: str) -> type[StateStoreProvider]:
    """The class registered as ``name``; :class:`InvalidArgumentError` (listing the known names) if none."""
    if name in _registered:
        return _registered[name]
    if name in BUILTIN_PROVIDERS:
        module, _, attr = BUILTIN_PROVIDERS[name].partition(":")
        return _provider_class(getattr(importlib.import_module(module), attr), BUILTIN_PROVIDERS[name])
    if isinstance(name, str):
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == name:
                return _provider_class(ep.load(), f"entry point {ep.value}")
    raise InvalidArgumentError(f"unknown state provider {name!r}; known: {', '.join(provider_names())}")


def open_provider(name: str, config: Mapping[str, Any] | None = None) -> StateStoreProvider:
    """Instantiate the provider ``name`` and call its ``init(config)``; close it when done."""
    provider = provider_class(name)()
    try:
        provider.init(dict(config or {}))
    except BaseException:
        provider.close()
        raise
    return provider


class ProviderPool:
    """Opened providers shared by configuration: the server and registry open each (name, config)
    once. ``default`` is used when a function names no provider. Thread-safe."""

    def __init__(self, default_name: str = "metadata", default_config: Mapping[str, Any] | None = None) -> None:
        self.default_name = default_name
        self.default_config = dict(default_config or {})
        self._lock = threading.Lock()
        self._open: dict[str, StateStoreProvider] = {}
        self._default: StateStoreProvider | None = None

    @property
    def default(self) -> tuple[str, dict[str, Any]]:
        """``(name, config)`` of the provider of functions that name none."""
        return self.default_name, self.default_config

    def get(self, name: str | None = None, config: Mapping[str, Any] | None = None) -> StateStoreProvider:
        if name is None:
            if self._default is None:  # opened once; every request of a default function comes here
                self._default = self.get(self.default_name, self.default_config)
            return self._default
        key = name + "\0" + json.dumps(dict(config or {}), sort_keys=True, default=id)
        with self._lock:
            provider = self._open.get(key)
            if provider is None:
                provider = self._open[key] = open_provider(name, config)
            return provider

    def close(self) -> None:
        with self._lock:
            providers, self._open, self._default = list(self._open.values()), {}, None
        for provider in providers:
            provider.close()


_cache_lock = threading.Lock()
_stores: dict[str, StateStore] = {}
_providers: list[StateStoreProvider] = []  # the providers behind _stores, for close_cached_state_stores


def cached_store(name: str, config: Mapping[str, Any], tenant: str, namespace: str, function: str) -> StateStore:
    """The state store of ``tenant/namespace/function`` from the provider ``name`` opened with ``config``: one
    provider per process and configuration (opening a store costs a session), kept until
    :func:`close_cached_state_stores`."""
    from statekeep.state import open_provider

    key = json.dumps([name, config, tenant, namespace, function], sort_keys=True)
    with _cache_lock:
        if key not in _stores:
            provider = open_provider(name, dict(config))
            _providers.append(provider)
            _stores[key] = provider.get_state_store(tenant, namespace, function)
        return _stores[key]


def close_cached_state_stores() -> None:
    """Close every provider :func:`cached_store` opened in this process and forget them: an executor
    keeps them for its life, a process running function after function (tests, benchmarks) would collect
    their sessions and threads."""
    with _cache_lock:
        providers, _providers[:] = list(_providers), []
        _stores.clear()
    for provider in providers:
        provider.close()
