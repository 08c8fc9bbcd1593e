"""A function's configuration: Pulsar's ``FunctionConfig`` JSON, one pydantic model that validates it
(:meth:`FunctionConfig.from_json`) and documents it (the REST server's OpenAPI spec uses it as is).
The check of a function's code is :func:`statekeep.functions.config.loader.validate_function_source`.

Every field of Pulsar's FunctionConfig is either honoured or refused (:class:`InvalidArgumentError`,
a 400 over REST, naming the field); a ``null`` field counts as absent, as Gson omits it.

Honoured and stored (``GET`` returns them as stored): ``tenant``, ``namespace``, ``name``, ``className``
(``process``, ``module`` or ``module.process`` for a module-level ``process``, or ``module.Class`` for a
class with ``process(self, input, context)`` as Pulsar's ``pulsar.Function``), ``runtime`` (``PYTHON``
only; ``JAVA``/``GO`` refused), ``py``,
``inputs`` (a list, or pulsar-admin's comma-separated string), ``output``, ``parallelism``,
``userConfig`` (free-form, but its ``maxLagMs``, the watermark's lag without a ``windowConfig``, must be
an int as ``windowConfig.maxLagMs``), ``secrets`` (secret name -> what the secrets provider needs to find it),
``processingGuarantees`` (statekeep always gives effectively-once, which satisfies ``ATLEAST_ONCE``,
``ATMOST_ONCE`` and ``EFFECTIVELY_ONCE``; ``MANUAL`` is refused: there are no acks to give),
``timeoutMs``, ``maxMessageRetries``, ``deadLetterTopic``, ``logTopic`` (the function's log records also
go there), ``customSerdeInputs`` (input -> ``pulsar.SerDe`` class), ``inputSpecs`` (input ->
``{"serdeClassName": ...}``; no other key), ``outputSerdeClassName``, ``customSchemaInputs`` (input ->
a ``pulsar.schema.Record`` class its JSON messages are decoded into; see
:mod:`statekeep.functions.messaging.messages`); the inputs these three name are added to ``inputs``, as Pulsar
does; and statekeep's own ``keyField`` (the input
field whose value partitions records, so one key's records reach one task), ``inputFormat``,
``outputFormat``, ``stateStorage`` (``{"provider": NAME, "config": {...}}``; absent: the server's
default provider), ``triggerIntervalMs`` (ms between micro-batch starts; absent or 0: as soon as possible),
``changelogTopic`` (a compacted Kafka topic, ``kafka://HOST:PORT/TOPIC``, that also carries the function's state
changes, in the byte form Kafka Streams reads: see :mod:`statekeep.functions.messaging.kafka`) and
``changelogFormat`` (how that topic carries typed state values: ``json``, the default, or ``msgpack``).

Accepted only with the value statekeep always behaves as, and not stored (nothing to configure):
``autoAck: true`` (every processed record is acknowledged, deprecated in Pulsar anyway),
``cleanupSubscription: true`` (deleting a function deletes its input progress and state),
``retainOrdering: false``, ``retainKeyOrdering: false``, ``exposePulsarAdminClientEnabled: false``,
``skipToLatest: false``, ``forwardSourceMessageProperty: true`` (a topic output keeps its input message's
properties), and ``fqfn`` when it equals ``tenant/namespace/name``. Another value is refused.

Refused (they need a Pulsar broker, or mean another runtime or a feature statekeep does not have):
see :data:`REFUSED`. Any other unknown field is refused too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      ValidationInfo, WithJsonSchema, field_validator, model_validator)

from statekeep.errors import InvalidArgumentError
from statekeep.state.catalog import parse_state_storage
from statekeep.functions.config.windowconfig import MAX_MS, WindowConfig, user_lag_ms
from statekeep.state.keys import MAX_NAME, validate_name

MAX_INPUTS = 100
MAX_TEXT = 1024
#: a tenant, namespace or function name (what :func:`validate_name` accepts)
NAME_PATTERN = r"^(?!\.\.?$)[A-Za-z0-9_.-]{1,64}$"
_ENTRY = r"[A-Za-z_][A-Za-z0-9_]*"
#: ``process`` or a module name (a module-level process), or a dotted path ending in ``process`` or a class name
CLASS_NAME_PATTERN = rf"^({_ENTRY}\.)*{_ENTRY}$"

#: Pulsar's fields that are refused whenever given (not null), with why.
REFUSED: dict[str, str] = {
    **dict.fromkeys(("topicsPattern", "subName", "subscriptionPosition", "producerConfig", "batchBuilder",
                     "customSchemaOutputs", "inputTypeClassName", "outputSchemaType", "outputTypeClassName"),
                    "needs Pulsar's own subscriptions, producers or schema registry (statekeep reads a broker's "
                    "topics through Spark by message id, and writes them through its own producers)"),
    **dict.fromkeys(("jar", "go", "packageUrl", "functionType", "runtimeFlags", "customRuntimeOptions",
                     "maxPendingAsyncRequests"),
                    "belongs to another runtime (statekeep runs Python functions on Spark)"),
    "resources": "is not supported (Spark's executor settings size the function's tasks)",
    "logLevel": "is not supported (the function logs through Python's logging configuration)",
}

#: Fields accepted only with the value statekeep always behaves as (see the module docstring).
FIXED: dict[str, bool] = {"autoAck": True, "cleanupSubscription": True, "retainOrdering": False,
                          "retainKeyOrdering": False, "exposePulsarAdminClientEnabled": False, "skipToLatest": False,
                          "forwardSourceMessageProperty": True}


#: Pulsar's values; statekeep's effectively-once satisfies all three (``MANUAL`` is refused).
ProcessingGuarantees = Literal["ATLEAST_ONCE", "ATMOST_ONCE", "EFFECTIVELY_ONCE"]
#: what an input is read as (``inputFormat``; unset: guessed from its name, see config.spec): JSON lines, Spark's CSV
#: or Parquet files, text lines, Spark's rate source, another function's changelog, Pulsar messages
SourceFormat = Literal["json", "csv", "text", "parquet", "rate", "statekeep-changelog", "message"]
#: how a KIP-813 changelog topic carries typed state values
ChangelogFormat = Literal["json", "msgpack"]


#: a serde class: ``module.Class`` (``serde.PickleSerDe``, or a class of the function's own file)
SERDE_PATTERN = rf"^({_ENTRY}\.)+{_ENTRY}$"


class InputSpec(BaseModel):
    """Pulsar's ``ConsumerConfig`` of one input; statekeep honours ``serdeClassName`` (and accepts
    ``isRegexPattern: false``); the others need a Pulsar broker and are refused."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    serdeClassName: Annotated[str, Field(pattern=SERDE_PATTERN, max_length=MAX_TEXT)] | None = None
    isRegexPattern: Literal[False] | None = None


def _name(what: str) -> AfterValidator:
    return AfterValidator(lambda v: validate_name(v, what))


def _name_schema(what: str) -> Any:
    return Field(json_schema_extra={"pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME},
                 description=f"the {what}: 1-{MAX_NAME} of A-Z a-z 0-9 _ . - (not . or ..)")


Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT)]


def _split_inputs(value: object) -> object:
    if isinstance(value, str):  # pulsar-admin's --inputs a,b
        if len(value) > MAX_TEXT:
            raise ValueError(f"inputs as one comma-separated string must be at most {MAX_TEXT} characters")
        return [s.strip() for s in value.split(",") if s.strip()]
    return value


def _kafka_name(value: str) -> str:
    """A Kafka topic name (``kafka://HOST:PORT[,HOST:PORT...]/TOPIC``), as :func:`locations.parse` checks it."""
    from statekeep.functions.config.locations import parse

    parse(value)
    return value


def _storage(value: object) -> object:
    parsed = parse_state_storage(value)  # the catalog's reading, for followers too
    return None if parsed is None else {"provider": parsed[0], "config": parsed[1]}


class FunctionConfig(BaseModel):
    """A validated function configuration (see the module docstring). Build it with
    :meth:`from_json`; immutable; ``to_json()`` is what is stored and returned."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, title="FunctionConfig")

    tenant: Annotated[str, _name("tenant")] = _name_schema("tenant")
    namespace: Annotated[str, _name("namespace")] = _name_schema("namespace")
    name: Annotated[str, _name("function name")] = _name_schema("function name")
    inputs: Annotated[list[Text], BeforeValidator(_split_inputs), Field(min_length=1, max_length=MAX_INPUTS),
                      WithJsonSchema({"anyOf": [
                          {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
                           "minItems": 1, "maxItems": MAX_INPUTS},
                          {"type": "string", "pattern": "[^,\\s]", "maxLength": MAX_TEXT,
                           "description": "comma-separated, as pulsar-admin --inputs"}],
                          "description": "the input sources (files or directories)"})]
    className: Annotated[str, Field(pattern=CLASS_NAME_PATTERN, max_length=MAX_TEXT)] = "process"
    runtime: Annotated[str, Field(pattern="^(?i:python)$", description="PYTHON (any case)")] = "PYTHON"
    py: Text | None = None
    output: Text | None = None
    parallelism: Annotated[int, Field(ge=1, le=1024)] = 1
    userConfig: dict[str, Any] = Field(default_factory=dict)
    keyField: Text | None = None
    inputFormat: SourceFormat | None = None
    outputFormat: Text | None = None
    stateStorage: Annotated[dict[str, Any] | None, BeforeValidator(_storage),
                            Field(description='{"provider": NAME, "config": {...}}')] = None
    secrets: dict[str, Any] | None = Field(None, description="secret name -> what the secrets provider needs "
                                                           "(default provider: the environment variable named)")
    processingGuarantees: ProcessingGuarantees | None = Field(
        None, description="all three are satisfied by statekeep's effectively-once processing")
    timeoutMs: Annotated[int, Field(ge=1, le=(1 << 63) - 1)] | None = None
    maxMessageRetries: Annotated[int, Field(ge=0, le=(1 << 31) - 1)] | None = None
    deadLetterTopic: Text | None = None
    logTopic: Text | None = None
    customSerdeInputs: dict[Text, Annotated[str, Field(pattern=SERDE_PATTERN, max_length=MAX_TEXT)]] | None = None
    inputSpecs: dict[Text, InputSpec] | None = None
    outputSerdeClassName: Annotated[str, Field(pattern=SERDE_PATTERN, max_length=MAX_TEXT)] | None = None
    customSchemaInputs: dict[Text, Annotated[str, Field(pattern=SERDE_PATTERN, max_length=MAX_TEXT)]] | None = Field(
        None, description="input -> a pulsar.schema.Record class: its JSON messages arrive as that record")

    def input_serdes(self) -> dict[str, str]:
        """Input -> serde class name, from ``customSerdeInputs`` and ``inputSpecs`` (the latter wins)."""
        serdes = dict(self.customSerdeInputs or {})
        serdes.update({k: v.serdeClassName for k, v in (self.inputSpecs or {}).items() if v.serdeClassName})
        return serdes
    windowConfig: WindowConfig | None = Field(None, description="Pulsar's windowConfig (plus sessionGapMs), see "
                                                                "statekeep.functions.config.windowconfig")
    stateTtlSeconds: Annotated[int, Field(ge=1, le=MAX_MS // 1000)] | None = Field(
        None, description="state keys expire this long after their last write (statekeep's; per-write TTLs win)")
    triggerIntervalMs: Annotated[int, Field(ge=0, le=MAX_MS)] | None = Field(
        None, description="ms between the starts of the function's micro-batches (statekeep's); absent or 0: "
                          "the next one as soon as the previous one ends and there is input")

    changelogTopic: Annotated[Text, AfterValidator(_kafka_name)] | None = Field(
        None, description="a compacted Kafka topic (kafka://HOST:PORT/TOPIC) that also carries the function's state "
                          "changes, in the same Kafka transaction as its Kafka outputs (statekeep's; KIP-813)")
    changelogFormat: ChangelogFormat | None = Field(
        None, description="how changelogTopic carries typed state values: json (the default) or msgpack")

    @property
    def fqfn(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"

    @model_validator(mode="after")
    def _changelog(self) -> FunctionConfig:
        if self.changelogFormat is not None and self.changelogTopic is None:
            raise InvalidArgumentError("changelogFormat needs a changelogTopic (the Kafka topic it is the form of)")
        return self

    @field_validator("runtime")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()

    @field_validator("processingGuarantees", mode="before")
    @classmethod
    def _guarantee(cls, value: object) -> object:
        if value == "MANUAL":
            raise ValueError("MANUAL is not supported: statekeep acknowledges every processed record itself "
                             "(effectively-once), so ATLEAST_ONCE, ATMOST_ONCE and EFFECTIVELY_ONCE all hold")
        return value

    @model_validator(mode="before")
    @classmethod
    def _pulsar_fields(cls, data: object) -> object:
        """Drop nulls; refuse :data:`REFUSED` fields and other values of :data:`FIXED` ones."""
        if not isinstance(data, Mapping):
            return data
        values = {k: v for k, v in data.items() if v is not None}
        for field, why in REFUSED.items():
            if field in values:
                raise InvalidArgumentError(f"{field} {why}")
        for field, value in FIXED.items():
            if field in values and values.pop(field) is not value:
                raise InvalidArgumentError(f"{field} can only be {str(value).lower()} here")
        # (a value that is not a mapping is left to the field's validation, which names it)
        extra = [k for field in ("customSerdeInputs", "inputSpecs", "customSchemaInputs")
                 if isinstance(values.get(field), Mapping) for k in values[field]]
        if extra and all(isinstance(k, str) for k in extra):  # their inputs are inputs, as Pulsar merges them
            inputs = _split_inputs(values.get("inputs", []))
            if isinstance(inputs, list):
                values["inputs"] = list(dict.fromkeys([*inputs, *extra]))
        fqfn = values.pop("fqfn", None)
        if fqfn is not None and fqfn != "/".join(str(values.get(k)) for k in ("tenant", "namespace", "name")):
            raise InvalidArgumentError(f"fqfn {fqfn!r} differs from tenant/namespace/name")
        if values.get("runtime") is not None and not (isinstance(values["runtime"], str)
                                                       and values["runtime"].upper() == "PYTHON"):
            raise InvalidArgumentError(f"runtime: only PYTHON functions are supported, not {values['runtime']!r}")
        return values

    @model_validator(mode="after")
    def _user_lag(self, info: ValidationInfo) -> FunctionConfig:
        if not (info.context or {}).get("stored"):  # see from_json
            user_lag_ms(self.userConfig)  # statekeep reads userConfig.maxLagMs (the watermark's lag)
        return self

    def to_json(self) -> dict[str, Any]:
        """The JSON object, without unset (None) fields."""
        return self.model_dump(exclude_none=True)

    @classmethod
    def from_json(cls, data: object, *, stored: bool = False) -> FunctionConfig:
        """Validate ``data`` (a JSON object); :class:`InvalidArgumentError` names the first bad field.
        ``stored``: a config read back from the registry, where a check added since it was written
        (``userConfig.maxLagMs``) is left to where the value is used, so the function stays readable,
        updatable and deletable."""
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(f"a function config must be a JSON object, not {type(data).__name__}")
        try:
            return cls.model_validate(data, context={"stored": stored})
        except ValidationError as e:
            raise InvalidArgumentError(describe(e, "FunctionConfig")) from None


def describe(error: ValidationError, model: str) -> str:
    """The first error of ``error`` as ``field: what is wrong``."""
    first = error.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"])
    if not where:  # a model-level check: its message names the field
        return first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return f"{where}: unknown {model} field"
    if first["type"] == "missing":
        return f"{where}: required"
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "string_pattern_mismatch" and where == "className":
        message = ("className must be 'process', 'module' or 'module.process' (a top-level def process(input, "
                   "context)) or 'module.Class' (a class with process(self, input, context))")
    return f"{where}: {message}"

