"""statekeep.kafka: its admin calls against a real broker (the session's ``kafka``), and what needs none:
bad input is refused before anything is sent, confluent-kafka's errors map onto statekeep's tree, an
unreachable bootstrap raises in bounded time, and without confluent-kafka the error names the extra."""

from __future__ import annotations

import sys
import uuid

import pytest
from conftest import need

from statekeep.errors import (AlreadyExistsError, InvalidArgumentError, MissingDependencyError, NotFoundError,
                              StatekeepError, StoreUnavailableError, ValueTooLargeError)
from statekeep.kafka import admin, client_config, translate

UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1


def _topic() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


def test_topics_are_created_described_and_deleted(kafka):
    bootstrap, name = kafka.address, _topic()
    assert admin.wait_reachable(bootstrap) == [1]
    admin.create_topic(bootstrap, name, partitions=3, config={"cleanup.policy": "compact"})
    assert admin.describe(bootstrap, name) == {p: (1, [1], [1]) for p in range(3)}  # each has its leader
    admin.create_topic(bootstrap, name, partitions=3)  # exists as asked: kept
    with pytest.raises(AlreadyExistsError, match=f"{name}.*exists with 3 partitions of replication 1, not 2"):
        admin.create_topic(bootstrap, name, partitions=2)
    assert len(admin.describe(bootstrap, name)) == 3  # unchanged
    admin.delete_topic(bootstrap, name)
    with pytest.raises(NotFoundError, match=f"no Kafka topic '{name}'"):
        admin.describe(bootstrap, name)
    with pytest.raises(NotFoundError, match=f"no Kafka topic '{name}'") as deleted:
        admin.delete_topic(bootstrap, name)
    assert deleted.value.__cause__ is not None  # the broker's own error, chained


def test_what_the_broker_refuses_creates_nothing(kafka):
    bootstrap, name = kafka.address, _topic()
    with pytest.raises(InvalidArgumentError, match="INVALID_REPLICATION_FACTOR") as e:
        admin.create_topic(bootstrap, name, replication=3)  # one broker
    assert type(e.value.__cause__).__name__ == "KafkaException"
    with pytest.raises(InvalidArgumentError, match="INVALID_CONFIG.*bogus.setting"):
        admin.create_topic(bootstrap, name, config={"bogus.setting": "1"})
    with pytest.raises(InvalidArgumentError, match="cleanup.policy"):
        admin.create_topic(bootstrap, name, config={"cleanup.policy": "sometimes"})
    with pytest.raises(NotFoundError):
        admin.describe(bootstrap, name)


@pytest.mark.parametrize("call", [
    lambda: admin.create_topic("127.0.0.1:1", "has space"),
    lambda: admin.create_topic("127.0.0.1:1", "x" * 250),
    lambda: admin.create_topic("127.0.0.1:1", ".."),
    lambda: admin.create_topic("127.0.0.1:1", "ok", partitions=0),
    lambda: admin.create_topic("127.0.0.1:1", "ok", partitions=True),
    lambda: admin.create_topic("127.0.0.1:1", "ok", replication=0),
    lambda: admin.create_topic("127.0.0.1:1", "ok", config={"retention.ms": 1000}),
    lambda: admin.create_topic("127.0.0.1:1", "ok", timeout=0),
    lambda: admin.describe("127.0.0.1", "ok"),
    lambda: admin.describe("kafka://127.0.0.1:9092", "ok"),
    lambda: admin.delete_topic("127.0.0.1:1", ""),
    lambda: client_config(None),
], ids=["space", "too-long", "dots", "no-partitions", "bool-partitions", "no-replicas", "int-config", "no-time",
        "no-port", "url", "empty-name", "no-bootstrap"])
def test_bad_input_is_refused_before_anything_is_sent(call):
    need("confluent_kafka")
    with pytest.raises(InvalidArgumentError):  # an attempt to reach port 1 would be StoreUnavailableError
        call()


@pytest.mark.parametrize("call", [
    lambda: admin.wait_reachable(UNREACHABLE, timeout=1.0),
    lambda: admin.create_topic(UNREACHABLE, "t", timeout=1.0),
    lambda: admin.describe(UNREACHABLE, "t", timeout=1.0),
    lambda: admin.delete_topic(UNREACHABLE, "t", timeout=1.0),
], ids=["wait_reachable", "create_topic", "describe", "delete_topic"])
def test_an_unreachable_bootstrap_raises_store_unavailable(call):
    need("confluent_kafka")
    with pytest.raises(StoreUnavailableError, match=f"reaching Kafka at {UNREACHABLE}") as e:
        call()
    assert type(e.value.__cause__).__name__ == "KafkaException"


def test_confluent_errors_map_onto_statekeeps_tree():
    kafka = need("confluent_kafka")
    for code, expected in ((kafka.KafkaError._TRANSPORT, StoreUnavailableError),
                           (kafka.KafkaError.NOT_ENOUGH_REPLICAS, StoreUnavailableError),
                           (kafka.KafkaError.UNKNOWN_TOPIC_OR_PART, NotFoundError),
                           (kafka.KafkaError.TOPIC_ALREADY_EXISTS, AlreadyExistsError),
                           (kafka.KafkaError.INVALID_REPLICATION_FACTOR, InvalidArgumentError),
                           (kafka.KafkaError.MSG_SIZE_TOO_LARGE, ValueTooLargeError),
                           (kafka.KafkaError.INVALID_PRODUCER_EPOCH, StatekeepError)):
        error = translate(kafka.KafkaException(kafka.KafkaError(code)), "doing x")
        assert type(error) is expected, (code, error)
        assert str(error).startswith(f"doing x: {kafka.KafkaError(code).name()}: ")


def test_without_confluent_kafka_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)  # what an interpreter without it imports
    with pytest.raises(MissingDependencyError, match=r"pip install 'statekeep\[kafka\]'"):
        admin.wait_reachable(UNREACHABLE)
