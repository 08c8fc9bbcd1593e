"""Shared fixtures. Backends for the contract suites are listed in BACKENDS; a backend joins every
contract suite by adding one entry there (a function returning a fresh store URL)."""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import NoReturn, TypeVar

import pytest

from statekeep.metadata import open_store
from statekeep.testing.contract.plugin import open_url, provider, store  # noqa: F401 - the suites' fixtures

IN_CI = os.environ.get("CI") == "true"
T = TypeVar("T")


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
    metadata = open_store(BACKENDS[backend](request, tmp_path))
    opened = open_provider(name, {"store": metadata})
    yield opened
    opened.close()
    metadata.close()


@pytest.fixture(params=list(BACKENDS))
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """A URL of a fresh, empty namespace on each backend in turn."""
    return BACKENDS[request.param](request, tmp_path)


def missing(what: str) -> NoReturn:
    """A prerequisite of a test is missing: it fails in CI (where nothing may skip silently; scripts/test
    installs everything) and skips elsewhere, saying what is missing."""
    if IN_CI:
        pytest.fail(f"{what}: required in CI (scripts/test installs it)", pytrace=False)
    pytest.skip(f"{what} (scripts/test installs it)")


def need(module: str) -> ModuleType:
    """``module`` imported, else :func:`missing` (the CI-guarded ``pytest.importorskip``)."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing(f"{module} is not installed ({e})")


def _start_or_skip(what: str, start: Callable[[], T]) -> T:
    """``start()``; a missing dependency (ServerNotInstalled) is :func:`missing`."""
    from statekeep.testing import servers

    try:
        return start()
    except servers.ServerNotInstalled as e:
        missing(f"{what} is not installed here ({e})")


def _server_fixture(kind: str):
    @pytest.fixture(scope="session")
    def server():
        from statekeep.testing import servers

        srv = _start_or_skip(kind, lambda: servers.start(kind))
        yield srv
        srv.stop()

    return server


zk_server = _server_fixture("zookeeper")
etcd_server = _server_fixture("etcd")


S3_BUCKETS = ("statekeep", "statekeep-other")


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 API on loopback, started once per run, with the buckets S3_BUCKETS. While it runs, this
    process's os.environ points boto-based clients at it (``AWS_ENDPOINT_URL``, credentials, region), and so
    do the environments of processes started from here (Spark executors, workers): s3fs reaches it with
    no options. ``s3_server.url(prefix)`` is a fresh ``s3://statekeep/PREFIX-UNIQUE``;
    ``s3_server.storage_options`` reach it whatever the environment; ``s3_server.endpoint`` is its URL."""
    from statekeep.testing import servers

    s3 = _start_or_skip("moto[server] or s3fs", lambda: servers.start_s3(S3_BUCKETS))
    saved = {name: os.environ.get(name) for name in s3.env}
    os.environ.update(s3.env)
    yield s3
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    s3.stop()


@pytest.fixture(scope="session")
def zk_ensemble():
    """Three ZooKeeper servers in one ensemble on loopback (statekeep.testing.servers.Ensemble), started when
    a test first asks for it, stopped at the end of the run. ``zk_ensemble.url("/chroot")`` is a zk:// URL
    listing all three. A test that kills servers starts them again before it ends (``start_all()``)."""
    from statekeep.testing import servers

    ensemble = _start_or_skip("zookeeper", lambda: servers.start_ensemble(3))
    yield ensemble
    ensemble.stop()


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (a JVM costs seconds and half a GB)."""
    need("pyspark")
    from statekeep.functions.spark import spark_session

    session = spark_session("local[2,4]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_cluster(s3_server):
    """A Spark standalone master and two workers (1 core, 1 GiB each) on loopback, started from
    PySpark's own spark-class when a test first asks for it, shared by the whole run, stopped by PID.
    A test that kills a worker restarts it before it ends (``spark_cluster.restart_worker(i)``). Started
    after the S3 server, so executors inherit its environment and reach it as any S3 endpoint."""
    from statekeep.testing import servers
    from statekeep.testing.spark_cluster import SparkCluster

    try:
        cluster = SparkCluster.start(workers=2, cores=1, memory="1g")
    except servers.ServerNotInstalled as e:
        missing(f"no Spark cluster here ({e})")
    yield cluster
    cluster.stop()
