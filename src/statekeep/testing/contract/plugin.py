"""The fixtures the contract suites build on (see :mod:`statekeep.testing.contract`): import them into
a ``conftest.py`` and provide ``store_url`` (and ``target`` for the state suites)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from statekeep.metadata import MetadataStore, open_store
from statekeep.state import StateStoreProvider, open_provider


@pytest.fixture
def open_url(store_url: str) -> Iterator[Callable[..., MetadataStore]]:
    """Opens stores (on ``store_url`` by default, with options) and closes them all after the test."""
    opened: list[MetadataStore] = []

    def _open(url: str | None = None, **options: Any) -> MetadataStore:
        store = open_store(url or store_url, **options)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def store(open_url: Callable[..., MetadataStore]) -> MetadataStore:
    """A store on ``store_url``, closed after the test."""
    return open_url()


def provider_config(target: tuple[Any, ...]) -> dict[str, Any]:
    """The config of ``target``: ``(provider name, store URL)`` or ``(name, URL, more config)`` (e.g.
    ``partitioned``'s ``state_dir``); the metadata provider with a long retry bound, so contention
    tests do not give up on a slow server."""
    name, url, *more = target
    return {"metadata_url": url, **({"retry_seconds": 60} if name == "metadata" else {}), **(more[0] if more else {})}


@pytest.fixture
def provider(target: tuple[Any, ...]) -> Iterator[StateStoreProvider]:
    """The state provider ``target[0]`` over the store at ``target[1]`` (see :func:`provider_config`)."""
    opened = open_provider(target[0], provider_config(target))
    yield opened
    opened.close()
