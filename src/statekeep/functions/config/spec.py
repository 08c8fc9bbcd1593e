"""The executor spec: what a Spark executor needs to run one function, built and checked once on the
driver (:func:`executor_spec`, from the function's config: its :func:`time_section` too) and shipped to executors
with the runner."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.locations import carries_messages, default_root
from statekeep.functions.config.model import ChangelogFormat, SourceFormat
from statekeep.functions.config.windowconfig import user_lag_ms
from statekeep.state.base import StateStore
from statekeep.state.keygroups import KEY_GROUPS
from statekeep.state.registry import cached_store

if TYPE_CHECKING:
    from statekeep.functions.config.model import FunctionConfig
    from statekeep.functions.config.registry import FunctionRegistry

#: what a Pulsar topic, or a file or directory that is not JSON, CSV or Parquet, is read as: Pulsar
#: messages (see statekeep.functions.messaging.messages), the payload through the input's serde
MESSAGE = "message"

#: how the runtime decodes a record (see path.RecordPath); ``rows``: the DataFrame operator's, a row's columns as
#: Arrow gives them (a dict per record; ``process_batch`` gets the Arrow table as it is)
INPUT_FORMATS = ("json", "text", "message", "rows")
#: what a function's input is read as (``inputFormat``, given or guessed from its name: :func:`_guess_format`)
SOURCE_FORMATS: tuple[str, ...] = get_args(SourceFormat)
#: how a typed state value is carried on a KIP-813 changelog topic (``changelogFormat``)
CHANGELOG_FORMATS: tuple[str, ...] = get_args(ChangelogFormat)


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """How a function's records arrive, chosen once per function (:attr:`ExecutorSpec.format`, from its
    ``input_format`` and ``source_format``), so that no step of a run compares format names: what the runtime
    decodes a record as (:attr:`json`, :attr:`text`, :attr:`message` or :attr:`rows`, the operator's) and what
    the input was read as (``source``: the Spark reader's format; :attr:`changelog`, :attr:`text_lines`)."""

    decoded: str = "json"
    source: str = "json"

    @classmethod
    def of(cls, source: str) -> RecordFormat:
        """The format of a function whose input is read as ``source`` (one of :data:`SOURCE_FORMATS`, else
        :class:`InvalidArgumentError`): a text or message input is decoded as such, a CSV or Parquet file's row
        arrives as a row (a dict of its columns, as Spark's reader typed them), any other as JSON."""
        if source not in SOURCE_FORMATS:
            raise InvalidArgumentError(f"input format must be one of {', '.join(SOURCE_FORMATS)}, not {source!r}")
        return cls(source if source in ("text", MESSAGE) else "rows" if source in ("csv", "parquet") else "json",
                   source)

    @property
    def json(self) -> bool:
        """A record is a JSON line, ``process`` gets its value (``json.loads``)."""
        return self.decoded == "json"

    @property
    def text(self) -> bool:
        """A record is a line of text, given as it is."""
        return self.decoded == "text"

    @property
    def message(self) -> bool:
        """A record is a Pulsar message record: ``process`` gets its value through the input's serde."""
        return self.decoded == MESSAGE

    @property
    def rows(self) -> bool:
        """A record is a row (a dict; ``process_batch``: the Arrow table): of the operator's DataFrame, or of a CSV
        or Parquet input as Spark's reader gives it."""
        return self.decoded == "rows"

    @property
    def changelog(self) -> bool:
        """The input is another function's changelog (its records' properties are their offset, kind, version)."""
        return self.source == "statekeep-changelog"

    @property
    def text_lines(self) -> bool:
        """The input was read as text: a record is never a JSON document (``eventTimeField`` has none)."""
        return self.source == "text"

    @property
    def lines(self) -> bool:
        """The input's files are lines (JSON or text), read with Spark's text source: a record is its line."""
        return self.source in ("json", "text")

    @property
    def one_stream(self) -> bool:
        """The input is one stream whatever its names (Spark's ``rate``, a changelog), not a stream per input."""
        return self.source in ("rate", "statekeep-changelog")

    @property
    def reader(self) -> str:
        """The Spark reader's format of the input (JSON and text lines: ``text``)."""
        return "text" if self.lines else self.source


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
class Layout:
    """Where a run of a function stands in its query, which the driver decides and the function's spec does not
    say: the state's ``groups`` key groups over ``partitions`` partitions (partition-owned or time state, see
    :func:`statekeep.functions.windowing.timerun.routing`: once per query) and the function's ``watermark``
    before the micro-batch (a function keeping time: per micro-batch, from its committed state)."""

    groups: int = KEY_GROUPS
    partitions: int = 1
    watermark: int | None = None


@dataclass(frozen=True, slots=True)
class ExecutorSpec:
    """What executors need to run a function, built once (:func:`executor_spec`) and never changed: where a run
    stands in its query (its partitions, the watermark before its micro-batch) is its :class:`Layout`.
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
    #: a Kafka topic that also carries the state changes (``changelogTopic``), typed values in ``changelog_format``
    changelog_topic: str | None = None
    changelog_format: str = "json"
    topics_dir: str | None = None
    trigger_interval_ms: int = 0  # the driver's: ms between micro-batch starts (0: as soon as possible)
    # the DataFrame operator's (statekeep.spark.operator): the function as a Python object (a callable
    # or a pulsar.Function class) instead of ``code``, with its kind (loader.RECORD, NATIVE or BATCH); the
    # pyarrow.Schema of its output rows, kept with each (batch, partition)'s commit (None: the runner, whose
    # tasks give stats rows); and a batch DataFrame's run, its batch id (None: Spark's micro-batch id)
    entry: Any = None
    entry_kind: str | None = None
    rows_schema: Any = None
    run_id: int | None = None
    #: the record format (from input_format and source_format, set at construction)
    format: RecordFormat = field(default_factory=RecordFormat, init=False, compare=False)

    def __post_init__(self) -> None:
        if self.input_format not in INPUT_FORMATS:
            raise InvalidArgumentError(f"input format must be one of {', '.join(INPUT_FORMATS)}, "
                                       f"not {self.input_format!r}")
        if self.trigger_interval_ms < 0:
            raise InvalidArgumentError(f"trigger_interval_ms must be >= 0, not {self.trigger_interval_ms}")
        if self.changelog_format not in CHANGELOG_FORMATS:
            raise InvalidArgumentError(f"changelog_format must be json or msgpack, not {self.changelog_format!r}")
        if self.max_retries is not None and self.max_retries < 0:
            raise InvalidArgumentError(f"max_retries must be None or >= 0, not {self.max_retries}")
        if isinstance(self.time, Mapping):  # plain data (a spec read as JSON): the typed section
            object.__setattr__(self, "time", TimeSpec(**self.time))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "format", RecordFormat(self.input_format, self.source_format))

    @property
    def fqfn(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"

    def state_store(self) -> StateStore:
        """The function's state store, from the process's provider cache
        (:func:`statekeep.state.registry.cached_store`)."""
        return cached_store(self.state_provider, self.state_config, self.tenant, self.namespace, self.name)

    @property
    def careful(self) -> bool:
        """Whether records need per-record error handling (rollback of a failed record's state)."""
        return bool(self.skip_errors or self.max_retries is not None or self.dead_letter or self.timeout_ms)


def time_section(config: Any, code: str | None) -> TimeSpec | None:
    """The executor spec's ``time`` section for a function (a :class:`FunctionConfig` and its code; None: code
    whose source is unknown, taken to keep time), or None when it keeps no time: no windowConfig, no
    stateTtlSeconds, and code that mentions neither ``on_timer``, ``register_timer`` nor ``ttl``
    (``ttl_seconds``, a typed variable's ``ttl=``: the TTL index)."""
    window = getattr(config, "windowConfig", None)
    ttl = getattr(config, "stateTtlSeconds", None)
    if window is None and ttl is None and code is not None and not any(
            w in code for w in ("on_timer", "register_timer", "ttl")):
        return None
    # a config stored before create checked userConfig.maxLagMs is refused here, not taken as 0
    lag = (window.maxLagMs or 0) if window is not None else user_lag_ms(getattr(config, "userConfig", None))
    return TimeSpec(window.to_spec() if window is not None else None, ttl * 1000 if ttl else None,
                    bool(ttl) or code is None or "ttl_seconds" in code, lag)


def executor_spec(registry: FunctionRegistry, metadata_url: str, tenant: str, namespace: str, name: str, *,
                  skip_errors: bool | None = None,
                  fields: Callable[[FunctionConfig], Mapping[str, Any]] | None = None
                  ) -> tuple[ExecutorSpec, FunctionConfig]:
    """What executors need to run a registered function (code, provider, formats), checked, and its
    :class:`FunctionConfig`. The provider config names the store by URL, since an open store cannot
    travel to another process. ``fields(config)``: spec fields to build it with instead of the config's (the
    DataFrame operator's: its entry object, formats, output rows), so the spec is built once."""
    cfg = registry.get(tenant, namespace, name)
    entry = registry.catalog.get(tenant, namespace, name)
    version = entry.stat.version if entry is not None else 0  # the config's: get_function_version
    code = registry.get_code(tenant, namespace, name).decode()
    provider, provider_config = registry.state_provider(cfg, metadata_url)
    source = cfg.inputFormat or _guess_format(cfg.inputs[0])
    if cfg.input_serdes() or cfg.customSchemaInputs or any(carries_messages(i) for i in cfg.inputs):
        source = MESSAGE  # a serde takes the message's bytes; a topic holds messages
    fmt = RecordFormat.of(source)
    user_config = dict(cfg.userConfig)
    built = dict(
        tenant=tenant, namespace=namespace, name=name, code=code, py_name=cfg.py or f"{name}.py",
        state_provider=provider,
        state_config=provider_config, input_format=fmt.decoded, source_format=fmt.source, key_field=cfg.keyField,
        output=cfg.output,
        store_url=metadata_url,  # the registry, where a statekeep:// input function is found
        output_format=cfg.outputFormat or "jsonl", user_config=user_config,
        skip_errors=bool(user_config.get("skipErrors", False) if skip_errors is None else skip_errors),
        # Spark reader options, e.g. {"maxFilesPerTrigger": "1"} for smaller micro-batches
        input_options={str(k): str(v) for k, v in dict(user_config.get("inputOptions", {})).items()},
        # Pulsar's className, identity and the per-record Context's data
        class_name=cfg.className, function_id=registry.incarnation(tenant, namespace, name),
        function_version=version, inputs=tuple(cfg.inputs),
        topic_column=len(cfg.inputs) > 1 and not fmt.one_stream,
        # Pulsar's per-record error handling (see path.RecordPath.run_records); getattr: fields the config may lack
        secrets=dict(getattr(cfg, "secrets", None) or {}), timeout_ms=getattr(cfg, "timeoutMs", None) or None,
        max_retries=_retries(getattr(cfg, "maxMessageRetries", None)),
        dead_letter=getattr(cfg, "deadLetterTopic", None) or None,
        time=time_section(cfg, code),  # windows, timers, TTL (statekeep.functions.windowing.timerun)
        # Pulsar's serde, log topic and topics (see statekeep.functions.messaging.messages and .topics)
        input_serdes=cfg.input_serdes(), output_serde=cfg.outputSerdeClassName, log_topic=cfg.logTopic,
        input_schemas=dict(cfg.customSchemaInputs or {}), trigger_interval_ms=cfg.triggerIntervalMs or 0,
        # KIP-813: the state changes on a Kafka topic too (statekeep.functions.messaging.kafka.changelog_records)
        changelog_topic=getattr(cfg, "changelogTopic", None), changelog_format=getattr(cfg, "changelogFormat", None)
        or "json",
        topics_dir=os.environ.get("STATEKEEP_TOPICS_DIR") or default_root(metadata_url or None))
    return ExecutorSpec(**{**built, **(fields(cfg) if fields is not None else {})}), cfg


def _retries(value: Any) -> int | None:
    """``maxMessageRetries``: None (unset, or negative as Pulsar's "no limit" sentinel) or >= 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _guess_format(source: str) -> str:
    """The input format an input's name implies (``inputFormat`` unset): ``rate``, a changelog, CSV,
    Parquet, JSON lines for a .json/.jsonl file, else Pulsar messages (a topic; a directory, where each
    file's name says whether it holds JSON lines; a text file), whose payload is what Pulsar's serde
    gives (a str for text)."""
    lowered = source.lower().rstrip("/")
    if lowered in ("rate", "rate://"):
        return "rate"
    if lowered.startswith("statekeep://"):
        return "statekeep-changelog"
    for ext, fmt in ((".csv", "csv"), (".parquet", "parquet"), (".json", "json"), (".jsonl", "json")):
        if lowered.endswith(ext):
            return fmt
    return MESSAGE
