"""Configuration of the REST server (``create_app``) and ``statekeep standalone``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from statekeep.errors import InvalidArgumentError


@dataclass
class ServerConfig:
    """``metadata_url``: where functions (and, by default, their state) live. ``state_provider`` /
    ``state_provider_config``: the default state provider (None: ``embedded`` on a ``local://``
    store, ``metadata`` on others, on the server's own store when the config is None).
    ``tokens`` (token -> grant) or ``tokens_file`` (JSON) turn auth on.
    ``allow_custom_state_providers``: let a function's config name its own provider (off: a REST
    caller could otherwise make the server open any store). ``worker``: runs functions (see
    :mod:`statekeep.server.worker`). ``max_request_bytes``: larger bodies get 413. ``followers``:
    read-only followers to serve (see :mod:`statekeep.server.followers`). ``state_dir``: functions
    created without a ``stateStorage`` keep partition-owned state there (:mod:`statekeep.state.partitioned`)."""

    metadata_url: str = "memory://"
    state_provider: str | None = None
    state_provider_config: dict[str, Any] | None = None
    tokens: dict[str, Any] | None = None
    tokens_file: str | None = None
    allow_custom_state_providers: bool = False
    functions_root: str = "/statekeep/functions"
    max_request_bytes: int = 8 << 20
    followers: list[dict[str, Any]] | None = None
    worker: Any = field(default=None, repr=False)
    state_dir: str | None = None

    @classmethod
    def from_any(cls, config: ServerConfig | Mapping[str, Any] | None) -> ServerConfig:
        if config is None:
            return cls()
        if isinstance(config, ServerConfig):
            return config
        if not isinstance(config, Mapping):
            raise InvalidArgumentError("server config must be a ServerConfig or a mapping")
        unknown = set(config) - {f.name for f in fields(cls)}
        if unknown:
            raise InvalidArgumentError(f"unknown server options: {', '.join(sorted(unknown))}")
        return cls(**config)
