"""``pulsar.functions`` for :mod:`statekeep.pulsar_compat`."""

from statekeep.pulsar_compat.functions.context import Context
from statekeep.pulsar_compat.functions.function import Function

__all__ = ["Context", "Function"]
