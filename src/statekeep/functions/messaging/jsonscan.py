"""Decoding JSON on the per-record path: :func:`loads_at` is ``json.loads`` without its per-call costs."""

from __future__ import annotations

import json
from json.scanner import make_scanner
from typing import Any

# what json.loads runs, minus its per-call checks (typeshed types the argument as a scanner, not the decoder)
_scan = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
_loads = json.loads


def loads_at(text: Any, start: int = 0) -> Any:
    """``json.loads(text[start:])``: the same value, or the same error. The fast path (no copy, no
    whitespace matching) is a str holding exactly one JSON value from ``start`` to its end; anything
    else (whitespace, bytes, malformed input) goes through ``json.loads``."""
    try:
        value, end = _scan(text, start)
    except Exception:
        return _loads(text[start:] if start else text)
    return value if end == len(text) else _loads(text[start:] if start else text)
