"""Writing migration records into a store, resumably.

Resumption: the copy keeps a journal at :data:`JOURNAL_PATH` on the target,
``{"source": ID, "done": N, "startedMs": T, "merge": BOOL}``: the first N records of the (deterministic) record
stream are committed. Tree nodes are written in ``multi`` batches that carry the journal update in
the same atomic write, so after a SIGKILL the journal is exact; a sequence counter or a function's
state is committed first and then recorded, and redoing it is harmless (raising a counter is a max,
and ``replace_state`` writes only what differs). A later run with the same source skips the first N
records. The journal is removed once the copy is verified.

Target rules: a target whose tree is empty is written; one holding the journal of an unfinished copy
from the same source is resumed; anything else raises :class:`TargetNotEmptyError` unless ``force``,
which merges: the source's keys overwrite the target's, other target keys stay, and each copied
function's state becomes exactly the source's. Versions are not carried (each backend numbers its own
writes); each function's changelog on the target starts with the migrated state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from statekeep import jsonrecords
from statekeep.errors import CorruptRecordError, StatekeepError
from statekeep.metadata import Put
from statekeep.metadata.base import Closing, MetadataStore
from statekeep.migrate.records import Entry, Function, Node, Peekable, Record, Sequence
from statekeep.migrate.source import JOURNAL_PATH, SUFFIX
from statekeep.state.base import StateEntry
from statekeep.state.catalog import function_provider
from statekeep.state.registry import open_provider
from statekeep.validate import check_int

# keys and bytes per multi. etcd allows 128 operations per transaction: a created key costs two puts and
# its compares (its own and its parent's, parents being written before children), plus the journal's
BATCH_LIMITS = {"etcd": (50, 1 << 20), "zk": (500, 900 * 1024), "local": (5000, 32 << 20),
                "memory": (5000, 32 << 20)}


class MigrationError(StatekeepError):
    """A migration cannot start or finish; the message says why and what to do."""


class TargetNotEmptyError(MigrationError):
    """The target holds data that is not an unfinished copy from the same source."""


def read_journal(store: MetadataStore, *, strict: bool = True) -> dict[str, Any] | None:
    """The target's journal, None if there is none. One that is not a journal raises
    :class:`MigrationError` when ``strict``, else reads as a journal of no known source."""
    result = store.get(JOURNAL_PATH)
    if result is None:
        return None
    try:
        journal = jsonrecords.decode(result.value, JOURNAL_PATH, "migration journal")
        if isinstance(journal.get("done"), int):
            return journal
    except CorruptRecordError:
        pass
    if not strict:
        return {"source": None, "done": 0}
    raise MigrationError(f"{JOURNAL_PATH} on the target is not a migration journal; remove it or use --force")


def check_target(store: MetadataStore, source_id: str, force: bool) -> int:
    """How many records an earlier run committed (0: start afresh). Raises
    :class:`TargetNotEmptyError` as the module docstring says. Writes nothing."""
    journal = read_journal(store, strict=not force)
    if journal is not None and journal.get("source") == source_id:
        done: int = journal["done"]  # an int: read_journal checked it
        return done
    if journal is not None and not force:
        raise TargetNotEmptyError(f"the target holds an unfinished copy from {journal.get('source')!r}, not "
                                  f"{source_id!r}; finish that one, or use --force to merge this one into it")
    if not force and store.get_children("/"):
        raise TargetNotEmptyError("the target store is not empty (its root has keys); migrate into an empty "
                                  "store, or use --force to merge (source keys overwrite target keys)")
    return 0


class StoreSink(Closing):
    """Consumes a record stream into ``store`` (open, owned by the caller). ``merge``: the target held
    keys before this copy began (``force``), so keys are upserted rather than created."""

    def __init__(self, store: MetadataStore, source_id: str, *, merge: bool = False, batch_keys: int | None = None,
                 on_progress: Callable[[int], None] = lambda n: None) -> None:
        self.store = store
        self.merge = merge
        self.source_id = source_id
        check_int(batch_keys, "batch_keys", minimum=1, optional=True)
        keys, size = BATCH_LIMITS.get(store.scheme, BATCH_LIMITS["etcd"])
        self.batch_keys, self.batch_bytes = (batch_keys or keys), size
        self.on_progress = on_progress
        self.started_ms = int(time.time() * 1000)
        self.provider_name, config = function_provider(None, store)
        self._provider = open_provider(self.provider_name, config)
        self.counts = {"nodes": 0, "sequences": 0, "functions": 0, "entries": 0, "skipped": 0}

    def _journal(self, done: int) -> Put:
        return Put(JOURNAL_PATH, json.dumps({"source": self.source_id, "done": done,
                                             "startedMs": self.started_ms, "merge": self.merge}).encode())

    def consume(self, records: Iterator[Record], skip: int = 0) -> None:
        """Write every record after the first ``skip`` (those an earlier run committed)."""
        it = Peekable(records)
        index = 0
        while index < skip and it.next() is not None:  # committed earlier: read past them
            index += 1
        self.on_progress(index)
        if skip == 0:
            self.store.put(JOURNAL_PATH, self._journal(0).value)
        batch: list[Put] = []
        size = 0
        while (record := it.next()) is not None:
            index += 1
            if isinstance(record, Node):
                item = len(record.value) + len(record.path) + 64
                if batch and size + item > self.batch_bytes:  # a request must stay within the backend's limit
                    self._flush(batch, index - 1)
                    batch, size = [], 0
                # a create where the key cannot exist yet (cheaper than an upsert on ZooKeeper and etcd): in
                # an empty target every key after the journal's checkpoint is unwritten, the journal's
                # own ancestors aside; merging into a non-empty one (force) needs upserts
                create = not self.merge and not JOURNAL_PATH.startswith(record.path + "/")
                batch.append(Put(record.path, record.value, -1 if create else None))
                size += item
                self.counts["nodes"] += 1
                if len(batch) >= self.batch_keys or size >= self.batch_bytes:
                    self._flush(batch, index)
                    batch, size = [], 0
                continue
            if batch:  # nodes before anything else are committed first (parents before counters)
                self._flush(batch, index - 1)
                batch, size = [], 0
            if isinstance(record, Sequence):
                last = record.last
                if self.merge:  # the target's own children may carry higher numbers than the source's
                    last = max([last] + [int(m.group(1)) for name in self.store.get_children(record.parent)
                                         if (m := SUFFIX.search(name))])
                self.store.raise_sequence(record.parent, last)
                self.counts["sequences"] += 1
            elif isinstance(record, Function):
                self.counts["functions"] += 1
                if record.state == "copied":
                    index += self._copy_state(record, it, index)
            elif isinstance(record, Entry):
                raise MigrationError(f"state key {record.key!r} comes before any function record")
            else:
                self.counts["skipped"] += 1
            self.store.put(JOURNAL_PATH, self._journal(index).value)
            self.on_progress(index)
        if batch:
            self._flush(batch, index)

    def _flush(self, batch: list[Put], done: int) -> None:
        self.store.multi(batch + [self._journal(done)])
        self.on_progress(done)

    def _copy_state(self, function: Function, it: Peekable, base: int) -> int:
        """Make the function's state on the target exactly the entries that follow; returns their number."""
        taken = 0

        def entries() -> Iterator[StateEntry]:
            nonlocal taken
            for taken, entry in enumerate(it.entries(), 1):
                if taken % 1000 == 0:
                    self.on_progress(base + taken)
                yield entry

        state = self._provider.get_state_store(function.tenant, function.namespace, function.name)
        state.replace_state(entries())
        self.counts["entries"] += taken
        return taken

    def finish(self) -> None:
        """Remove the journal: the copy is complete and verified."""
        self.store.delete_recursive(JOURNAL_PATH)

    def close(self) -> None:
        self._provider.close()

