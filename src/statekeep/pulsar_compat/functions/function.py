"""``pulsar.functions.function``: the base class of a Pulsar Python function."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any


class Function:
    """Subclass it and define ``process(self, input, context)``, as with pulsar-client; statekeep
    creates one instance per executor process and calls ``process`` once per record."""

    @abstractmethod
    def process(self, input: Any, context: Any) -> Any:
        """Process one input record; the returned value (if not None) goes to the output."""
