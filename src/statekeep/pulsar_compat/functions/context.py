"""``pulsar.functions.context``: the Context interface (statekeep's implementation is
:class:`statekeep.functions.executor.context.Context`)."""

from __future__ import annotations


class Context:
    """The interface a function's ``context`` argument implements (for type hints and isinstance)."""
