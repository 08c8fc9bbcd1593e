"""The typed state variables' schemas recorded with their function (:mod:`statekeep.state.typed`).

They are one JSON object, ``{variable: schema}``, at the child ``state-schemas`` of the function's registry entry
(``ROOT/TENANT/NAMESPACE/NAME``, :class:`statekeep.state.catalog.FunctionCatalog`), so they go with the function
when it is deleted, and a new incarnation starts with none. A run reads them when its function first opens a
variable and checks each variable it opens against them (:func:`statekeep.state.typed.check_evolution`); what it
opened is recorded (:func:`record_schemas`) before its state changes commit, so a value is never stored under a
schema that is not recorded. An evolved schema replaces the old one, as its values now read under it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from statekeep.errors import BadVersionError, NotFoundError
from statekeep.metadata import Check, MetadataStore, Put, open_store
from statekeep.retry import DEFAULT
from statekeep.state.catalog import FunctionCatalog
from statekeep.state.typed import check_evolution

SCHEMAS = "state-schemas"


def schemas_path(store: MetadataStore, tenant: str, namespace: str, name: str) -> str:
    return FunctionCatalog(store).path(tenant, namespace, name) + "/" + SCHEMAS


def read_schemas(store: MetadataStore, tenant: str, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    """The function's recorded schemas (``{}``: none yet)."""
    result = store.get(schemas_path(store, tenant, namespace, name))
    return {} if result is None else dict(json.loads(result.value))


def record_schemas(store: MetadataStore, tenant: str, namespace: str, name: str,
                   opened: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Record the schemas a run ``opened`` beside those recorded (a compare-and-set, retried on a lost race);
    returns the schemas now recorded. :class:`~statekeep.state.typed.StateSchemaError` naming the variable and
    field if one cannot evolve from its recorded schema, :class:`NotFoundError` if the function does not exist
    (nothing is written)."""
    catalog = FunctionCatalog(store)
    function = catalog.path(tenant, namespace, name)
    path = function + "/" + SCHEMAS
    for _ in DEFAULT.bounded(attempts=50).attempts():
        version = catalog.require(tenant, namespace, name).stat.version  # NotFoundError: deleted meanwhile
        result = store.get(path)
        recorded = {} if result is None else dict(json.loads(result.value))
        for variable, schema in opened.items():
            if variable in recorded:
                check_evolution(variable, recorded[variable], schema)
        merged = {**recorded, **opened}
        if merged == recorded:
            return recorded
        try:  # only while the function is the one read: a deleted function leaves no schemas behind
            store.multi([Check(function, version), Put(path, json.dumps(merged, sort_keys=True).encode(),
                                                       -1 if result is None else result.stat.version)])
            return merged
        except (BadVersionError, NotFoundError):
            continue
    raise BadVersionError(f"the state schemas of {tenant}/{namespace}/{name} kept changing; try again")


_stores: dict[str, MetadataStore] = {}
_lock = threading.Lock()


def registry_store(url: str) -> MetadataStore:
    """One open store per registry URL in this process (an executor's tasks share it)."""
    with _lock:
        if url not in _stores:
            _stores[url] = open_store(url)
        return _stores[url]
