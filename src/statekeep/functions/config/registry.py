"""The function registry: each function's configuration and code in the metadata store.

Layout: ``ROOT/TENANT/NAMESPACE/NAME`` (default root ``/statekeep/functions``) holds the configuration
as JSON (:class:`FunctionConfig`), its child ``code`` the Python file, its child ``incarnation`` an id
new with every create, its child ``sources`` the inputs its query has read
(:meth:`FunctionRegistry.record_sources`), which it keeps for the life of the incarnation. Reading an entry
and its layout are :class:`statekeep.state.catalog.FunctionCatalog` (``registry.catalog``), shared with the
layers below this one (followers find functions through it).
All are written and deleted in one ``multi``, so a function is never seen without its code.
The function's state lives with its state provider (PIP-312), reached through
:meth:`FunctionRegistry.state_store`.

Guarantees: ``create`` refuses an existing function (:class:`AlreadyExistsError`) and invalid
configuration or code (:class:`InvalidArgumentError`, nothing written); ``delete`` removes the
function and, through ``provider.cleanup``, all its state, so a function created again under the
same name starts empty. Writers of a function's state (its running instances) must be stopped before
it is deleted: a write racing the delete may survive it.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statekeep.errors import AlreadyExistsError, BadVersionError, InvalidArgumentError, NotFoundError, StatekeepError
from statekeep.functions.config.loader import check_named_classes, validate_function_source
from statekeep.functions.config.model import FunctionConfig
from statekeep.functions.config.schemacheck import check_code_update
from statekeep.lru import BoundedLRU
from statekeep.metadata import Delete, MetadataStore, Op, Put
from statekeep.retry import DEFAULT as RETRY
from statekeep.state import ProviderPool, StateStore, StateStoreProvider
from statekeep.state.catalog import DEFAULT_ROOT, FunctionCatalog, function_provider

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_ROOT", "FunctionRegistry"]
IDENTITY = ("tenant", "namespace", "name")


class FunctionRegistry:
    """Create, update, get, list and delete functions. Thread-safe.

    ``providers`` opens the state provider a function names (or the default); when
    ``allow_custom_providers`` is False, a configuration naming its own provider is refused
    (a REST caller must not make the server open arbitrary stores), except ``default_storage``, which
    functions created without a ``stateStorage`` get.
    """

    def __init__(self, store: MetadataStore, providers: ProviderPool, *, root: str = DEFAULT_ROOT,
                 allow_custom_providers: bool = True, default_storage: Mapping[str, Any] | None = None) -> None:
        self.store = store
        #: the ``stateStorage`` of functions created without one (``standalone --state-dir``)
        self.default_storage = dict(default_storage) if default_storage is not None else None
        self.providers = providers
        self.catalog = FunctionCatalog(store, root)
        self.root = self.catalog.root
        self.allow_custom_providers = allow_custom_providers
        # (tenant, namespace, name, stored config JSON) -> state store handle: the same stored config
        # always means the same provider, so a request for state costs one read of the config
        self._handles: BoundedLRU[tuple[str, str, str, bytes], StateStore] = BoundedLRU(10_000)

    def _path(self, tenant: str, namespace: str, name: str) -> str:
        return self.catalog.path(tenant, namespace, name)

    # ---- reads -------------------------------------------------------------------------------

    def get(self, tenant: str, namespace: str, name: str) -> FunctionConfig:
        """The function's configuration; :class:`NotFoundError` if there is no such function."""
        return self._read(tenant, namespace, name)[0]

    def _read(self, tenant: str, namespace: str, name: str) -> tuple[FunctionConfig, int]:
        result = self.catalog.require(tenant, namespace, name)
        config = self.catalog.decode(result.value, f"{tenant}/{namespace}/{name}")
        return FunctionConfig.from_json(config, stored=True), result.stat.version

    def incarnation(self, tenant: str, namespace: str, name: str) -> str:
        """An id of this creation of the function: one deleted and created again under the same name
        gets a new one, so its checkpoints and running queries do not carry over (versions restart at
        0, and etcd keeps no creation times). :class:`NotFoundError` if the function does not exist."""
        path = self._path(tenant, namespace, name)
        result = self.store.get(path + "/incarnation")
        if result is not None:
            return result.value.decode()
        # registered before incarnations were recorded
        return f"created-{self.catalog.require(tenant, namespace, name).stat.created_ms}"

    def get_code(self, tenant: str, namespace: str, name: str) -> bytes:
        result = self.store.get(self._path(tenant, namespace, name) + "/code")
        if result is None:
            raise NotFoundError(f"function {tenant}/{namespace}/{name} does not exist")
        return result.value

    def list(self, tenant: str, namespace: str) -> list[str]:
        """Names of the functions in a namespace, sorted; ``[]`` for an unknown namespace."""
        return self.catalog.list(tenant, namespace)

    # ---- writes ------------------------------------------------------------------------------

    def create(self, config: Mapping[str, Any] | FunctionConfig, code: bytes | None = None) -> FunctionConfig:
        """Register a function. ``code`` is the Python file; if None, ``config["py"]`` is read as a
        local file path. Raises :class:`AlreadyExistsError`, :class:`InvalidArgumentError`."""
        cfg = config if isinstance(config, FunctionConfig) else FunctionConfig.from_json(config)
        if cfg.stateStorage is None and self.default_storage is not None:
            cfg = FunctionConfig.from_json({**cfg.to_json(), "stateStorage": self.default_storage})
        if code is None:
            code = self._read_py(cfg.py)
        validate_function_source(code, _filename(cfg), cfg.className)
        check_named_classes(code, _filename(cfg), _named_classes(cfg))
        self._check_provider(cfg)
        path = self._path(cfg.tenant, cfg.namespace, cfg.name)
        try:
            self.store.multi([Put(path, _encode(cfg), -1), Put(path + "/code", bytes(code), -1),
                              Put(path + "/incarnation", uuid.uuid4().hex.encode(), -1)])
        except AlreadyExistsError:
            raise AlreadyExistsError(f"function {cfg.fqfn} already exists") from None
        return cfg

    def update(self, tenant: str, namespace: str, name: str, changes: Mapping[str, Any] | None = None,
               code: bytes | None = None, *, runner_inputs: bool = True) -> FunctionConfig:
        """Merge ``changes`` (fields present and not None replace the stored ones, as pulsar-admin's
        update does) and replace the code if given. Identity fields must match; the state provider
        cannot change (its state would be orphaned). New code is checked against the state schemas its
        runs recorded (:mod:`statekeep.functions.config.schemacheck`): a variable it opens that cannot
        evolve is a :class:`~statekeep.state.typed.StateSchemaError` naming the variable and field, and
        nothing is written. Its inputs (and input format) cannot change once its query read them
        (:meth:`record_sources`): :class:`InvalidArgumentError` in one line saying what to do instead; not for
        ``runner_inputs=False``, the DataFrame operator's update, whose inputs are its own query's (with its own
        checkpoint), not a checkpoint of statekeep's.
        :class:`NotFoundError` if absent."""
        changes = dict(changes or {})
        for what, value in zip(IDENTITY, (tenant, namespace, name)):
            if changes.get(what) not in (None, value):
                raise InvalidArgumentError(
                    f"{what} in the config ({changes[what]!r}) differs from the path ({value!r})")
        path = self._path(tenant, namespace, name)
        for _ in RETRY.bounded(attempts=20).attempts():
            current, version = self._read(tenant, namespace, name)
            merged = {**current.to_json(), **{k: v for k, v in changes.items() if v is not None}}
            cfg = FunctionConfig.from_json(merged)
            if cfg.stateStorage != current.stateStorage:
                raise InvalidArgumentError("the state provider of an existing function cannot be changed; "
                                           "delete and create it again")
            if runner_inputs and _sources(cfg) != _sources(current):
                self._check_sources(cfg)
            ops: list[Op] = [Put(path, _encode(cfg), version)]
            if code is None and cfg.className != current.className:  # the stored code must have the new entry
                validate_function_source(self.get_code(tenant, namespace, name), _filename(cfg), cfg.className)
            if code is not None:
                validate_function_source(code, _filename(cfg), cfg.className)
                # its state schemas as far as the code shows them; a run recording others meanwhile fails the multi
                ops += [check_code_update(self.store, tenant, namespace, name, code, _filename(cfg)),
                        Put(path + "/code", bytes(code))]
            if _named_classes(cfg) != _named_classes(current) or code is not None:  # the classes it names exist
                check_named_classes(code if code is not None else self.get_code(tenant, namespace, name),
                                    _filename(cfg), _named_classes(cfg))
            try:
                self.store.multi(ops)
                return cfg
            except BadVersionError:
                continue  # a concurrent update: merge again on top of it
        raise BadVersionError(f"function {tenant}/{namespace}/{name} kept changing during the update")

    def record_sources(self, cfg: FunctionConfig) -> None:
        """Record that the function's query (of this incarnation) read its inputs: its Spark checkpoint resumes only
        with the sources it started with (their offsets are kept by position and mean nothing for others), so
        :meth:`update` refuses other inputs from now on, before anything runs. Idempotent."""
        path = self._path(cfg.tenant, cfg.namespace, cfg.name) + "/sources"
        found = self.store.get(path)
        if found is None or json.loads(found.value) != _sources(cfg):
            try:
                self.store.put(path, json.dumps(_sources(cfg)).encode(), found.stat.version if found else -1)
            except BadVersionError:
                pass  # recorded meanwhile (by the same run, or a run of the same inputs)

    def _check_sources(self, cfg: FunctionConfig) -> None:
        """Nothing if ``cfg``'s inputs are those its query read (or it read none); else the refusal."""
        found = self.store.get(self._path(cfg.tenant, cfg.namespace, cfg.name) + "/sources")
        if found is None:
            return
        read = json.loads(found.value)
        old, new = ",".join(read["inputs"]), ",".join(cfg.inputs)
        if read["inputs"] == list(cfg.inputs):
            old, new = f"{old} as {read['inputFormat'] or 'guessed'}", f"as {cfg.inputFormat or 'guessed'}"
        raise InvalidArgumentError(
            f"function {cfg.fqfn} has read {old}, and its Spark checkpoint resumes only with the sources it started "
            f"with, so it cannot read {new} instead: delete and create it to read {new} from the start (its state is "
            "deleted with it), or create another function for them")

    def delete(self, tenant: str, namespace: str, name: str) -> None:
        """Delete the function, its code and all its state. :class:`NotFoundError` if absent."""
        cfg = self.get(tenant, namespace, name)
        provider = self.provider_for(cfg)
        provider.cleanup(tenant, namespace, name)  # first: if this fails, the function is still listed
        path = self._path(tenant, namespace, name)
        try:
            children = [Delete(f"{path}/{child}") for child in self.store.get_children(path)]
            self.store.multi([*children, Delete(path)])
        except NotFoundError:
            raise NotFoundError(f"function {cfg.fqfn} does not exist") from None
        try:  # again: state written between the first cleanup and the delete
            provider.cleanup(tenant, namespace, name)
        except StatekeepError:
            log.warning("second state cleanup of deleted function %s failed", cfg.fqfn, exc_info=True)

    # ---- state -------------------------------------------------------------------------------

    def state_provider(self, cfg: FunctionConfig, store_url: str | None = None) -> tuple[str, dict[str, Any]]:
        """``(name, config)`` of the provider keeping ``cfg``'s state, by
        :func:`~statekeep.state.catalog.function_provider` with this registry's default; ``store_url``: the
        registry's store by URL, for another process."""
        return function_provider(cfg.stateStorage, self.store if store_url is None else store_url,
                                 self.providers.default)

    def provider_for(self, cfg: FunctionConfig) -> StateStoreProvider:
        return self.providers.get(*self.state_provider(cfg))

    def state_store(self, tenant: str, namespace: str, name: str) -> StateStore:
        """The state of an existing function; :class:`NotFoundError` if the function does not exist."""
        result = self.catalog.require(tenant, namespace, name)
        handle = self._handles.get((tenant, namespace, name, result.value))
        if handle is None:
            cfg = FunctionConfig.from_json(self.catalog.decode(result.value, f"{tenant}/{namespace}/{name}"),
                                           stored=True)
            handle = self.provider_for(cfg).get_state_store(tenant, namespace, name)
            self._handles.put((tenant, namespace, name, result.value), handle)
        return handle

    def _check_provider(self, cfg: FunctionConfig) -> None:
        if cfg.stateStorage is not None:
            if not self.allow_custom_providers and cfg.stateStorage != self.default_storage:
                raise InvalidArgumentError("this server keeps all function state in its own provider: "
                                           "remove stateStorage from the function config")
            self.provider_for(cfg)  # opens it now: a bad provider fails the create, not later

    @staticmethod
    def _read_py(py: str | None) -> bytes:
        if not py:
            raise InvalidArgumentError("a function needs its Python file (--py FILE)")
        try:
            return Path(py).read_bytes()
        except OSError as e:
            raise InvalidArgumentError(f"cannot read the function file {py!r}: {e.strerror}") from e


def _named_classes(cfg: FunctionConfig) -> dict[str, str]:
    """The serde and record classes the config names: where it names them -> ``module.Class``."""
    named = {f"customSerdeInputs[{k}]": v for k, v in (cfg.customSerdeInputs or {}).items()}
    named.update({f"inputSpecs[{k}].serdeClassName": v.serdeClassName
                  for k, v in (cfg.inputSpecs or {}).items() if v.serdeClassName})
    named.update({f"customSchemaInputs[{k}]": v for k, v in (cfg.customSchemaInputs or {}).items()})
    if cfg.outputSerdeClassName:
        named["outputSerdeClassName"] = cfg.outputSerdeClassName
    return named


def _filename(cfg: FunctionConfig) -> str:
    return Path(cfg.py).name if cfg.py else f"{cfg.name}.py"


def _encode(cfg: FunctionConfig) -> bytes:
    return json.dumps(cfg.to_json(), sort_keys=True, separators=(",", ":")).encode()


def _sources(cfg: FunctionConfig) -> dict[str, Any]:
    """What a function's query reads, as :meth:`FunctionRegistry.record_sources` records it."""
    return {"inputs": list(cfg.inputs), "inputFormat": cfg.inputFormat}
