"""The executor spec: what a Spark executor needs to run one function, built and checked once on the
driver (:func:`statekeep.functions.driver.spark.executor_spec`) and shipped to executors with the runner."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.keygroups import KEY_GROUPS

#: how the runtime decodes a record (see runtime.RecordPath); ``rows``: the DataFrame operator's, a row's columns as
#: Arrow gives them (a dict per record; ``process_batch`` gets the Arrow table as it is)
INPUT_FORMATS = ("json", "text", "message", "rows")


@dataclass(frozen=True, slots=True)
class TimeSpec:
    """A function's time (windows, timers, TTL; see :mod:`statekeep.functions.windowing.timerun`): its window
    (``WindowConfig.to_spec()``, None without one), the state TTL in ms, whether any TTL is used and the
    watermark's lag (None: the window's)."""

    window: Mapping[str, Any] | None = None
    ttl_ms: int | None = None
    ttl_used: bool = True
    lag_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    """What executors need to run a function. Immutable: a micro-batch's parts (``state_parallelism``,
    ``time_groups``, ``watermark_previous``) are set by the driver with :func:`dataclasses.replace`.
    Raises :class:`InvalidArgumentError` when built with a value the runtime cannot run."""

    tenant: str
    namespace: str
    name: str
    code: str = ""
    py_name: str = "<function>"
    class_name: str | None = None
    function_id: str = ""
    function_version: int = 0
    state_provider: str = "embedded"
    state_config: Mapping[str, Any] = field(default_factory=dict)
    store_url: str = ""  # the registry, where a statekeep:// input function is found
    inputs: tuple[str, ...] = ()
    input_format: str = "json"  # one of INPUT_FORMATS
    source_format: str = "json"  # the Spark reader's format
    input_options: Mapping[str, str] = field(default_factory=dict)
    topic_column: bool = False
    key_field: str | None = None
    output: str | None = None
    output_format: str = "jsonl"
    user_config: Mapping[str, Any] = field(default_factory=dict)
    secrets: Mapping[str, Any] = field(default_factory=dict)
    skip_errors: bool = False
    timeout_ms: int | None = None
    max_retries: int | None = None
    dead_letter: str | None = None
    time: TimeSpec | None = None
    input_serdes: Mapping[str, str] = field(default_factory=dict)
    input_schemas: Mapping[str, str] = field(default_factory=dict)
    output_serde: str | None = None
    log_topic: str | None = None
    topics_dir: str | None = None
    trigger_interval_ms: int = 0  # the driver's: ms between micro-batch starts (0: as soon as possible)
    state_parallelism: int = 1  # per micro-batch: partitions of partition-owned (or timed) state
    time_groups: int = KEY_GROUPS  # per micro-batch: key groups of timed state
    watermark_previous: int | None = None  # per micro-batch: the function's watermark before it
    # the DataFrame operator's (statekeep.spark.operator): the function as a Python object (a callable
    # or a pulsar.Function class) instead of ``code``, with its kind (loader.RECORD, NATIVE or BATCH); the
    # pyarrow.Schema of its output rows, kept with each (batch, partition)'s commit (None: the runner, whose
    # tasks give stats rows); and a batch DataFrame's run, its batch id (None: Spark's micro-batch id)
    entry: Any = None
    entry_kind: str | None = None
    rows_schema: Any = None
    run_id: int | None = None

    def __post_init__(self) -> None:
        if self.input_format not in INPUT_FORMATS:
            raise InvalidArgumentError(f"input format must be one of {', '.join(INPUT_FORMATS)}, "
                                       f"not {self.input_format!r}")
        if self.trigger_interval_ms < 0:
            raise InvalidArgumentError(f"trigger_interval_ms must be >= 0, not {self.trigger_interval_ms}")
        if self.max_retries is not None and self.max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be None or >= 0, not {self.max_retries}")
        if isinstance(self.time, Mapping):  # plain data (a spec read as JSON): the typed section
            object.__setattr__(self, "time", TimeSpec(**self.time))
        object.__setattr__(self, "inputs", tuple(self.inputs))

    @property
    def fqfn(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"

    @property
    def careful(self) -> bool:
        """Whether records need per-record error handling (rollback of a failed record's state)."""
        return bool(self.skip_errors or self.max_retries is not None or self.dead_letter or self.timeout_ms)
