"""What a Pulsar Python function imports from ``pulsar``, for running it without pulsar-client.

``from pulsar import Function`` (and ``pulsar.functions.function.Function``, ``pulsar.SerDe``,
``pulsar.Context``, ``pulsar.functions.serde``, and ``pulsar.schema``'s records and JSON schema) work
in function code run by statekeep: when loading a function file, if
``import pulsar`` fails, :func:`install` registers this package under the names ``pulsar`` and
``pulsar.functions...`` in ``sys.modules``. statekeep ships no top-level ``pulsar`` package, so it
never shadows pulsar-client: with the client installed, its real classes are used, and a class
subclassing the real ``pulsar.Function`` runs the same way (statekeep only calls ``process``).
"""

from __future__ import annotations

import sys

from statekeep.pulsar_compat.functions.context import Context
from statekeep.pulsar_compat.functions.function import Function
from statekeep.pulsar_compat.functions.serde import IdentitySerDe, PickleSerDe, SerDe

__all__ = ["Context", "Function", "IdentitySerDe", "PickleSerDe", "SerDe", "install"]


def install() -> bool:
    """Make ``import pulsar`` work: a no-op (False) if a real ``pulsar`` is importable, else this
    package and its submodules are registered under the ``pulsar`` names (True)."""
    try:
        import pulsar  # noqa: F401 - the real client, or this shim installed earlier
        return False
    except ImportError:
        pass
    from statekeep.pulsar_compat import functions, schema
    from statekeep.pulsar_compat.functions import context, function, serde

    module = sys.modules[__name__]
    sys.modules.update({"pulsar": module, "pulsar.functions": functions, "pulsar.functions.function": function,
                        "pulsar.functions.context": context, "pulsar.functions.serde": serde,
                        "pulsar.schema": schema})
    return True
