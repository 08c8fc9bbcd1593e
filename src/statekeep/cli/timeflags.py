"""The time flags of ``functions create|update|localrun``: pulsar-admin's window flags, statekeep's session,
lag, late-data and TTL flags. They fill the config's ``windowConfig`` (over the config file's block) and
``stateTtlSeconds``; :class:`statekeep.functions.config.model.FunctionConfig` validates the result."""

from __future__ import annotations

import argparse
from typing import Any

#: flag -> windowConfig field
WINDOW_FLAGS = {"window_length_count": "windowLengthCount", "window_length_duration_ms": "windowLengthDurationMs",
                "sliding_interval_count": "slidingIntervalCount",
                "sliding_interval_duration_ms": "slidingIntervalDurationMs", "session_gap_ms": "sessionGapMs",
                "max_lag_ms": "maxLagMs", "late_data_topic": "lateDataTopic",
                "timestamp_extractor": "timestampExtractorClassName"}


def add_time_flags(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--window-length-count", type=int, help="records per window (a count window)")
    sub.add_argument("--window-length-duration-ms", type=int, help="a time window's length, ms")
    sub.add_argument("--sliding-interval-count", type=int, help="records between count windows (default: tumbling)")
    sub.add_argument("--sliding-interval-duration-ms", type=int, help="ms between time windows (default: tumbling)")
    sub.add_argument("--session-gap-ms", type=int, help="session windows closing after this much event time "
                     "without a record (statekeep's)")
    sub.add_argument("--max-lag-ms", type=int, help="how far the watermark trails the largest event time seen")
    sub.add_argument("--late-data-topic", help="where late records go (else counted and dropped)")
    sub.add_argument("--timestamp-extractor", metavar="MODULE.FN",
                     help="a callable of the function's file giving a record's event time in ms")
    sub.add_argument("--state-ttl", type=int, metavar="SECONDS",
                     help="state keys expire this long after their last write (stateTtlSeconds)")


def apply_time_flags(args: argparse.Namespace, config: dict[str, Any]) -> None:
    """Put the time flags given into ``config`` (a FunctionConfig JSON being built)."""
    window = {field: getattr(args, flag) for flag, field in WINDOW_FLAGS.items()
              if getattr(args, flag, None) is not None}
    if window:
        base = config.get("windowConfig")
        config["windowConfig"] = {**(base if isinstance(base, dict) else {}), **window}
    if getattr(args, "state_ttl", None) is not None:
        config["stateTtlSeconds"] = args.state_ttl
