"""The hook for running functions beside the REST API (``statekeep standalone``).

A worker is any object with ``start(registry)`` and ``stop()``; the server calls ``start`` when it
starts and ``stop`` when it shuts down, and ``function_deleting(tenant, namespace, name)`` (if the
worker has it) before a function and its state are deleted, so its instances stop writing first.
Function changes can be followed by listening to the registry's metadata store
(``registry.store.add_listener``) under ``registry.root``. The Spark runtime plugs in here;
:class:`NullWorker` runs nothing.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from statekeep.functions.config.registry import FunctionRegistry


@runtime_checkable
class FunctionWorker(Protocol):
    def start(self, registry: FunctionRegistry) -> None: ...

    def stop(self) -> None: ...


class NullWorker:
    """Runs no functions (the REST API only)."""

    def __init__(self) -> None:
        self.started = False

    def start(self, registry: FunctionRegistry) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False
