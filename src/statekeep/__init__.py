"""statekeep: a pluggable state and metadata layer for stateful stream processing."""

from statekeep.errors import StatekeepError

__version__ = "0.1.0"
__all__ = ["StatekeepError", "__version__"]
