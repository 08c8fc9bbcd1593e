"""A function's state in a metadata store subtree: :class:`MetadataStateStore` (see the package
docstring for the layout)."""

from __future__ import annotations

import contextlib
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from statekeep.errors import (AlreadyExistsError, BadVersionError, CounterOverflowError, InvalidArgumentError,
                              NotFoundError)
from statekeep.metadata import Delete, GetResult, MetadataStore, Op, Put
from statekeep.metadata.types import validate_version
from statekeep.retry import DEFAULT as RETRY
from statekeep.state import records
from statekeep.state.metadata import staged
from statekeep.state.base import (BatchLimits, StateEntry, StateStore, check_expected_version,
                                  validate_amount, validate_amounts, validate_value)
from statekeep.state.keys import check_scan, decode_key, encode_key, encode_prefix
from statekeep.state.metadata.changelog import MetadataChangelog

DEFAULT_ROOT = "/statekeep/state"
#: keys (or changelog records) a scan reads per get_many: one round trip per page on a server store
SCAN_PAGE = 1000
# a key of a batch costs up to four operations of one multi (on etcd a created key and its changelog
# record take two each); the batch's own extra operations (a fence, an offset) get the rest
_OPS_PER_KEY, _EXTRA_OPS = 4, 20
_PER_KEY_OVERHEAD = 2 * 512 + 64  # two paths and framing, per key, in a request-size estimate
_UNCHANGED = object()
_new_entry = tuple.__new__  # skips NamedTuple's Python-level __new__ on the read path


class MetadataStateStore(MetadataChangelog, StateStore):
    """A function's state in a metadata store subtree; see the module docstring for its layout."""

    provider_name = "metadata"

    def __init__(self, store: MetadataStore, root: str, tenant: str, namespace: str, name: str, *,
                 retry_seconds: float, max_value_size: int, limits: BatchLimits) -> None:
        """The state of ``tenant/namespace/name`` under ``root`` of ``store``, with the provider's settings
        (see :class:`~statekeep.state.metadata.provider.MetadataStateStoreProvider`)."""
        super().__init__(tenant, namespace, name)
        self._store = store
        self._retry_seconds = retry_seconds
        self._retry = RETRY.bounded(seconds=retry_seconds)
        self.base = f"{root}/{tenant}/{namespace}/{name}"
        self._kv = self.base + "/kv/"
        self._log = self.base + "/log/r"
        self.applied_root = self.base + "/applied/"
        self.max_value_size = max_value_size
        self._limits = limits
        self._log_ready = False  # the changelog's parent exists, with this incarnation's token

    def _ensure_log(self) -> None:
        """Before the first write through this handle: create the changelog's parent node holding a random
        token (once; another writer may have created it), which makes the epoch unique per incarnation."""
        if self._log_ready:
            return
        if self._store.get(self._log_parent) is None:
            # another writer may have created it first: its token is the incarnation's
            with contextlib.suppress(AlreadyExistsError, BadVersionError):
                self._store.put(self._log_parent, uuid.uuid4().hex.encode(), -1)
        self._log_ready = True

    @property
    def metadata_store(self) -> MetadataStore:
        """The metadata store this state lives in (under :attr:`base`)."""
        return self._store

    @property
    def batch_limits(self) -> BatchLimits:
        return self._limits

    # ---- reads -------------------------------------------------------------------------------

    def get_entry(self, key: str) -> StateEntry | None:
        path = self._kv + encode_key(key)
        result = self._store.get(path)
        return None if result is None else self._entry(key, path, result)

    def get(self, key: str) -> bytes | None:
        result = self._store.get(self._kv + encode_key(key))  # the hot path: no StateEntry
        if result is None:
            return None
        value = result.value
        if value[:1] == records.BYTES or (value[:1] == records.COUNTER and len(value) == 9):
            return value[1:]
        return records.decode_stored(value, self._kv + key)[1]  # raises CorruptStateError

    def get_entries(self, keys: Iterable[str]) -> dict[str, StateEntry]:
        keys = list(dict.fromkeys(keys))
        paths = [self._kv + encode_key(key) for key in keys]  # validate all before reading any
        return {key: self._entry(key, path, result)
                for key, path, result in zip(keys, paths, self._store.get_many(paths)) if result is not None}

    @staticmethod
    def _entry(key: str, path: str, result: GetResult) -> StateEntry:
        kind, payload = records.decode_stored(result.value, path)
        return _new_entry(StateEntry, (key, payload, kind, result.stat.version))

    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        encoded_prefix = check_scan(prefix, start_after, limit)
        after = encode_prefix(start_after) if start_after else None
        return self._scan(encoded_prefix, after, limit)

    def _scan(self, prefix: str, after: str | None, limit: int | None) -> Iterator[StateEntry]:
        children = self._store.get_children(self._kv[:-1])  # sorted: segment order is key order
        i = bisect_left(children, prefix) if after is None or after < prefix else bisect_right(children, after)
        produced = 0
        while i < len(children) and (limit is None or produced < limit):
            # a page of keys in one get_many (one round trip per page, not per key, on a server store);
            # pages stay small when a limit is near, so a page of 10 keys reads no more than it returns
            wanted = SCAN_PAGE if limit is None else min(SCAN_PAGE, max(limit - produced, 1) * 2)
            page = [segment for segment in children[i:i + wanted] if segment.startswith(prefix)]
            i += wanted
            if not page:
                break
            for segment, result in zip(page, self._store.get_many([self._kv + s for s in page])):
                if result is None:  # deleted since the listing
                    continue
                yield self._entry(decode_key(segment), self._kv + segment, result)
                produced += 1
                if limit is not None and produced >= limit:
                    return
            if len(page) < wanted:
                break  # the prefix ended inside this page

    def read_changelog(self, after: int = -1, limit: int | None = None) -> list[records.ChangelogRecord]:
        """Changelog records with offset > ``after``, oldest first (a minimal reader; compaction and
        followers live in :mod:`statekeep.changelog`)."""
        names = self._store.get_children(self._log[:-2])
        # sequential names (r + ten digits) sort as their offsets: the ones after ``after`` are a tail, found without
        # reading every name of a long log
        names = names[bisect_right(names, f"r{after:010d}"):] if after >= 0 else names
        out: list[records.ChangelogRecord] = []
        for start in range(0, len(names), SCAN_PAGE):  # a page of records per round trip
            page = names[start:start + SCAN_PAGE]
            for name, result in zip(page, self._store.get_many([self._log + name[1:] for name in page])):
                if result is not None:
                    out.append(records.decode_record(result.value, int(name[1:])))
                    if limit is not None and len(out) >= limit:
                        return out
        return out

    # ---- single-key writes -------------------------------------------------------------------

    def put(self, key: str, value: bytes, *, expected_version: int | None = None) -> int:
        stored = records.encode_bytes(validate_value(value, self.max_value_size))
        return int(self._change(key, lambda current: stored, expected_version))

    def set_counter(self, key: str, value: int, *, expected_version: int | None = None) -> int:
        stored = records.encode_counter(validate_amount(value, "counter value"))
        return int(self._change(key, lambda current: stored, expected_version))

    def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        if expected_version == -1:
            raise InvalidArgumentError("delete takes expected_version None or >= 0")
        return self._change(key, lambda current: None if current is not None else _UNCHANGED,
                            expected_version) is not _UNCHANGED

    def incr(self, key: str, amount: int = 1) -> int:
        amount = validate_amount(amount)
        result: list[int] = []

        def add(current: GetResult | None) -> bytes:
            value = self._counter_of(key, current) + amount
            if not records.COUNTER_MIN <= value <= records.COUNTER_MAX:
                raise CounterOverflowError(f"counter {key!r} would overflow a signed 64-bit integer "
                                           f"({self._counter_of(key, current)} + {amount})")
            result[:] = [value]
            return records.encode_counter(value)

        self._change(key, add, None)
        return result[0]

    def _counter_of(self, key: str, current: GetResult | None) -> int:
        if current is None:
            return 0
        kind, payload = records.decode_stored(current.value, self._kv + key)
        if kind != "counter":
            raise InvalidArgumentError(f"state key {key!r} holds bytes, not a counter")
        return records.decode_counter(payload)

    def _change(self, key: str, compute: Callable[[GetResult | None], Any], expected_version: int | None) -> Any:
        """Compare-and-set ``key`` to ``compute(current)`` (None: delete, _UNCHANGED: nothing) with its
        changelog record; retried on a lost race unless the caller expected a version."""
        path = self._kv + encode_key(key)
        expected_version = validate_version(expected_version)
        self._ensure_log()
        for _ in self._retry.attempts():
            current = self._store.get(path)
            if expected_version is not None:
                check_expected_version(key, None if current is None else current.stat.version, expected_version)
            stored = compute(current)
            if stored is _UNCHANGED:
                return _UNCHANGED
            assert stored is not None or current is not None  # compute deletes only what exists
            try:
                stats = self._store.multi(list(self._write_ops(key, path, current, stored)))
            except (BadVersionError, NotFoundError):
                if expected_version is not None:  # the caller's condition no longer holds
                    now = self._store.get(path)
                    check_expected_version(key, None if now is None else now.stat.version, expected_version)
                    raise BadVersionError(f"state key {key!r} changed concurrently (expected version "
                                          f"{expected_version})") from None
                continue  # lost a race: read again
            return stats[0].version if stats[0] is not None else True
        raise self._gave_up(f"state key {key!r}")

    def _write_ops(self, key: str, path: str, current: GetResult | None, stored: bytes | None) -> tuple[Op, Put]:
        """The compare-and-set of ``key`` (at ``path``, now ``current``) to ``stored`` (None: delete a
        present key), and its changelog record."""
        if stored is None:
            assert current is not None  # only a present key is deleted
            return (Delete(path, current.stat.version),
                    Put(self._log, records.encode_record(key, None, current.stat.version), sequential=True))
        version = 0 if current is None else current.stat.version + 1
        return (Put(path, stored, -1 if current is None else current.stat.version),
                Put(self._log, records.encode_record(key, stored, version), sequential=True))

    def _gave_up(self, what: str) -> BadVersionError:
        """The error once the retry policy (bounded by ``retry_seconds``) saw every attempt lost."""
        return BadVersionError(f"gave up writing {what} of {self.base}: every attempt was lost to concurrent "
                               f"writers for {self._retry_seconds}s")

    # ---- batches -----------------------------------------------------------------------------

    def apply_batch(self, puts: Mapping[str, bytes | None], counters: Mapping[str, int],
                    marker: str | None = None) -> bool:
        """As :meth:`StateStore.apply_batch`, for a batch of any size: one that fits one write of the
        backend (:attr:`batch_limits`) goes in one ``multi``; a larger one is staged, committed by one
        write and rolled forward (:mod:`statekeep.state.metadata.staged`), exactly once either way."""
        if not isinstance(puts, Mapping) or not isinstance(counters, Mapping):
            raise InvalidArgumentError("apply_batch takes two mappings: puts and counters")
        values = {k: None if v is None else validate_value(v, self.max_value_size) for k, v in puts.items()}
        deltas = validate_amounts(counters)
        items = [staged.Item(key, self.path_of(key), key in values, values.get(key), deltas.get(key))
                 for key in dict.fromkeys([*values, *deltas])]
        anonymous = marker is None
        if anonymous:
            marker = f"{staged.ANONYMOUS}{uuid.uuid4().hex}"
        segment = encode_key(marker, what="batch marker")
        marker_path = self.applied_root + segment
        limits = self._limits
        if len(items) <= limits.max_keys and sum(map(self.write_size, items)) <= limits.max_bytes:
            marker_op: list[Op] = [] if anonymous else [Put(marker_path, b"", -1)]
            return self.apply_items(items, lambda: marker_op,
                                     lambda: not anonymous and marker is not None and self.has_marker(marker))
        return staged.StagedBatches(self).apply(items, marker_path, segment, anonymous)

    def has_marker(self, marker: str) -> bool:
        """Whether the batch of ``marker`` was committed; one that a crash left half applied is
        finished first (so a replay completes it instead of skipping it)."""
        segment = encode_key(marker, what="batch marker")
        return staged.StagedBatches(self).finish(self.applied_root + segment, segment)

    def finish_pending_batches(self) -> int:
        """Finish every batch that was committed but not completely applied; returns how many."""
        return staged.StagedBatches(self).finish_all()

    def path_of(self, key: str) -> str:
        return self._kv + encode_key(key)

    @staticmethod
    def write_size(item: staged.Item) -> int:
        """About what an item costs in one write: its value twice (key and changelog record) and paths."""
        return 2 * len(item.put or b"") + _PER_KEY_OVERHEAD

    def stored_of(self, item: staged.Item, current: GetResult | None) -> bytes | None:
        """The tagged value ``item`` leaves given the key's ``current`` one (None: absent). Raises
        :class:`CounterOverflowError`, or :class:`InvalidArgumentError` for a delta on bytes."""
        if item.delta is None:
            return None if item.put is None else records.encode_bytes(item.put)
        total = (0 if item.has_put else self._counter_of(item.key, current)) + item.delta
        if not records.COUNTER_MIN <= total <= records.COUNTER_MAX:
            raise CounterOverflowError(f"counter {item.key!r} would overflow a signed 64-bit integer")
        return records.encode_counter(total)

    def read_items(self, items: Sequence[staged.Item]) -> list[GetResult | None]:
        return self._store.get_many([item.path for item in items])

    def apply_items(self, items: Sequence[staged.Item], extra: Callable[[], list[Op]], done: Callable[[], bool],
                     currents: Sequence[GetResult | None] | None = None) -> bool:
        """Write ``items`` (values computed from the current ones: ``currents`` if given, read
        otherwise), their changelog records and ``extra()`` in one ``multi``; on a lost race, False
        if ``done()``, else read and try again."""
        if currents is None and done():
            return False
        self._ensure_log()
        for _ in self._retry.attempts():
            ops: list[Op] = list(extra())
            logs = []
            if currents is None:
                currents = self.read_items(items)
            for item, current in zip(items, currents):
                stored = self.stored_of(item, current)
                if stored is not None or current is not None:  # deleting an absent key changes nothing
                    op, record = self._write_ops(item.key, item.path, current, stored)
                    ops.append(op)
                    logs.append(record)
            try:
                if ops or logs:
                    self._store.multi([*ops, *logs])
                return True
            except (BadVersionError, NotFoundError, AlreadyExistsError):
                if done():  # lost to a replay of this very batch, or another applier of this group
                    return False
                currents = None
        raise self._gave_up(f"a batch of {len(items)} keys")
