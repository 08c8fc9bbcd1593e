"""Executor specs in tests: written as plain dicts (``{**spec, "code": ...}``) and run as the typed,
frozen :class:`~statekeep.functions.config.spec.ExecutorSpec` the driver builds."""

from __future__ import annotations

from typing import Any

from statekeep.functions.executor import runtime
from statekeep.functions.executor.path import PartitionStats
from statekeep.functions.config.spec import ExecutorSpec


def typed(spec: Any) -> ExecutorSpec:
    """``spec`` as an :class:`ExecutorSpec` (a dict of its fields, or one already)."""
    return spec if isinstance(spec, ExecutorSpec) else ExecutorSpec(**spec)


def run_partition(spec: Any, *args: Any, **kwargs: Any) -> PartitionStats:
    return runtime.run_partition(typed(spec), *args, **kwargs)


def cached_state_store(spec: Any) -> Any:
    return typed(spec).state_store()
