"""Shared fixtures. Backends for the contract suites are listed in BACKENDS; a backend joins every
contract suite by adding one entry there (a function returning a fresh store URL).

Tiers are chosen by what a test uses, never by hand: each fixture in RESOURCES that starts something
outside this process (and each test parameter naming a server backend, RESOURCE_PARAMS) marks the tests
that use it; a test using none of them is marked ``fast`` (``scripts/test --fast`` runs those). A fast
test that starts one anyway, without its fixture, fails saying which fixture to ask for, so the fast tier
cannot quietly grow slow. Tests sharing a heavy fixture wider than one test (a module's server or
browser, the Spark cluster, the ZooKeeper ensemble, the etcd cluster, the Kafka cluster, the Pulsar standalone) run
on one pytest-xdist worker (``xdist_group``), so each is started once per run."""

from __future__ import annotations

import importlib
import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn, TypeVar

import pytest

from statekeep.metadata import open_store
from statekeep.testing import cds
from statekeep.testing.contract.plugin import open_url, provider, store  # noqa: F401 - the suites' fixtures

IN_CI = os.environ.get("CI") == "true"
T = TypeVar("T")

# Every Spark JVM a test starts (drivers in this process or in processes it starts, a cluster's daemons and
# executors) compiles with C1 only: test queries are short, and C2's compiler threads cost the two cores more
# than its code gives back (a README example's test: 68-93 s with C2, 40-42 s without). Benchmarks keep C2. Each
# also maps the machine's class-data archive where scripts/test made one (statekeep.testing.cds: a driver's start
# takes half the CPU).
_JVM = " ".join(filter(None, [cds.C1, cds.java_options()]))
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-java-options '{_JVM}' "
                                             f"--conf 'spark.executor.extraJavaOptions={_JVM}' pyspark-shell")
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", _JVM)

#: fixtures that start something outside the test process -> the tier marker of the tests using them
RESOURCES = {
    "spark": "spark", "spark_env": "spark", "spark_cluster": "cluster", "server_process": "server",
    "zk_server": "zookeeper", "zk_ensemble": "zookeeper", "start_zookeeper": "zookeeper",
    "etcd_server": "etcd", "etcd_cluster": "etcd", "start_etcd": "etcd", "s3_server": "s3",
    "kafka": "kafka", "kafka_cluster": "kafka", "start_kafka": "kafka", "pulsar": "pulsar",
    "browser": "chromium", "fresh_copy": "venv", "kubernetes_server": "kubernetes",
}
#: a test parameter naming a server backend (e.g. ``backend="etcd"``) marks the test as using it
RESOURCE_PARAMS = {"zk": "zookeeper", "zookeeper": "zookeeper", "etcd": "etcd", "s3": "s3", "kafka": "kafka",
                   "k8s": "kubernetes"}
#: tier markers from the longest-running tests to the shortest, the order modules are handed to workers in
HEAVIEST_FIRST = ["cluster", "venv", "spark", "pulsar", "kafka", "server", "kubernetes", "chromium", "zookeeper",
                  "etcd", "s3"]
#: fixtures one xdist worker should own for the whole run: every test using one goes to that worker
SHARED_GROUPS = {"spark_cluster": "spark-cluster", "zk_ensemble": "zk-ensemble", "etcd_cluster": "etcd-cluster",
                 "kafka_cluster": "kafka-cluster", "pulsar": "pulsar", "kubernetes_server": "kubernetes"}
#: a test parameter naming a backend whose server is one of SHARED_GROUPS (the fixture it reaches through BACKENDS)
SHARED_PARAMS = {"k8s": "kubernetes_server"}


def _shared_fixtures(item: pytest.Item) -> set[str]:
    """The SHARED_GROUPS fixtures ``item`` uses: by name, or through a backend parameter (SHARED_PARAMS)."""
    names = SHARED_GROUPS.keys() & set(item.fixturenames)
    return names | {SHARED_PARAMS[v] for v in _param_values(item) if isinstance(v, str) and v in SHARED_PARAMS}


def pytest_configure(config: pytest.Config) -> None:
    for marker in sorted(set(RESOURCES.values())):
        config.addinivalue_line("markers", f"{marker}: uses {marker} (set from the test's fixtures)")
    config.addinivalue_line("markers", "fast: uses nothing outside the test process (scripts/test --fast)")
    config.pluginmanager.register(_TEARDOWN_CLOCK, "statekeep-teardown-clock")


def _param_values(item: pytest.Item) -> list[object]:
    callspec = getattr(item, "callspec", None)
    values: list[object] = []
    for value in (callspec.params.values() if callspec else ()):
        for one in value if isinstance(value, tuple) else (value,):
            values.extend(one.split("-") if isinstance(one, str) else (one,))  # "metadata-zk" names zk too
    return values


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's hook, which reads the xdist_group markers set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = set(item.fixturenames)
        used = {RESOURCES[n] for n in names & RESOURCES.keys()}
        used |= {RESOURCE_PARAMS[v] for v in _param_values(item) if isinstance(v, str) and v in RESOURCE_PARAMS}
        for marker in sorted(used):
            item.add_marker(marker)
        if not used:
            item.add_marker("fast")
        group = next((SHARED_GROUPS[n] for n in sorted(_shared_fixtures(item))), None)
        if group is None and used:
            # a heavy fixture defined in the test's module and wider than a test: its tests stay together
            defs = getattr(item, "_fixtureinfo").name2fixturedefs
            if any(d.scope != "function" and d.baseid.endswith(".py") for n in names for d in defs.get(n, ())):
                group = item.module.__name__ if item.module else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # heaviest modules first (longest work first keeps the parallel run from ending on one long test); a
    # module's tests stay together and in order, so its module-wide fixtures start once
    rank: dict[str, tuple[int, int]] = {}  # module -> (its heaviest tier, its first test's position)
    for i, item in enumerate(items):
        module = item.nodeid.split("::")[0]
        here = min((HEAVIEST_FIRST.index(m.name) for m in item.iter_markers() if m.name in HEAVIEST_FIRST),
                   default=len(HEAVIEST_FIRST))
        rank[module] = (min(here, rank[module][0]), rank[module][1]) if module in rank else (here, i)
    items.sort(key=lambda item: rank[item.nodeid.split("::")[0]])


#: tests xdist should have grouped and did not (see pytest_collection_finish): each fails saying why
_UNGROUPED: set[str] = set()


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker with ``--dist loadgroup``: check that xdist did group (it suffixes the node ids of
    grouped tests with ``@group``; pytest 9 with xdist 3.8 silently does not, and every worker then starts
    its own Spark cluster and ensemble)."""
    if getattr(session.config.option, "loadgroup", False):
        _UNGROUPED.update(item.nodeid for item in session.items
                          if item.get_closest_marker("xdist_group") and "@" not in item.nodeid)
    for item in session.items:  # every test of a group runs on the group's worker: it counts them all
        names = _shared_fixtures(item)
        if names:
            _SHARED_OF[item.nodeid] = names
            _SHARED_LEFT.update(names)


#: the servers of ``SHARED_GROUPS`` fixtures running in this process, by fixture name; the tests using each that
#: have not ended; and each test's shared fixtures. A group's worker stops its servers after the group's last test
#: rather than at the end of the run: idle, a Kafka cluster, an ensemble or a Spark cluster take a core's tenth
_SHARED_LIVE: dict[str, Any] = {}
_SHARED_LEFT: Counter[str] = Counter()
_SHARED_OF: dict[str, set[str]] = {}


def _shared(name: str, server: Any) -> Any:
    """``server`` (the ``SHARED_GROUPS`` fixture ``name``'s), stopped after the last test that uses it."""
    _SHARED_LIVE[name] = server
    return server


def pytest_runtest_logfinish(nodeid: str, location: tuple) -> None:
    """After a test and its teardown: stop the shared servers no test left in the run uses (their fixtures' own
    teardown at the end of the run then finds them stopped: each ``stop()`` is idempotent)."""
    for name in _SHARED_OF.get(nodeid, ()):
        _SHARED_LEFT[name] -= 1
        if _SHARED_LEFT[name] == 0 and name in _SHARED_LIVE:
            _SHARED_LIVE.pop(name).stop()


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures end (a server it started must still be there)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Close the executor-side state stores a test opened in this process (the runtime's cache): an executor
    keeps them for its life, but a worker running test after test collected their sessions and threads (300
    etcd event loops once, which starved every test after them)."""
    _TEARDOWN_CLOCK.start(item)
    registry = sys.modules.get("statekeep.state.registry")
    if registry is not None:
        registry.close_cached_state_stores()


class _TeardownClock:
    """Names, in its test's teardown report, a fixture whose teardown took over ``SLOW_TEARDOWN`` s, so the run's
    summary says which server or session a slow teardown waited for (a test's duration cannot). A plugin of its
    own: the session-scoped fixtures' finalizers call only the hooks of plugins registered for the whole run."""

    def __init__(self) -> None:
        self.item: pytest.Item | None = None
        self.since = 0.0

    def start(self, item: pytest.Item) -> None:
        self.item, self.since = item, time.monotonic()

    def pytest_fixture_post_finalizer(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> None:
        now, since = time.monotonic(), self.since
        self.since = now  # a fixture's teardown time: the gap since the one before it ended
        if self.item is not None and now - since > SLOW_TEARDOWN:
            self.item.user_properties.append(
                ("slow_teardown", f"{fixturedef.argname} ({fixturedef.scope}) {now - since:.0f}s"))


SLOW_TEARDOWN = 5.0
_TEARDOWN_CLOCK = _TeardownClock()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """List the slow fixture teardowns (see ``_TeardownClock``) after the slowest tests."""
    slow = [(report.nodeid, value) for reports in terminalreporter.stats.values() for report in reports
            if getattr(report, "when", None) == "teardown"
            for name, value in getattr(report, "user_properties", ()) if name == "slow_teardown"]
    if slow:
        terminalreporter.write_sep("=", f"fixture teardowns over {SLOW_TEARDOWN:.0f} s")
        for nodeid, value in slow:
            terminalreporter.write_line(f"{value}  after {nodeid}")


class _UndeclaredResource(Exception):
    pass


@pytest.fixture(autouse=True)
def _fast_tier_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``fast`` test may not start a server, a server process or Spark: it must ask for the fixture. A test
    xdist failed to group fails (it would start a second copy of its group's servers)."""
    if request.node.nodeid in _UNGROUPED:
        pytest.fail("pytest-xdist did not keep this test's xdist_group on one worker: a pytest/pytest-xdist "
                    "version pair that loses the groups (see pyproject.toml's test extra)", pytrace=False)
    if request.node.get_closest_marker("fast") is None:
        return

    def refuse(what: str, fixture: str) -> Callable[..., NoReturn]:
        def refused(*args: object, **kwargs: object) -> NoReturn:
            raise _UndeclaredResource(f"{request.node.nodeid} starts {what} without asking for the {fixture!r} "
                                      "fixture: ask for it, so the test leaves the fast tier")
        return refused

    from statekeep.testing import servers

    # a Kafka node's launch formats its storage first; a Pulsar standalone's sets its environment
    for cls in (servers.Server, servers.KafkaServer, servers.PulsarServer):
        monkeypatch.setattr(cls, "launch", refuse("a server (ZooKeeper, etcd, Kafka, Pulsar or S3)",
                                                  "zk_server, etcd_server, kafka, start_zookeeper, start_etcd, "
                                                  "start_kafka, kafka_cluster, pulsar or kubernetes_server"))
    monkeypatch.setattr("support.server_process.ServerProcess.__init__", refuse("statekeep standalone",
                                                                                 "server_process"))
    # Spark in this process, and in any process it starts (no spark-submit under this SPARK_HOME)
    monkeypatch.setenv("SPARK_HOME", "/nonexistent/fast-tier-tests-ask-for-the-spark-fixture")
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse("Spark", "spark"))


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


def _k8s_url(request: pytest.FixtureRequest, tmp_path) -> str:
    server = request.getfixturevalue("kubernetes_server")  # it sets $KUBECONFIG: the URL needs no query
    return f"k8s://{server.namespace}/t{uuid.uuid4().hex[:12]}"


BACKENDS: dict[str, Callable[[pytest.FixtureRequest, object], str]] = {
    "memory": _memory_url,
    "local": _local_url,
    "zk": _zk_url,
    "etcd": _etcd_url,
    "k8s": _k8s_url,
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
#: one Kafka broker (KRaft, combined broker and controller) per xdist worker, shared by every test that asks
#: for it: ``kafka.address`` is the bootstrap address; each test makes topics of its own (uuid names) with
#: ``kafka.create_topic(name, partitions)``; a test that kills a broker asks for ``start_kafka`` instead
kafka = _server_fixture("kafka")


def _dedicated_server_fixture(kind: str):
    @pytest.fixture(scope="session")
    def start():
        """Starts a server of its own, for a test that kills it; the caller stops it."""
        from statekeep.testing import servers

        return lambda: _start_or_skip(kind, lambda: servers.start(kind))

    return start


start_zookeeper = _dedicated_server_fixture("zookeeper")
start_etcd = _dedicated_server_fixture("etcd")


@pytest.fixture
def start_kafka():
    """``start_kafka(settings=None)`` starts a Kafka broker of its own (``settings``: server.properties entries,
    e.g. a small ``message.max.bytes``), for a test that kills it or needs other settings; each is stopped when
    the test ends (an idle broker left running costs every later test a share of a core)."""
    from statekeep.testing import servers

    started: list = []

    def start(settings=None):
        server = _start_or_skip("kafka", lambda: servers.start_kafka(settings))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


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
def server_process() -> type:
    """The class that runs ``statekeep standalone`` as a process of its own
    (:class:`support.server_process.ServerProcess`): a test asking for it is in the ``server`` tier."""
    need("fastapi")
    from support.server_process import ServerProcess

    return ServerProcess


@pytest.fixture(scope="session")
def zk_ensemble():
    """Three ZooKeeper servers in one ensemble on loopback (statekeep.testing.servers.ZooKeeperEnsemble), started when
    a test first asks for it, stopped at the end of the run. ``zk_ensemble.url("/chroot")`` is a zk:// URL
    listing all three. A test that kills servers starts them again before it ends (``start_all()``)."""
    from statekeep.testing import servers

    ensemble = _shared("zk_ensemble", _start_or_skip("zookeeper", lambda: servers.start_ensemble(3)))
    yield ensemble
    ensemble.stop()


@pytest.fixture(scope="session")
def etcd_cluster():
    """Three etcd members in one cluster on loopback (statekeep.testing.servers.EtcdCluster, the shape of
    ``zk_ensemble``), started when a test first asks for it, stopped at the end of the run.
    ``etcd_cluster.url("/prefix")`` is an etcd:// URL listing all three. A test that kills members starts
    them again before it ends (``restart(i)``, ``start_all()``)."""
    from statekeep.testing import servers

    cluster = _shared("etcd_cluster", _start_or_skip("etcd", lambda: servers.start_etcd_cluster(3)))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def kubernetes_server():
    """A Kubernetes API server (kube-apiserver over an etcd of its own, statekeep.testing.servers.KubernetesServer)
    on loopback, started when a test first asks for it (directly, or through a ``k8s`` backend parameter), shared
    by the run (its tests go to one worker), stopped after the last of them. ``store_url(prefix)`` is a ``k8s://``
    URL of a fresh prefix in its namespace; ``kubeconfig``, ``url``, ``token``, ``ca_file``. While it runs,
    ``$KUBECONFIG`` names its kubeconfig, in this process and those started from here, so ``k8s://NAMESPACE/PREFIX``
    reaches it. A test that kills it or its etcd starts them again before it ends (``restart()``,
    ``restart_etcd()``)."""
    from statekeep.testing import servers

    server = _shared("kubernetes_server", _start_or_skip("kube-apiserver", lambda: servers.start("kubernetes")))
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(server.kubeconfig)
    yield server
    if saved is None:
        os.environ.pop("KUBECONFIG", None)
    else:
        os.environ["KUBECONFIG"] = saved
    server.stop()


@pytest.fixture(scope="session")
def kafka_cluster():
    """Three combined Kafka nodes in one cluster on loopback (statekeep.testing.servers.KafkaCluster: a
    controller quorum of all three, replication 3, min ISR 2), started when a test first asks for it, shared
    by the run (its tests go to one worker), stopped at the end. ``kafka_cluster.bootstrap`` lists all three;
    ``leader(topic, partition)``, ``kill(i)``, ``restart(i)``, ``stop_all_for(s)``. A test that kills nodes
    starts them again before it ends (``restart(i)``, ``start_all()``)."""
    from statekeep.testing import servers

    cluster = _shared("kafka_cluster", _start_or_skip("kafka", lambda: servers.start_kafka_cluster(3)))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def pulsar(tmp_path_factory):
    """One Pulsar standalone for the run (broker, bookie, functions worker with the thread runtime; broker
    deduplication on; topics only created explicitly: ``support.pulsar.create_topic``), started when a test first
    asks for it, its tests on one worker, stopped after the last of them. Its functions worker keeps function
    state in a statekeep server of its own through statekeep's state provider (java/pulsar-state-provider):
    ``pulsar.broker`` (:class:`statekeep.testing.servers.PulsarServer`: ``service_url``, ``web_url``, ``kill()``,
    ``restart()``), ``pulsar.statekeep`` (a :class:`support.server_process.ServerProcess`). Tests use topic and
    function names of their own. A test that restarts the broker leaves it running."""
    need("pulsar")
    need("fastapi")
    from statekeep.testing import servers
    from support.pulsar import PulsarWithState
    from support.server_process import ServerProcess

    state = ServerProcess(tmp_path_factory.mktemp("pulsar-statekeep") / "data")
    try:
        broker = _start_or_skip("pulsar", lambda: servers.start_pulsar(state_url=state.url))
    except BaseException:
        state.stop()
        raise
    both = _shared("pulsar", PulsarWithState(broker, state))
    yield both
    both.stop()


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test run (a JVM costs seconds and half a GB)."""
    need("pyspark")
    from statekeep.functions.driver.session import spark_session

    session = spark_session("local[2,4]")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_env() -> dict[str, str]:
    """The environment a Spark driver process started by a test needs (``{**os.environ, **spark_env}``)."""
    need("pyspark")
    from statekeep.functions.driver.sparkpython import spark_python

    return {"PYSPARK_PYTHON": spark_python(), "SPARK_LOCAL_IP": "127.0.0.1"}


@pytest.fixture(scope="session")
def spark_cluster(s3_server):
    """A Spark standalone master and two workers (1 core, 1 GiB each) on loopback, started from
    PySpark's own spark-class when a test first asks for it, shared by the whole run, stopped by PID.
    A test that kills a worker restarts it before it ends (``spark_cluster.restart_worker(i)``). Started
    after the S3 server, so executors inherit its environment and reach it as any S3 endpoint."""
    from statekeep.testing import servers
    from statekeep.testing.spark_cluster import SparkCluster

    try:
        cluster = _shared("spark_cluster", SparkCluster.start(workers=2, cores=1, memory="1g"))
    except servers.ServerNotInstalled as e:
        missing(f"no Spark cluster here ({e})")
    yield cluster
    cluster.stop()
