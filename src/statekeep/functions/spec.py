"""The executor spec: what a Spark executor needs to run one function, as plain JSON data."""

from __future__ import annotations

from typing import Any, TypedDict


class ExecutorSpec(TypedDict, total=False):
    """What executors need to run a function, as plain JSON data (built by :func:`spark.executor_spec`;
    the driver adds the ``state_*``/``time_groups`` and ``watermark_*`` keys per micro-batch)."""

    tenant: str
    namespace: str
    name: str
    code: str
    py_name: str
    class_name: str | None
    function_id: str
    function_version: int
    state_provider: str
    state_config: dict[str, Any]
    store_url: str
    inputs: list[str]
    input_format: str  # "json", "text" or "message"
    source_format: str  # the Spark reader's format
    input_options: dict[str, str]
    topic_column: bool
    key_field: str | None
    output: str | None
    output_format: str
    user_config: dict[str, Any]
    secrets: dict[str, Any]
    skip_errors: bool
    timeout_ms: int | None
    max_retries: int | None
    dead_letter: str | None
    time: dict[str, Any] | None  # windows, timers, TTL (timerun.time_section)
    input_serdes: dict[str, str]
    input_schemas: dict[str, str]
    output_serde: str | None
    log_topic: str | None
    topics_dir: str
    state_parallelism: int  # per micro-batch: partitions of partition-owned (or timed) state
    time_groups: int
    watermark_previous: int | None  # per micro-batch: the function's watermark before it
