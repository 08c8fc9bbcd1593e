"""The admin operations on functions and their state, shared by the REST server and the CLI's
``--data-dir`` mode, so both give the same answers and the same JSON (``statekeep.state.shape``).

Every method raises from the statekeep error tree: :class:`NotFoundError` for an unknown function or
key, :class:`InvalidArgumentError` for malformed input, :class:`ValueTooLargeError`,
:class:`BadVersionError` when an expected version does not match. A refused request writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from statekeep.errors import NotFoundError
from statekeep.functions.config.registry import DEFAULT_ROOT, FunctionRegistry
from statekeep.metadata import MetadataStore, open_store
from statekeep.metadata.base import Closing
from statekeep.state import ProviderPool
from statekeep.state import typed
from statekeep.state.base import StateEntry
from statekeep.state.catalog import function_provider
from statekeep.state.keys import encode_key
from statekeep.state.records import counter_bytes
from statekeep.state.shape import function_state_json, parse_function_state
from statekeep.state.timestate import (check_user_key, is_internal, stored_watermark_of, timers_of, visible_entries,
                                       visible_entry)
from statekeep.validate import check_int

MAX_PAGE = 1000


class FunctionService(Closing):
    def __init__(self, registry: FunctionRegistry) -> None:
        self.registry = registry
        self._owned: list[ProviderPool | MetadataStore] = []  # what open() opened, closed in this order

    @classmethod
    def open(cls, metadata_url: str, *, state_provider: str | None = None,
             state_provider_config: dict[str, Any] | None = None, allow_custom_providers: bool = True,
             functions_root: str = DEFAULT_ROOT, default_storage: Mapping[str, Any] | None = None
             ) -> FunctionService:
        """Open the metadata store at ``metadata_url`` with a registry on it. The default state provider
        (``state_provider`` and its config as configured, completed by
        :func:`~statekeep.state.catalog.function_provider`: ``embedded`` on ``local://``, ``metadata``
        elsewhere, on that same store); ``default_storage``: the ``stateStorage`` functions created without
        one get (see :class:`FunctionRegistry`). ``close()`` releases all."""
        store = open_store(metadata_url)
        try:
            pool = ProviderPool(*function_provider(None, store, (state_provider, state_provider_config)))
            pool.get()  # a bad default provider fails here, not at the first request
        except BaseException:
            store.close()
            raise
        service = cls(FunctionRegistry(store, pool, root=functions_root, allow_custom_providers=allow_custom_providers,
                                       default_storage=default_storage))
        service._owned = [pool, store]
        return service

    def close(self) -> None:
        """Close what :meth:`open` opened (providers first, then the store)."""
        owned, self._owned = self._owned, []
        for resource in owned:
            resource.close()

    def query_state(self, tenant: str, namespace: str, name: str, key: str) -> dict[str, Any]:
        """The FunctionState JSON of ``key``; :class:`NotFoundError` if the function or key is absent."""
        store = self.registry.state_store(tenant, namespace, name)
        entry = visible_entry(store, key)  # an expired key, or one of statekeep's time state, is not there
        if entry is None:
            raise NotFoundError(f"key {key!r} not found in function {tenant}/{namespace}/{name}")
        return function_state_json(entry)

    def put_state(self, tenant: str, namespace: str, name: str, key: str, body: object,
                  expected_version: int | None = None) -> dict[str, Any]:
        """Write a FunctionState body to ``key``; returns the stored FunctionState JSON."""
        return write_state(lambda: self.registry.state_store(tenant, namespace, name), key, body, expected_version)

    def delete_state(self, tenant: str, namespace: str, name: str, key: str,
                     expected_version: int | None = None) -> None:
        store = self.registry.state_store(tenant, namespace, name)
        if is_internal(key) or not store.delete(key, expected_version=expected_version):
            raise NotFoundError(f"key {key!r} not found in function {tenant}/{namespace}/{name}")

    def list_timers(self, tenant: str, namespace: str, name: str) -> dict[str, Any]:
        """A function's registered timers (window ends included) and its watermark: ``{"watermark": ms or
        null, "timers": [{"key", "timestamp", "domain"}...]}``, oldest first; NotFoundError if no function."""
        store = self.registry.state_store(tenant, namespace, name)
        return {"watermark": stored_watermark_of(store), "timers": timers_of(store)}

    def key_variables(self, tenant: str, namespace: str, name: str, key: str) -> dict[str, Any]:
        """A key's typed state variables decoded to JSON (:func:`statekeep.state.typed.read_variables`):
        ``{"key", "variables": {name: value, list or object}}``; NotFoundError if no function, or no variable of the
        key holds anything."""
        store = self.registry.state_store(tenant, namespace, name)
        encode_key(key)
        check_user_key(key)
        variables = typed.key_variables(store, key)
        if not variables:
            raise NotFoundError(f"key {key!r} of {tenant}/{namespace}/{name} has no state variables")
        return {"key": key, "variables": variables}

    def list_state(self, tenant: str, namespace: str, name: str, prefix: str = "",
                   start_after: str | None = None, limit: int = 100) -> dict[str, Any]:
        """One page: ``{"items": [FunctionState...], "nextStartAfter": KEY or null}`` (null on the last page)."""
        check_int(limit, "limit", minimum=1, maximum=MAX_PAGE)
        store = self.registry.state_store(tenant, namespace, name)
        entries = list(visible_entries(store, prefix, start_after or None, limit + 1))
        more = len(entries) > limit
        items = [function_state_json(e) for e in entries[:limit]]
        return {"items": items, "nextStartAfter": items[-1]["key"] if more else None}


def write_state(store: Callable[[], Any], key: str, body: object, expected_version: int | None) -> dict[str, Any]:
    """Write a FunctionState body to ``key`` of the state store ``store()`` gives (asked for once the key and body
    are checked: a bad one changes nothing); returns the stored FunctionState JSON."""
    encode_key(key)
    check_user_key(key)  # statekeep's time state is not the user's to write
    value = parse_function_state(body, key)
    version = value.write(store(), key, expected_version)
    if value.counter is not None:
        return function_state_json(StateEntry(key, counter_bytes(value.counter), "counter", version))
    assert value.data is not None  # parse_function_state sets data when it sets no counter
    return function_state_json(StateEntry(key, value.data, "bytes", version))

