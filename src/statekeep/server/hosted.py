"""Hosted state: function state statekeep keeps for functions that run elsewhere, e.g. Pulsar functions on a
Pulsar functions worker whose PIP-312 ``StateStoreProvider`` is statekeep's (``java/pulsar-state-provider``).

A hosted function is registered by name (``PUT /admin/v3/hosted-state/{tenant}/{namespace}/{name}``, which the
provider's ``getStateStore`` sends) and has no code or configuration here: only its state, kept by this server's
default state provider, under the same name a statekeep function of that name would have. Once registered, the
function's state answers on the same routes as a statekeep function's (``GET|POST|DELETE FN/state/{key}``,
``GET FN/state``, ``POST FN/counter/{key}``), so statekeep's REST API, CLI (``--url``) and console show what
Pulsar's ``GET /admin/v3/functions/T/N/F/state/KEY`` shows. ``DELETE /admin/v3/hosted-state/...`` (the
provider's ``cleanUp``, called when Pulsar deletes the function) deletes all of its state, then the
registration.

Registrations are kept in the metadata store under :data:`ROOT` (``ROOT/TENANT/NAMESPACE/NAME``, a small JSON
record). A name registered as a statekeep function cannot be registered as hosted (:class:`AlreadyExistsError`):
the two would share one state.

Counters follow Pulsar's form on hosted functions: Pulsar writes a counter through its REST API as 8 bytes,
big-endian (a ``numberValue`` POST becomes ``put(key, 8 bytes)`` in its worker), and counts on from them, so an
increment of a hosted function's key holding 8 bytes treats them as that counter (statekeep's own functions keep
counters and bytes apart: there, incrementing bytes is an :class:`InvalidArgumentError`).
"""

from __future__ import annotations

import json
from typing import Any

from statekeep.errors import AlreadyExistsError, BadVersionError, InvalidArgumentError, NotFoundError
from statekeep.functions.config.service import FunctionService, write_state
from statekeep.metadata import MetadataStore
from statekeep.retry import DEFAULT as RETRY
from statekeep.state import StateStore
from statekeep.state.catalog import FunctionCatalog
from statekeep.state.keys import encode_key
from statekeep.state.records import decode_counter
from statekeep.state.shape import function_state_json
from statekeep.state.timestate import check_user_key, is_internal, visible_entries, visible_entry
from statekeep.validate import check_int

#: where hosted functions are registered in the metadata store
ROOT = "/statekeep/hosted-state"
#: the most keys one page of :meth:`HostedState.list_state` gives
MAX_PAGE = 1000


class HostedState:
    """Registration and state of hosted functions, over ``service``'s registry and default state provider.
    Thread-safe. Every method raises from statekeep's error tree; a refused request writes nothing."""

    def __init__(self, store: MetadataStore, service: FunctionService) -> None:
        self.store = store
        self.service = service
        self.catalog = FunctionCatalog(store, ROOT)

    # ---- registration ------------------------------------------------------------------------

    def register(self, tenant: str, namespace: str, name: str) -> bool:
        """Register a hosted function (idempotent): True if it was registered now, False if it already was.
        :class:`AlreadyExistsError` if a statekeep function has that name; :class:`InvalidArgumentError` for an
        invalid name."""
        path = self.catalog.path(tenant, namespace, name)
        if self.service.registry.catalog.exists(tenant, namespace, name):
            raise AlreadyExistsError(f"{tenant}/{namespace}/{name} is a statekeep function: a function hosted "
                                     "elsewhere under the same name would share its state; choose another name")
        record = json.dumps({"tenant": tenant, "namespace": namespace, "name": name}).encode()
        try:
            self.store.put(path, record, -1)
            return True
        except BadVersionError:  # -1 on an existing key: registered before
            return False

    def exists(self, tenant: str, namespace: str, name: str) -> bool:
        try:
            return self.catalog.exists(tenant, namespace, name)
        except InvalidArgumentError:
            return False

    def list(self, tenant: str, namespace: str) -> list[str]:
        """Names of the hosted functions of a namespace, sorted."""
        return self.catalog.list(tenant, namespace)

    def cleanup(self, tenant: str, namespace: str, name: str) -> None:
        """Delete a hosted function's state, then its registration (PIP-312's ``cleanUp``).
        :class:`NotFoundError` if it is not registered (nothing is deleted)."""
        self.catalog.require(tenant, namespace, name)
        self.service.registry.providers.get().cleanup(tenant, namespace, name)
        try:
            self.store.delete(self.catalog.path(tenant, namespace, name))
        except NotFoundError:
            pass  # a concurrent cleanup

    def _hosted_store(self, tenant: str, namespace: str, name: str) -> StateStore:
        if not self.exists(tenant, namespace, name):
            raise NotFoundError(f"function {tenant}/{namespace}/{name} does not exist")
        return self.service.registry.providers.get().get_state_store(tenant, namespace, name)

    def state_store(self, tenant: str, namespace: str, name: str) -> tuple[StateStore, bool]:
        """The state of a statekeep function or, failing that, of a hosted one, and whether it is hosted;
        :class:`NotFoundError` if it is neither."""
        try:
            return self.service.registry.state_store(tenant, namespace, name), False
        except NotFoundError:
            return self._hosted_store(tenant, namespace, name), True

    # ---- state: a statekeep function's through its service, else a hosted one's ---------------------

    def query_state(self, tenant: str, namespace: str, name: str, key: str) -> dict[str, Any]:
        """:meth:`FunctionService.query_state` of a statekeep function, else of a hosted one."""
        try:
            return self.service.query_state(tenant, namespace, name, key)
        except NotFoundError:
            if not self.exists(tenant, namespace, name):
                raise
        entry = visible_entry(self._hosted_store(tenant, namespace, name), key)
        if entry is None:
            raise NotFoundError(f"key {key!r} not found in function {tenant}/{namespace}/{name}")
        return function_state_json(entry)

    def put_state(self, tenant: str, namespace: str, name: str, key: str, body: object,
                  expected_version: int | None = None) -> dict[str, Any]:
        """:meth:`FunctionService.put_state` of a statekeep function, else of a hosted one."""
        try:
            return self.service.put_state(tenant, namespace, name, key, body, expected_version)
        except NotFoundError:
            if not self.exists(tenant, namespace, name):
                raise
        return write_state(lambda: self._hosted_store(tenant, namespace, name), key, body, expected_version)

    def delete_state(self, tenant: str, namespace: str, name: str, key: str,
                     expected_version: int | None = None) -> None:
        """:meth:`FunctionService.delete_state` of a statekeep function, else of a hosted one."""
        try:
            return self.service.delete_state(tenant, namespace, name, key, expected_version)
        except NotFoundError:
            if not self.exists(tenant, namespace, name):
                raise
        store = self._hosted_store(tenant, namespace, name)
        if is_internal(key) or not store.delete(key, expected_version=expected_version):
            raise NotFoundError(f"key {key!r} not found in function {tenant}/{namespace}/{name}")

    def list_state(self, tenant: str, namespace: str, name: str, prefix: str = "",
                   start_after: str | None = None, limit: int = 100) -> dict[str, Any]:
        """:meth:`FunctionService.list_state` of a statekeep function, else of a hosted one."""
        try:
            return self.service.list_state(tenant, namespace, name, prefix, start_after, limit)
        except NotFoundError:
            if not self.exists(tenant, namespace, name):
                raise
        check_int(limit, "limit", minimum=1, maximum=MAX_PAGE)
        store = self._hosted_store(tenant, namespace, name)
        entries = list(visible_entries(store, prefix, start_after or None, limit + 1))
        items = [function_state_json(e) for e in entries[:limit]]
        return {"items": items, "nextStartAfter": items[-1]["key"] if len(entries) > limit else None}

    def increment(self, tenant: str, namespace: str, name: str, key: str, amount: int) -> dict[str, Any]:
        """Add ``amount`` to the counter ``key`` atomically (an absent key counts from 0) and answer
        ``{"key", "numberValue"}`` with its new value. :class:`InvalidArgumentError` if the key holds bytes (on a
        hosted function: bytes that are not 8 long, see the module's docstring), :class:`CounterOverflowError`
        past a signed 64-bit integer, :class:`NotFoundError` if there is no such function."""
        check_int(amount, "amount", minimum=-(2**63), maximum=2**63 - 1)
        encode_key(key)
        check_user_key(key)
        store, hosted = self.state_store(tenant, namespace, name)
        try:
            return {"key": key, "numberValue": store.incr(key, amount)}
        except InvalidArgumentError:
            if not hosted:
                raise
        for _ in RETRY.bounded(attempts=20).attempts():  # Pulsar's 8-byte form: count on from it
            entry = store.get_entry(key)
            if entry is None or entry.kind == "counter":
                return {"key": key, "numberValue": store.incr(key, amount)}
            if len(entry.value) != 8:
                raise InvalidArgumentError(f"state key {key!r} holds {len(entry.value)} bytes, not a counter "
                                           "(8 bytes big-endian)")
            value = decode_counter(entry.value) + amount
            check_int(value, "the counter's new value", minimum=-(2**63), maximum=2**63 - 1)
            try:
                store.set_counter(key, value, expected_version=entry.version)
                return {"key": key, "numberValue": value}
            except BadVersionError:
                continue  # changed meanwhile: read it again
        raise BadVersionError(f"state key {key!r} of {tenant}/{namespace}/{name} kept changing during the increment")

