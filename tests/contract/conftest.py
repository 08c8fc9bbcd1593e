"""Fixtures the state and changelog contract suites share: every state provider over every
backend it supports ("metadata" over each of ``BACKENDS``, "embedded" over local:// only)."""

from __future__ import annotations

import pytest

from conftest import BACKENDS, STATE_TARGETS


@pytest.fixture(params=STATE_TARGETS, ids=[f"{p}-{b}" for p, b in STATE_TARGETS])
def target(request, tmp_path) -> tuple[str, str]:
    """(provider name, store URL)."""
    name, backend = request.param
    return name, BACKENDS[backend](request, tmp_path)
