"""The end of a run: :class:`Checkpoint`, the one place that orders a (batch, partition)'s state commit and its
outputs (the role of Quix Streams' ``Checkpoint``).

The order, and why it gives exactly once:

1. **prepare** the keyed-state transaction: its views (time state, windows) are flushed into its cache and its
   changes fixed; a KIP-813 changelog's records are made from them.
2. **keep** every output: files are written (a replay of the (batch, partition) writes the same files again), a
   broker's records (outputs, ``publish``, log records, dead letters, changelog records) are kept on local disk
   under the (batch, partition) (:class:`~statekeep.functions.messaging.delivery.BatchOutputs`).
3. **commit** the transaction: its changes and the marker ``"{batch}-{partition}"`` in one atomic write. A replay
   whose marker exists commits nothing and delivers what it kept (see the runtime).
4. **hand over** the kept broker records to delivery, which sends them in batch order, behind the task for Kafka
   (:mod:`statekeep.functions.messaging.delivery`); a record kept by a run whose commit did not happen is never
   delivered ahead of its replay.

A crash between any two steps leaves nothing twice: what step 2 kept is rewritten by the replay, what step 3
committed is skipped by it, and step 4 is caught up by the partition's next batch or the run's end.
"""

from __future__ import annotations

from typing import Any

from statekeep.functions.config.locations import is_broker
from statekeep.functions.executor.path import RecordPath
from statekeep.functions.messaging.delivery import BatchOutputs
from statekeep.functions.messaging.kafkarecords import changelog_records
from statekeep.functions.messaging.messages import output_sink, write_targets
from statekeep.state.schemas import record_schemas
from statekeep.state.transaction import KeyedTransaction


class Checkpoint:
    """One run's end, in the order of the module docstring: ``path`` (its records run, its transaction open) with
    its ``output`` (records or a pyarrow Table; None: none) and its published and log ``targets``. A trigger's
    run (a batch id that is not an int) has files of its own and no marker."""

    def __init__(self, path: RecordPath, output: Any, targets: dict[tuple[str, str], list[Any]]) -> None:
        self.path, self.output, self.targets = path, output, targets
        self.txn: KeyedTransaction = path.txn
        self.batch = (path.batch_id, path.partition) if isinstance(path.batch_id, int) else None
        self.brokers = BatchOutputs(path.spec, self.batch)

    def commit(self) -> bool:
        """Run the four steps. Returns False, having committed nothing, when the marker was applied already;
        raises as :meth:`KeyedTransaction.prepare` and :meth:`KeyedTransaction.commit` do (kept files then stay,
        to be rewritten by a replay)."""
        spec = self.path.spec
        self._record_schemas()  # before the values: none is stored under a schema not recorded
        changes = self.txn.prepare(changes=bool(spec.changelog_topic))
        self._keep()
        if spec.changelog_topic and changes is not None:  # KIP-813: in the same Kafka transaction as the outputs
            self.brokers.add_records(spec.changelog_topic, *changelog_records(changes, spec.changelog_format))
        self.brokers.keep()
        applied = self.txn.commit(None if self.batch is None else f"{self.batch[0]}-{self.batch[1]}")
        self.brokers.deliver(applied)
        return applied

    def _record_schemas(self) -> None:
        path, spec = self.path, self.path.spec
        context = path.context
        recorded = context.recorded_schemas or {}
        if path.registry is not None and any(recorded.get(k) != v for k, v in context.state_schemas.items()):
            record_schemas(path.registry(), spec.tenant, spec.namespace, spec.name, context.state_schemas)

    def _write(self, sink: Any, records: Any) -> None:
        if self.batch is None:
            sink.write_new(records, str(self.path.batch_id))
        else:
            sink.write(*self.batch, records)

    def _keep(self) -> None:
        """Step 2's files, and the broker records beside them (kept by ``brokers.keep()``)."""
        spec, brokers = self.path.spec, self.brokers
        if self.output is not None:
            if is_broker(spec.output):
                brokers.add(str(spec.output), self.output)
            else:
                self._write(output_sink(spec, spec.output), self.output)
        files = {}
        for (name, kind), records in self.targets.items():
            if is_broker(name):
                brokers.add(name, records)
            else:
                files[(name, kind)] = records
        if self.batch is None:
            write_targets(spec, files, origin=str(self.path.batch_id))
        else:
            write_targets(spec, files, *self.batch)
        dead = self.path.dead
        if dead:
            if is_broker(spec.dead_letter):
                brokers.add(str(spec.dead_letter), dead)
            else:
                self._write(output_sink(spec, spec.dead_letter, "dead"), dead)
