"""A function's state store, the contract (after Pulsar PIP-312): :class:`ReadableStateStore` and :class:`StateStore`.

Every provider guarantees, and ``tests/contract/test_state_contract.py`` checks:

- Keys are non-empty ``str`` (any Unicode, ``/`` and ``.`` included, at most
  :data:`statekeep.state.keys.MAX_SEGMENT` characters once encoded); values are ``bytes`` of at most
  :attr:`StateStore.max_value_size`. Otherwise :class:`InvalidArgumentError` or
  :class:`ValueTooLargeError`, and nothing is written.
- A key holds either bytes or a counter (``kind``); ``get`` of a counter returns its 8-byte signed
  big-endian form. ``incr`` is atomic across threads and processes, refuses a key holding bytes
  (:class:`InvalidArgumentError`) and never wraps (:class:`CounterOverflowError`).
- ``scan`` yields keys in code point order, from after ``start_after``, only those starting with ``prefix``.
- Versions (``StateEntry.version``) are 0 when a key is created and rise by one per change; a
  ``expected_version`` that does not match raises :class:`BadVersionError` (:class:`NotFoundError` if
  the key is absent, :class:`AlreadyExistsError` for ``-1`` when present) and writes nothing.
- Every mutation appends a changelog record in the same atomic write as the change (KIP-813).
  Offsets rise with commit order: a record is visible only once every record with a lower offset
  is (numbers may be skipped: compaction removes records, and some backends skip numbers).
- ``apply_batch`` is all or nothing and at most once per marker.
- What a provider can do beyond reading state is declared (:class:`Capability`, on the provider and
  its stores) and checked by callers; a call to an absent capability raises
  :class:`UnsupportedCapabilityError` naming it and the provider, and writes nothing.
- The changelog has one position per partition (:meth:`ReadableStateStore.changelog_partitions`: 1
  for per-key providers, which are the one-partition case; one per partition of partition-owned
  state). Offsets and the rules below hold within a partition; ``read_changelog`` and
  ``changelog_position`` are partition 0's while there is only one (see
  :meth:`ReadableStateStore.read_partition_changelog`).
- Compaction (``compact_changelog``) only touches records at or below the offset it is given, never
  removes the newest record of a key except a tombstone older than the retention, and publishes the
  newest dropped tombstone as ``ChangelogPosition.purged_offset`` before (or in the same write as) it
  disappears: a reader that has applied at least that offset and reads on from there converges to
  the state, because records carry absolute values (a record it misses was superseded by one it reads).
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from statekeep.errors import InvalidArgumentError, UnsupportedCapabilityError
from statekeep.metadata.base import Closing
from statekeep.state.base.capabilities import PER_KEY, Capability
from statekeep.state.base.task import TaskState
from statekeep.state.keys import check_keys
from statekeep.state.records import ChangelogRecord, decode_counter
from statekeep.state.records import StateEntry as StateEntry  # defined with its codec; imported from here too
from statekeep.validate import check_int


class ChangelogPosition(NamedTuple):
    """Where a function's changelog stands.

    ``epoch`` names this incarnation of the function's state: None until the first write after the
    function was created or cleaned up, then fixed until the next cleanup, so a reader can tell a
    state that was deleted (or deleted and written again) from a quiet one. ``last_offset``: the
    newest offset assigned (-1: none; its record may since have been compacted away).
    ``compacted_offset``: compaction never touched a record above it (-1: never compacted).
    ``purged_offset``: the newest tombstone compaction dropped (-1: none); a reader that has applied
    less than this may have missed a delete and must start again from a snapshot or a full read."""

    epoch: str | None
    last_offset: int
    compacted_offset: int = -1
    purged_offset: int = -1


class CompactionResult(NamedTuple):
    """What one compaction pass did: records looked at, superseded records removed, old tombstones
    dropped, and the offset it covered (records above it were not looked at)."""

    scanned: int
    removed: int
    tombstones_dropped: int
    upto_offset: int


class StateView(NamedTuple):
    """A full read of a function's state (:meth:`StateStore.read_all`): ``entries`` in key order, and
    the changelog ``position`` they cover: every record at or below ``position.last_offset`` is
    reflected; records above it may be too (replaying them is harmless: records are absolute)."""

    position: ChangelogPosition
    entries: Iterator[StateEntry]


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What one atomic write may hold on this store's backend; ``apply_batch`` splits larger batches."""

    max_keys: int
    max_bytes: int


class ReadableStateStore(Closing):
    """Reading one function's state and its changelog: what every state handle offers, a leader's
    (:class:`StateStore`) or a read-only follower's (:class:`statekeep.changelog.FollowerStore`).
    Thread-safe; see the module docstring for the contract. Code that only reads should ask for this
    type, so a follower fits and a write through it is a type error, not a run-time refusal."""

    max_value_size: int = 1 << 20
    #: what this store can do (see :class:`Capability`); a follower has its leader's
    capabilities: frozenset[Capability] = PER_KEY
    #: the registered name of the provider behind it (named in :class:`UnsupportedCapabilityError`)
    provider_name: str = ""

    def __init__(self, tenant: str, namespace: str, name: str) -> None:
        self.tenant, self.namespace, self.name = tenant, namespace, name

    def require(self, capability: Capability, detail: str = "") -> None:
        """Nothing if this store declares ``capability``; else :class:`UnsupportedCapabilityError`."""
        if capability not in self.capabilities:
            raise UnsupportedCapabilityError(capability.value, self.provider_name or type(self).__name__,
                                             detail or f"{self.tenant}/{self.namespace}/{self.name}")

    # ---- implemented by every readable store ---------------------------------------------------

    @abc.abstractmethod
    def get_entry(self, key: str) -> StateEntry | None:
        """The key's value, kind and version, or None if absent."""

    @abc.abstractmethod
    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        """Entries of keys starting with ``prefix``, after ``start_after``, in key order, at most ``limit``."""

    # ---- derived -----------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The value (a counter as 8-byte big-endian), or None."""
        entry = self.get_entry(key)
        return None if entry is None else entry.value

    def get_counter(self, key: str) -> int:
        """The counter at ``key``; 0 if absent. :class:`InvalidArgumentError` if it holds bytes."""
        entry = self.get_entry(key)
        if entry is None:
            return 0
        if entry.kind != "counter":
            raise InvalidArgumentError(f"state key {key!r} holds bytes, not a counter")
        return decode_counter(entry.value)

    def scan(self, prefix: str = "", start_after: str | None = None,
             limit: int | None = None) -> Iterator[tuple[str, bytes]]:
        """``(key, value)`` pairs as :meth:`scan_entries` orders and filters them."""
        for entry in self.scan_entries(prefix, start_after, limit):
            yield entry.key, entry.value

    def get_entries(self, keys: Iterable[str]) -> dict[str, StateEntry]:
        """Entries of the present keys among ``keys`` (providers may read them in one round trip)."""
        found = {key: self.get_entry(key) for key in check_keys(keys)}
        return {key: entry for key, entry in found.items() if entry is not None}

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """``{key: value}`` for the present keys among ``keys``."""
        return {k: e.value for k, e in self.get_entries(keys).items()}

    def fetch_many(self, keys: Iterable[str]) -> dict[str, tuple[bytes | None, int | None]]:
        """``{key: (value or None, counter or None)}`` for EVERY key asked (the Spark runtime's prefetch)."""
        keys = list(dict.fromkeys(keys))
        found = self.get_entries(keys)
        return {k: (found[k].value, found[k].counter) if k in found else (None, None) for k in keys}

    # ---- changelog (KIP-813): every provider has one -------------------------------------------

    @abc.abstractmethod
    def read_changelog(self, after: int = -1, limit: int | None = None) -> list[ChangelogRecord]:
        """Changelog records with offset > ``after``, oldest first, at most ``limit`` (see the module
        docstring for ordering and gaps)."""

    @abc.abstractmethod
    def changelog_position(self) -> ChangelogPosition:
        """The changelog's :class:`ChangelogPosition` now."""

    def count_changelog(self, after: int = -1) -> int:
        """How many records have offset > ``after`` (a follower's lag); over all the partitions (each
        counted from ``after``) where there are several."""
        count = 0
        while True:
            page = self.read_changelog(after, 10_000)
            if not page:
                return count
            count += len(page)
            after = page[-1].offset

    # ---- the changelog's partitions: per-key stores are the one-partition case -----------------

    def changelog_partitions(self) -> int:
        """How many partitions the changelog has now, each with its own offsets (1 here)."""
        return 1

    def read_partition_changelog(self, partition: int, after: int = -1,
                                 limit: int | None = None) -> list[ChangelogRecord]:
        """:meth:`read_changelog` of one partition: its records with offset > ``after``, in that
        partition's order. :class:`InvalidArgumentError` for a partition the changelog does not have."""
        check_partition(partition, self.changelog_partitions())
        return self.read_changelog(after, limit)

    def partition_position(self, partition: int) -> ChangelogPosition:
        """:meth:`changelog_position` of one partition (its offsets; the epoch is the store's)."""
        check_partition(partition, self.changelog_partitions())
        return self.changelog_position()

    def read_all(self) -> StateView:
        """Every entry with the changelog position it covers. This default reads the position first,
        then scans (not one snapshot: later changes may show, which replaying from the position
        repairs); providers that can read both in one snapshot do."""
        return StateView(self.changelog_position(), self.scan_entries())

    def close(self) -> None:
        """Release what this handle holds (not the provider's shared resources)."""


def check_partition(partition: object, partitions: int) -> int:
    """``partition`` if it is one of ``partitions``; :class:`InvalidArgumentError` otherwise."""
    return check_int(partition, "changelog partition", minimum=0, maximum=partitions - 1)


class StateStore(ReadableStateStore):
    """One function's state, read and written (the leader's). Thread-safe; see the module docstring."""

    # ---- implemented by providers ------------------------------------------------------------

    @abc.abstractmethod
    def put(self, key: str, value: bytes, *, expected_version: int | None = None) -> int:
        """Store bytes at ``key`` (replacing a counter too); returns the new version."""

    @abc.abstractmethod
    def set_counter(self, key: str, value: int, *, expected_version: int | None = None) -> int:
        """Make ``key`` a counter holding ``value``; returns the new version."""

    @abc.abstractmethod
    def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        """Delete ``key``; False (and nothing written) if it was absent and no version was expected."""

    @abc.abstractmethod
    def incr(self, key: str, amount: int = 1) -> int:
        """Atomically add ``amount`` to the counter at ``key`` (absent: 0); returns the new value."""

    @abc.abstractmethod
    def apply_batch(self, puts: Mapping[str, bytes | None], counters: Mapping[str, int],
                    marker: str | None = None) -> bool:
        """Apply ``puts`` (bytes, or None to delete), then ``counters`` (key -> delta, so a key in both
        ends as a counter equal to its delta), their changelog records and the marker, exactly once and
        all or nothing, whatever the batch's size: a batch within :attr:`batch_limits` in ONE atomic
        write; a larger one committed by one write and then applied (a crash after the commit leaves it
        to be finished by :meth:`has_marker` or a replay; readers may see it half applied meanwhile).
        Returns False, writing nothing, if ``marker`` was already applied. Raises as the single-key
        methods do, before anything is written."""

    @abc.abstractmethod
    def has_marker(self, marker: str) -> bool:
        """Whether a batch with this marker was applied (finishing it first if a crash interrupted it)."""

    @property
    @abc.abstractmethod
    def batch_limits(self) -> BatchLimits:
        """The most keys and bytes one ``apply_batch`` may carry on this backend."""

    @abc.abstractmethod
    def compact_changelog(self, upto_offset: int, tombstone_retention_s: float, *,
                          now_ms: int | None = None) -> CompactionResult:
        """Remove records at or below ``upto_offset`` that a newer record of the same key supersedes,
        and tombstones older than ``tombstone_retention_s`` that are their key's newest record, in
        small writes (writers are never held up for long). See the module docstring."""

    # ---- Spark tasks ---------------------------------------------------------------------------

    def partitioning(self, parallelism: int, *, prepare: bool = True) -> tuple[int, int] | None:
        """For state that partitions own (:mod:`statekeep.state.partitioned`): ``(key groups,
        parallelism)`` the next micro-batch must run with, records routed to the partition owning
        their key's group; with ``prepare=False`` the same as the state stands, changing nothing (a
        run outside the micro-batches: a trigger). None (this default): any task may write any key.
        The driver repeats a call that raised :class:`StoreUnavailableError` (a leader change of the store), so
        a provider that writes here reads first and writes only compare-and-set steps on what it read."""
        return None

    def task(self, batch: int, partition: int, parallelism: int) -> TaskState:
        """What the Spark task of ``partition`` (of ``parallelism``) in micro-batch ``batch`` reads and
        writes through; this default is the store itself (markers name the batch and partition)."""
        return self

    # ---- derived -----------------------------------------------------------------------------

    def replace_state(self, entries: Iterable[StateEntry]) -> int:
        """Make the state exactly ``entries`` (in strictly ascending key order; versions are ignored):
        other keys are deleted, changed keys set, each change with its changelog record, so followers
        see a restore like any other write. Returns the number of keys changed. This default writes in
        ``apply_batch`` chunks, so a reader may see it half done and a failure leaves it half done
        (run it again to finish); providers that can do it in one atomic write do."""
        limits = self.batch_limits
        budget = max(1, min(limits.max_keys, 1000))
        puts: dict[str, bytes | None] = {}
        counters: dict[str, int] = {}
        size = changed = 0
        for key, want, have in merge_entries(entries, self.scan_entries()):
            if have is not None and want is not None and (have.kind, have.value) == (want.kind, want.value):
                continue
            changed += 1
            if want is None:
                puts[key] = None
            elif want.kind == "counter":
                puts[key], counters[key] = b"", decode_counter(want.value)
            else:
                puts[key] = want.value
            size += 2 * len(want.value if want is not None else b"") + 1200
            if len(puts) >= budget or size >= limits.max_bytes // 2:
                self.apply_batch(puts, counters)
                puts, counters, size = {}, {}, 0
        if puts:
            self.apply_batch(puts, counters)
        return changed


def merge_entries(wanted: Iterable[StateEntry], current: Iterable[StateEntry]
                  ) -> Iterator[tuple[str, StateEntry | None, StateEntry | None]]:
    """Join two key-ordered entry streams: ``(key, wanted entry or None, current entry or None)``.
    Raises :class:`InvalidArgumentError` if ``wanted`` is not in strictly ascending key order."""
    want_iter, have_iter = iter(wanted), iter(current)
    want, have = next(want_iter, None), next(have_iter, None)
    last: bytes | None = None
    while want is not None or have is not None:
        if want is not None:
            raw = want.key.encode("utf-8")
            if last is not None and raw <= last:
                raise InvalidArgumentError(f"entries must be in ascending key order: {want.key!r} came late")
        if have is None or (want is not None and raw < have.key.encode("utf-8")):
            assert want is not None  # the loop runs while either is left
            yield want.key, want, None
            last, want = raw, next(want_iter, None)
        elif want is None or raw > have.key.encode("utf-8"):
            yield have.key, None, have
            have = next(have_iter, None)
        else:
            yield want.key, want, have
            last, want, have = raw, next(want_iter, None), next(have_iter, None)
