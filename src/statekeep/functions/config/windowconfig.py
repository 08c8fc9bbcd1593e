"""Pulsar's ``windowConfig`` (plus statekeep's ``sessionGapMs``), validated.

A window is one of: count (``windowLengthCount``, sliding by ``slidingIntervalCount``, default
tumbling), duration (``windowLengthDurationMs``, sliding by ``slidingIntervalDurationMs``, default
tumbling; windows aligned to the epoch as Spark's ``window()``), or session (``sessionGapMs``: a key's
window closes after that much event time without a record). ``maxLagMs`` (default 0) is how far the
watermark trails the largest event time seen; ``lateDataTopic`` receives late records (else they are
counted and dropped); ``timestampExtractorClassName`` names a ``module.fn(record) -> ms`` callable in the
function's file (else ``userConfig.eventTimeField``, else processing time). ``watermarkEmitIntervalMs``
is accepted and stored: the watermark advances once per micro-batch, which is how often it is emitted.
Every mistake raises :class:`InvalidArgumentError` naming the field, at create. A function without a
``windowConfig`` takes its lag from ``userConfig.maxLagMs`` (:func:`user_lag_ms`), checked the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from statekeep.errors import InvalidArgumentError
from statekeep.validate import check_int

MAX_MS = 10 * 365 * 24 * 3600 * 1000  # ten years: longer lengths, gaps or lags are refused
MAX_COUNT = 1_000_000
_Ms = Annotated[int, Field(ge=1, le=MAX_MS)]
_Count = Annotated[int, Field(ge=1, le=MAX_COUNT)]
#: ``fn`` or ``module.fn``: a callable defined in the function's file
EXTRACTOR_PATTERN = r"^([A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*$"


class WindowConfig(BaseModel):
    """A validated window configuration (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, title="WindowConfig")

    windowLengthCount: _Count | None = None
    windowLengthDurationMs: _Ms | None = None
    slidingIntervalCount: _Count | None = None
    slidingIntervalDurationMs: _Ms | None = None
    sessionGapMs: _Ms | None = None
    maxLagMs: Annotated[int, Field(ge=0, le=MAX_MS)] | None = None
    lateDataTopic: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    timestampExtractorClassName: Annotated[str, Field(pattern=EXTRACTOR_PATTERN, max_length=1024)] | None = None
    watermarkEmitIntervalMs: _Ms | None = None

    @model_validator(mode="before")
    @classmethod
    def _nulls(cls, data: object) -> object:
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data

    @model_validator(mode="after")
    def _shape(self) -> WindowConfig:
        counts = self.windowLengthCount is not None or self.slidingIntervalCount is not None
        durations = self.windowLengthDurationMs is not None or self.slidingIntervalDurationMs is not None
        if counts and durations:
            raise InvalidArgumentError("count and duration settings are mixed (windowLengthCount/"
                                       "slidingIntervalCount vs windowLengthDurationMs/slidingIntervalDurationMs)")
        if self.sessionGapMs is not None and (counts or durations):
            raise InvalidArgumentError("sessionGapMs: a session window takes no length or sliding "
                                       "interval")
        if self.sessionGapMs is None and self.windowLengthCount is None and self.windowLengthDurationMs is None:
            raise InvalidArgumentError("no window length (set windowLengthCount, "
                                       "windowLengthDurationMs or sessionGapMs)")
        for length, name in (("windowLengthCount", "slidingIntervalCount"),
                             ("windowLengthDurationMs", "slidingIntervalDurationMs")):
            size, step = getattr(self, length), getattr(self, name)
            if step is not None and size is None:
                raise InvalidArgumentError(f"{name}: set without {length}")
            if step is not None and size is not None and step > size:
                raise InvalidArgumentError(f"{name}: {step} exceeds {length} {size} (records "
                                           "between windows would be lost)")
            if size is not None and step is not None and name.endswith("Ms") and size % step:
                raise InvalidArgumentError(f"{name}: {length} {size} must be a multiple of it "
                                           "(windows aligned to the epoch)")
        return self

    @property
    def kind(self) -> Literal["count", "time", "session"]:
        if self.sessionGapMs is not None:
            return "session"
        return "count" if self.windowLengthCount is not None else "time"

    def to_spec(self) -> dict[str, Any]:
        """What executors need (plain JSON)."""
        length = self.windowLengthCount or self.windowLengthDurationMs or self.sessionGapMs
        slide = self.slidingIntervalCount or self.slidingIntervalDurationMs or length
        return {"kind": self.kind, "length": length, "slide": slide, "lag": self.maxLagMs or 0,
                "late_topic": self.lateDataTopic, "extractor": self.timestampExtractorClassName}


def user_lag_ms(user_config: Mapping[str, Any] | None) -> int:
    """``userConfig.maxLagMs``: the watermark's lag of a function without a ``windowConfig`` (0 when
    absent or null). :class:`InvalidArgumentError` unless it is an int in ``windowConfig.maxLagMs``'s
    range, 0..:data:`MAX_MS` (not a bool, a float or a string)."""
    lag = (user_config or {}).get("maxLagMs")
    return 0 if lag is None else check_int(lag, "userConfig.maxLagMs", minimum=0, maximum=MAX_MS)
