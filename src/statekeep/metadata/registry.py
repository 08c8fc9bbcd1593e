"""Choosing a backend by URL scheme: a built-in map plus the ``statekeep.metadata_stores``
entry-point group. Backends import lazily, so a missing optional dependency only matters when its
scheme is used, and then the error names the package to install."""

from __future__ import annotations

import contextlib
import importlib
import os
from importlib.metadata import entry_points
from urllib.parse import parse_qsl

from statekeep.errors import InvalidArgumentError, MissingDependencyError
from statekeep.metadata.base import MetadataStore

# scheme -> ("module:Class", the pip extra that provides its dependencies)
BUILTIN_BACKENDS: dict[str, tuple[str, str | None]] = {
    "memory": ("statekeep.metadata.memory:MemoryStore", None),
    "local": ("statekeep.metadata.local:LocalStore", None),
    "zk": ("statekeep.metadata.zookeeper:ZooKeeperStore", "statekeep[zookeeper] (kazoo)"),
    "etcd": ("statekeep.metadata.etcd:EtcdStore", "statekeep[etcd] (aetcd)"),
    "k8s": ("statekeep.metadata.kubernetes:KubernetesStore", "statekeep[kubernetes] (kubernetes)"),
}

ENTRY_POINT_GROUP = "statekeep.metadata_stores"
#: the store the command line and the Spark data sources use when none is named
DEFAULT_STORE = "local://./.statekeep-data"


def default_store_url() -> str:
    """``$STATEKEEP_STORE``, else a ``local://`` store in ``./.statekeep-data``."""
    return os.environ.get("STATEKEEP_STORE", DEFAULT_STORE)


def _parse_option(value: str) -> object:
    for convert in (int, float):
        with contextlib.suppress(ValueError):
            return convert(value)
    return {"true": True, "false": False}.get(value.lower(), value)


def backend_class(scheme: str) -> type[MetadataStore]:
    """The store class registered for ``scheme``. Raises :class:`InvalidArgumentError` for an
    unknown scheme and :class:`MissingDependencyError` naming the package to install."""
    target, extra = BUILTIN_BACKENDS.get(scheme, (None, None))
    if target is None:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name == scheme:
                return _store_class(ep.load(), f"entry point {ep.value}")
        known = sorted(set(BUILTIN_BACKENDS) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})
        raise InvalidArgumentError(f"unknown metadata store scheme {scheme!r}; known: {', '.join(known)}")
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if isinstance(e, MissingDependencyError) or extra is None or (e.name or "").startswith("statekeep"):
            raise
        raise MissingDependencyError(
            f"the {scheme}:// backend needs {extra}: pip install '{extra.split()[0]}' ({e})"
        ) from e
    return _store_class(getattr(module, class_name), target)


def _store_class(found: object, where: str) -> type[MetadataStore]:
    if not (isinstance(found, type) and issubclass(found, MetadataStore)):
        raise InvalidArgumentError(f"{where} is not a MetadataStore subclass: {found!r}")
    return found


def open_store(url: str, **options: object) -> MetadataStore:
    """Open a metadata store from a URL such as ``local:///var/lib/statekeep``, ``memory://``,
    ``zk://127.0.0.1:2181/chroot`` or ``etcd://127.0.0.1:2379/prefix``.

    Query parameters (``?max_value_size=65536``) and keyword arguments become backend options;
    keywords win. Raises :class:`InvalidArgumentError` on a malformed URL or unknown scheme.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgumentError(f"a metadata store URL looks like scheme://..., got {url!r}")
    scheme, _, rest = url.partition("://")
    rest, _, query = rest.partition("?")
    merged = {k: _parse_option(v) for k, v in parse_qsl(query, keep_blank_values=True)}
    merged.update(options)
    return backend_class(scheme).from_url(rest, merged)
