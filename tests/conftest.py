"""Shared fixtures. Backends for the contract suites are listed in BACKENDS; a backend joins every
contract suite by adding one entry there (a function returning a fresh store URL)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from statekeep.metadata import MetadataStore, open_store

IN_CI = os.environ.get("CI") == "true"


def _memory_url(request: pytest.FixtureRequest, tmp_path) -> str:
    return f"memory://{uuid.uuid4().hex}"


def _local_url(request: pytest.FixtureRequest, tmp_path) -> str:
    return f"local://{tmp_path / 'store'}"


def _zk_url(request: pytest.FixtureRequest, tmp_path) -> str:
    server = request.getfixturevalue("zk_server")
    return f"zk://{server.address}/t{uuid.uuid4().hex[:12]}"


def _etcd_url(request: pytest.FixtureRequest, tmp_path) -> str:
    server = request.getfixturevalue("etcd_server")
    return f"etcd://{server.address}/t{uuid.uuid4().hex[:12]}"


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, object], str]] = {
    "memory": _memory_url,
    "local": _local_url,
    "zk": _zk_url,
    "etcd": _etcd_url,
}


#: (state provider, backend) pairs: the metadata provider on every backend, the embedded one on local://
STATE_TARGETS = [("metadata", backend) for backend in BACKENDS] + [("embedded", "local")]


@pytest.fixture(params=STATE_TARGETS, ids=[f"{p}-{b}" for p, b in STATE_TARGETS])
def leader(request: pytest.FixtureRequest, tmp_path):
    """A state provider over a fresh store, for each of STATE_TARGETS in turn."""
    from statekeep.state import open_provider

    name, backend = request.param
    store = open_store(BACKENDS[backend](request, tmp_path))
    provider = open_provider(name, {"store": store})
    yield provider
    provider.close()
    store.close()


@pytest.fixture(params=list(BACKENDS))
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A URL of a fresh, empty namespace on each backend in turn."""
    return BACKENDS[request.param](request, tmp_path)


@pytest.fixture
def open_url(store_url: str) -> Iterator[Callable[..., MetadataStore]]:
    """Opens stores (on ``store_url`` by default) and closes them all after the test."""
    opened: list[MetadataStore] = []

    def _open(url: str | None = None, **options) -> MetadataStore:
        store = open_store(url or store_url, **options)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def store(open_url) -> MetadataStore:
    return open_url()


def _server_fixture(kind: str):
    @pytest.fixture(scope="session")
    def server():
        from statekeep.testing import servers

        try:
            srv = servers.start(kind)
        except servers.ServerNotInstalled as e:
            if IN_CI:
                raise
            pytest.skip(f"{kind} is not installed here ({e}); scripts/test installs it")
        yield srv
        srv.stop()

    return server


zk_server = _server_fixture("zookeeper")
etcd_server = _server_fixture("etcd")


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (a JVM costs seconds and half a GB)."""
    pytest.importorskip("pyspark", reason="scripts/test installs pyspark") if not IN_CI else None
    from statekeep.functions.spark import spark_session

    session = spark_session("local[2,4]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster():
    """A Spark standalone master and two workers (1 core, 1 GiB each) on loopback, started from
    PySpark's own spark-class when a test first asks for it, shared by the whole run, stopped by PID.
    A test that kills a worker restarts it before it ends (``spark_cluster.restart_worker(i)``)."""
    from statekeep.testing import servers
    from statekeep.testing.spark_cluster import SparkCluster

    try:
        cluster = SparkCluster.start(workers=2, cores=1, memory="1g")
    except servers.ServerNotInstalled as e:
        if IN_CI:
            raise
        pytest.skip(f"no Spark cluster here ({e}); scripts/test installs pyspark")
    yield cluster
    cluster.stop()
