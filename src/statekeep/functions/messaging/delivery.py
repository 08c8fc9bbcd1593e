"""What a (batch, partition) sends to brokers after its state commit, whichever the broker: one interface
(:class:`BatchOutputs`: :meth:`~BatchOutputs.add` records, :meth:`~BatchOutputs.keep` them before the state commit,
:meth:`~BatchOutputs.deliver` them after it; :func:`deliver_kept` for a replay that finds the state committed) with
one implementation per kind of broker in :data:`statekeep.functions.config.locations.BROKER_SCHEMES`: Kafka's
transactions (:mod:`statekeep.functions.messaging.kafka`) and Pulsar's deduplicated producers
(:mod:`statekeep.functions.messaging.pulsartopics`). Their exactly-once argument is the same order: kept, state
committed, then delivered; a replay finds the records delivered or delivers them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from statekeep.functions.config.locations import broker_of

if TYPE_CHECKING:
    from statekeep.functions.config.spec import ExecutorSpec


def _kind(kind: str) -> Any:
    """The module of a kind of broker (imported when a function names one of its topics)."""
    if kind == "kafka":
        from statekeep.functions.messaging import kafka

        return kafka
    from statekeep.functions.messaging import pulsartopics

    return pulsartopics


class BatchOutputs:
    """A function's records for brokers of one (batch, partition) (``batch`` None: a trigger's one record), each
    kind's kept and delivered by its own implementation."""

    def __init__(self, spec: ExecutorSpec, batch: tuple[int, int] | None) -> None:
        self.spec, self.batch = spec, batch
        self.parts: dict[str, Any] = {}

    def _part(self, name: str) -> Any:
        kind = broker_of(name)
        assert kind is not None  # the caller routes only broker names here
        if kind not in self.parts:
            module = _kind(kind)
            self.parts[kind] = (module.BatchOutputs if kind == "kafka" else module.PulsarOutputs)(self.spec, self.batch)
        return self.parts[kind]

    def add(self, name: str, records: Any) -> None:
        """Records (message records, a list or a pyarrow Table of rows) for the broker topic ``name``."""
        self._part(name).add(name, records)

    def add_records(self, name: str, keys: list[bytes], values: list[bytes | None]) -> None:
        """Raw records (a changelog's) for the broker topic ``name``."""
        self._part(name).add_records(name, keys, values)

    def keep(self) -> None:
        """Check every kind's records (else the error, nothing delivered) and keep them for a replay."""
        for part in self.parts.values():
            part.keep()

    def deliver(self, applied: bool) -> None:
        """After the state commit: every kind's records (``applied`` False: a replay's, which may be there)."""
        for part in self.parts.values():
            part.deliver(applied)


def deliver_kept(spec: ExecutorSpec, batch: int, partition: int) -> None:
    """A replay whose state was committed: deliver what (batch, partition) kept for each kind of broker (nothing
    kept: nothing to do), unless the broker has it. Every kind is looked at: a ``publish`` target is known only
    to the run that published."""
    for kind in ("kafka", "pulsar"):
        _kind(kind).deliver_kept(spec, batch, partition)


def produce(name: str, records: list[dict[str, Any]]) -> None:
    """Write message records to the broker topic ``name`` (``statekeep topics produce``): Kafka's in one transaction,
    Pulsar's routed by key; checked first (the topic exists, sizes within its limit)."""
    kind = broker_of(name)
    assert kind is not None  # the caller routes only broker names here
    _kind(kind).produce(name, records)


def consume(name: str, limit: int = 0) -> Iterator[dict[str, Any]]:
    """The messages of the broker topic ``name`` from its beginning to its end when called (``limit`` > 0: at most
    that many), as message records with where each is (Kafka: ``partition``, ``offset``; Pulsar: ``partition``,
    ``messageId``)."""
    kind = broker_of(name)
    assert kind is not None  # the caller routes only broker names here
    return _kind(kind).consume(name, limit)  # type: ignore[no-any-return]
