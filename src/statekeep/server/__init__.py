"""The REST admin API (FastAPI): functions and their state, Pulsar-shaped; auth; Prometheus metrics.

    from statekeep.server import create_app, ServerConfig
    app = create_app(ServerConfig(metadata_url="local:///var/lib/statekeep"))

Needs the ``server`` extra: ``pip install 'statekeep[server]'``.
"""

from __future__ import annotations

from statekeep.errors import MissingDependencyError

try:
    import fastapi  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installation
    raise MissingDependencyError("the REST server needs the server extra: pip install 'statekeep[server]'") from e

from statekeep.server.app import create_app  # noqa: E402
from statekeep.server.config import ServerConfig  # noqa: E402
from statekeep.server.routes.state import expected_version  # noqa: E402
from statekeep.server.worker import FunctionWorker, NullWorker  # noqa: E402

__all__ = ["FunctionWorker", "NullWorker", "ServerConfig", "create_app", "expected_version"]
