"""Kafka topics and reachability, through confluent-kafka's AdminClient. Every call is bounded by its
``timeout`` (seconds): an unreachable bootstrap raises StoreUnavailableError by then, never hangs.

    wait_reachable("127.0.0.1:9092", timeout=10)           # the broker ids that answer
    create_topic(bootstrap, "orders", partitions=3, replication=3, config={"cleanup.policy": "compact"})
    describe(bootstrap, "orders")                            # {0: (leader, [replicas], [isr]), 1: ...}
    delete_topic(bootstrap, "orders")

Errors (statekeep.errors, the confluent error chained): StoreUnavailableError (unreachable, no leader in
time), NotFoundError (no such topic), AlreadyExistsError (a topic of that name with other partitions or
replication), InvalidArgumentError (a bad name, count or config: nothing is created).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from statekeep.errors import AlreadyExistsError, InvalidArgumentError, NotFoundError, StoreUnavailableError
from statekeep.kafka import client_config, confluent, error_name, translate
from statekeep.validate import check_int, check_number

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin._metadata import ClusterMetadata

#: what :func:`describe` gives per partition: (leader broker id, -1 while none; replicas; in-sync replicas)
PartitionInfo = tuple[int, list[int], list[int]]

_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
_POLL_S = 0.05


def check_topic(name: object) -> str:
    """``name`` if Kafka accepts it as a topic name (1-249 of ``a-zA-Z0-9._-``, not ``.`` or ``..``);
    InvalidArgumentError otherwise."""
    if not isinstance(name, str) or not _TOPIC.fullmatch(name) or name in (".", ".."):
        raise InvalidArgumentError(f"a Kafka topic name is 1-249 characters of a-z A-Z 0-9 . _ -, got {name!r}")
    return name


def admin_client(bootstrap: str, **settings: Any) -> AdminClient:
    """A confluent-kafka AdminClient of ``bootstrap`` with :func:`statekeep.kafka.client_config`'s bounded
    timeouts (``settings`` added). It connects lazily: an unreachable address fails at its first call. Its
    metadata requests never create a topic (librdkafka's admin client is a producer, which by default asks a
    broker with ``auto.create.topics.enable`` to create the topics it names: describe would create)."""
    admin: AdminClient = confluent().admin.AdminClient(
        client_config(bootstrap, **{"allow.auto.create.topics": False, **settings}))
    return admin


def _metadata(admin: AdminClient, bootstrap: str, timeout: float, topic: str | None = None) -> ClusterMetadata:
    try:
        metadata: ClusterMetadata = admin.list_topics(topic=topic, timeout=max(timeout, 0.1))
    except confluent().KafkaException as e:
        raise translate(e, f"reaching Kafka at {bootstrap}") from e
    return metadata


def wait_reachable(bootstrap: str, timeout: float = 10.0) -> list[int]:
    """Wait until a broker of ``bootstrap`` answers a metadata request; the ids of the brokers the cluster
    lists (sorted). StoreUnavailableError after ``timeout`` seconds."""
    timeout = check_number(timeout, "timeout", positive=True)
    metadata = _metadata(admin_client(bootstrap), bootstrap, timeout)
    return sorted(metadata.brokers)


def _partitions(admin: AdminClient, bootstrap: str, topic: str, timeout: float) -> dict[int, PartitionInfo]:
    metadata = _metadata(admin, bootstrap, timeout, topic)
    found = metadata.topics.get(topic)
    if found is None:
        raise NotFoundError(f"no Kafka topic {topic!r} on {bootstrap}")
    name = error_name(found.error)
    if name in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC"):
        raise NotFoundError(f"no Kafka topic {topic!r} on {bootstrap}")
    if name is not None and name != "LEADER_NOT_AVAILABLE":  # a topic being created: its partitions say more
        raise translate(confluent().KafkaException(found.error), f"describing topic {topic!r} on {bootstrap}")
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in (found.partitions or {}).values()}


def describe(bootstrap: str, topic: str, timeout: float = 10.0) -> dict[int, PartitionInfo]:
    """``{partition: (leader_node_id, [replica ids], [in-sync replica ids])}`` of ``topic`` as the cluster's
    metadata says now (leader -1: none elected). NotFoundError for an unknown topic."""
    check_topic(topic)
    timeout = check_number(timeout, "timeout", positive=True)
    return _partitions(admin_client(bootstrap), bootstrap, topic, timeout)


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication: int = 1,
                 config: dict[str, str] | None = None, timeout: float = 30.0) -> None:
    """Create topic ``name`` with ``partitions`` partitions of ``replication`` replicas and topic ``config``
    (Kafka's topic settings, e.g. ``{"cleanup.policy": "compact"}``), and wait until every partition has a
    leader, as every broker that answers sees it. A topic of that name with the same partitions and replication
    is kept as it is (create is idempotent); with others it is AlreadyExistsError. InvalidArgumentError for what
    the broker refuses (a replication above the live brokers, an unknown config), StoreUnavailableError after
    ``timeout``."""
    check_topic(name)
    check_int(partitions, "partitions", minimum=1)
    check_int(replication, "replication", minimum=1, maximum=32767)
    timeout = check_number(timeout, "timeout", positive=True)
    if config is not None and not (isinstance(config, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in config.items())):
        raise InvalidArgumentError(f"a topic's config must be a dict of str to str, got {config!r}")
    kafka = confluent()
    deadline = time.monotonic() + timeout
    admin = admin_client(bootstrap)
    _metadata(admin, bootstrap, timeout)  # unreachable: fail now, in bounded time
    what = f"creating Kafka topic {name!r} on {bootstrap}"
    while True:
        left = deadline - time.monotonic()
        topic = kafka.admin.NewTopic(name, num_partitions=partitions, replication_factor=replication,
                                     config=dict(config or {}))
        try:
            admin.create_topics([topic], operation_timeout=max(left, 0.1),
                                request_timeout=max(left, 0.1))[name].result()
            break
        except kafka.KafkaException as e:
            if error_name(e) == "TOPIC_ALREADY_EXISTS":
                _check_existing(admin, bootstrap, name, partitions, replication, deadline)
                break
            error = translate(e, what)
            if not isinstance(error, StoreUnavailableError) or time.monotonic() >= deadline:
                raise error from e
            time.sleep(_POLL_S)  # retriable (no controller yet, a broker restarting): again until the deadline
    _wait_leaders(admin, bootstrap, name, partitions, deadline)
    _wait_everywhere(admin, bootstrap, name, partitions, deadline)


def _wait_everywhere(admin: AdminClient, bootstrap: str, name: str, partitions: int, deadline: float) -> None:
    """Wait until every broker the cluster lists that answers lists the topic with its leaders: a broker learns of a
    new topic from the controller a little later than the one that answered first, and a client asking it then
    would find no such topic. A broker that does not answer within 2 s is left out (down: it catches up before
    it serves again)."""
    brokers = _metadata(admin, bootstrap, max(deadline - time.monotonic(), 0.1)).brokers.values()
    if len(brokers) < 2:
        return
    for broker in brokers:
        address = f"{broker.host}:{broker.port}"
        one = admin_client(address)
        try:
            _metadata(one, address, min(2.0, max(deadline - time.monotonic(), 0.1)))
        except StoreUnavailableError:
            continue
        _wait_leaders(one, address, name, partitions, deadline)


def _check_existing(admin: AdminClient, bootstrap: str, name: str, partitions: int, replication: int,
                    deadline: float) -> None:
    found = _partitions(admin, bootstrap, name, max(deadline - time.monotonic(), 0.1))
    replicas = {len(r) for _, r, _ in found.values()}
    if len(found) != partitions or replicas != {replication}:
        raise AlreadyExistsError(f"Kafka topic {name!r} on {bootstrap} exists with {len(found)} partitions of "
                                 f"replication {'/'.join(map(str, sorted(replicas))) or '?'}, not {partitions} "
                                 f"of replication {replication}")


def _wait_leaders(admin: AdminClient, bootstrap: str, name: str, partitions: int, deadline: float) -> None:
    while True:
        try:
            found = _partitions(admin, bootstrap, name, max(deadline - time.monotonic(), 0.1))
        except NotFoundError:  # created, not yet in the metadata this broker serves
            found = {}
        if len(found) == partitions and all(leader >= 0 for leader, _, _ in found.values()):
            return
        if time.monotonic() >= deadline:
            raise StoreUnavailableError(f"Kafka topic {name!r} on {bootstrap}: not every partition has a leader "
                                        f"in time ({found})")
        time.sleep(_POLL_S)


def delete_topic(bootstrap: str, name: str, timeout: float = 30.0) -> None:
    """Delete topic ``name`` and wait until the metadata no longer lists it. NotFoundError for an unknown
    topic, StoreUnavailableError after ``timeout``."""
    check_topic(name)
    timeout = check_number(timeout, "timeout", positive=True)
    kafka = confluent()
    deadline = time.monotonic() + timeout
    admin = admin_client(bootstrap)
    _metadata(admin, bootstrap, timeout)
    try:
        admin.delete_topics([name], operation_timeout=timeout, request_timeout=timeout)[name].result()
    except kafka.KafkaException as e:
        error = translate(e, f"deleting Kafka topic {name!r} on {bootstrap}")
        if isinstance(error, NotFoundError):
            raise NotFoundError(f"no Kafka topic {name!r} on {bootstrap}") from e
        raise error from e
    while True:
        try:
            _partitions(admin, bootstrap, name, max(deadline - time.monotonic(), 0.1))
        except NotFoundError:
            return
        if time.monotonic() >= deadline:
            raise StoreUnavailableError(f"Kafka topic {name!r} on {bootstrap}: still listed after deletion")
        time.sleep(_POLL_S)
