"""Fixtures the state and changelog contract suites share: every state provider over every
backend it supports ("metadata" over each of ``BACKENDS``, "embedded" over local:// only,
"partitioned" with its state dir on a file URL and on S3)."""

from __future__ import annotations

import uuid

import pytest

from conftest import BACKENDS, STATE_TARGETS

TARGETS = [*STATE_TARGETS, ("partitioned", "file"), ("partitioned", "s3")]


@pytest.fixture(params=TARGETS, ids=[f"{p}-{b}" for p, b in TARGETS])
def target(request, tmp_path) -> tuple:
    """(provider name, store URL) or, for partitioned, (name, store URL, its config)."""
    name, backend = request.param
    if name != "partitioned":
        return name, BACKENDS[backend](request, tmp_path)
    config = {"cache_dir": str(tmp_path / "cache"), "state_dir": (tmp_path / "state-dir").as_uri()}
    if backend == "s3":
        s3 = request.getfixturevalue("s3_server")
        config.update(state_dir=s3.url(f"contract-{uuid.uuid4().hex[:8]}"), storage_options=s3.storage_options)
    return name, BACKENDS["local"](request, tmp_path), config
