"""A function's state in the ``local://`` store's LMDB file: :class:`EmbeddedStateStore` (see the
package docstring for the layout)."""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from statekeep.lru import remember
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.embedded import (FORK_GATE, embedded_engine, transaction,
                                         uncounted_read)
from statekeep.state import records
from statekeep.state.base import BatchLimits, EntryStateStore, StateEntry, validate_batch
from statekeep.state.embedded.changelog import EmbeddedChangelog, read_entries, scan_in
from statekeep.state.keys import check_keys, check_scan, encode_key

_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_BYTES, _COUNTER = records.BYTES[0], records.COUNTER[0]


class _Txn:
    """Reads and writes of one function inside one LMDB write transaction."""

    def __init__(self, store: EmbeddedStateStore, txn: Any, now_ms: int) -> None:
        self.s, self.txn, self.now_ms = store, txn, now_ms
        self.offset: int | None = None

    def get(self, key: bytes) -> bytes | None:
        """The stored entry of ``key`` (UTF-8), or None."""
        return self.txn.get(self.s._prefix + key, db=self.s._state)  # type: ignore[no-any-return]

    def plan(self, values: Mapping[str, bytes | None], deltas: Mapping[str, int]) -> list[tuple[bytes, bytes]]:
        """:func:`records.plan_batch` over this function's stored entries (raises before any write)."""
        return records.plan_batch(self.txn.cursor(db=self.s._state).get, values, deltas, self.now_ms, self.s._prefix)

    def write_many(self, changes: list[tuple[bytes, bytes]]) -> None:
        """Write planned ``(key, stored entry)`` changes (a tombstone entry deletes the key) and log
        each, in order, with the puts of a whole batch handed to LMDB in one call per database."""
        if not changes:
            return
        s, txn, pack = self.s, self.txn, _U64.pack
        if self.offset is None:
            raw = txn.get(s._offset_key, db=s._meta)
            self.offset = 0 if raw is None else _U64.unpack(raw)[0]
            if raw is None:  # the first record of this incarnation: a new epoch
                txn.put(s._prefix + b"e", f"{self.now_ms}-{os.urandom(6).hex()}".encode(), db=s._meta)
        prefix, offset, record = s._prefix, self.offset, records.entry_change_record
        state_puts, log_puts = [], []
        for key, entry in changes:
            if entry[8] == records.TOMBSTONE_TAG:
                txn.delete(prefix + key, db=s._state)
            else:
                state_puts.append((prefix + key, entry))
            log_puts.append((prefix + pack(offset), record(key, entry)))
            offset += 1
        if state_puts:
            txn.cursor(db=s._state).putmulti(state_puts)
        txn.cursor(db=s._changelog).putmulti(log_puts)
        self.offset = offset

    def finish(self) -> None:
        if self.offset is not None:
            self.txn.put(self.s._offset_key, _U64.pack(self.offset), db=self.s._meta)


_ABSENT: tuple[None, None] = (None, None)


def _stored(key: str, raw: bytes | None) -> tuple[bytes | None, int | None]:
    """(value, counter) of a stored entry, as fetch_many gives it: the common tags decoded here, as
    :func:`records.decode_entry` would."""
    if raw is None:
        return _ABSENT
    tag = raw[8]
    if tag == _BYTES:
        return raw[9:], None
    if tag == _COUNTER and len(raw) == 17:
        return raw[9:], _I64.unpack_from(raw, 9)[0]
    entry = records.decode_entry(key, raw)
    return (None, None) if entry is None else (entry.value, entry.counter)


#: the LMDB databases of embedded state: values and counters, changelog records, offsets and markers
DATABASES = (b"state", b"changelog", b"state_meta")


class EmbeddedStateStore(EmbeddedChangelog, EntryStateStore):
    provider_name = "embedded"

    def __init__(self, store: MetadataStore, tenant: str, namespace: str, name: str) -> None:
        """The state of ``tenant/namespace/name`` in the LMDB file of ``store`` (a store with an embedded engine)."""
        super().__init__(tenant, namespace, name)
        engine = embedded_engine(store)
        self._engine, self._env = engine, engine.env
        self._state, self._changelog, self._meta = (engine.open_db(name) for name in DATABASES)
        self._prefix = f"{tenant}\0{namespace}\0{name}\0".encode()
        self._offset_key = self._prefix + b"o"
        # see get(): key -> (LMDB key, stored bytes, answer)
        self._hot_values: dict[str, tuple[bytes, bytes, bytes | None]] = {}
        self._hot_counters: dict[str, tuple[bytes, bytes, int]] = {}
        self._begin = self._env.begin
        self.max_value_size = store.max_value_size

    @property
    def batch_limits(self) -> BatchLimits:
        return BatchLimits(max_keys=1 << 30, max_bytes=1 << 40)  # bounded by the store's map_size only

    # ---- reads -------------------------------------------------------------------------------

    def get_entry(self, key: str) -> StateEntry | None:
        encode_key(key)
        gate = FORK_GATE
        open_txns = gate.open_txns
        open_txns.append(None)  # transaction(), inlined: the hot read path of REST and the CLI
        if gate.pending:
            gate.hold()
        try:
            with self._env.begin(db=self._state) as txn:
                raw = txn.get(self._prefix + key.encode())
        finally:
            open_txns.pop()
        return None if raw is None else records.decode_entry(key, raw)

    # get and get_counter: the hot read path of REST, the CLI and user code. Each keeps, per key
    # read before, (its LMDB key, the stored bytes, the decoded answer); a read that finds the same
    # bytes returns the same answer, so a hit is one lookup, one LMDB read and one comparison.
    # Only valid keys get an entry, so a hit needs no validation.

    def get(self, key: str) -> bytes | None:
        """As :meth:`StateStore.get`: a fresh read of the committed value (a counter as 8 bytes)."""
        return self._read_hot(key, self._hot_values, records.entry_value)  # type: ignore[no-any-return]

    def get_counter(self, key: str) -> int:
        """As :meth:`StateStore.get_counter`: 0 if absent, :class:`InvalidArgumentError` if it holds bytes."""
        return self._read_hot(key, self._hot_counters, records.entry_counter)  # type: ignore[no-any-return]

    @uncounted_read
    def _read_hot(self, key: str, hot: dict[str, Any], decode: Callable[[str, bytes | None], Any]) -> Any:
        try:
            found = hot[key]  # as MetadataStore.get in local.py: subscript, positional db
        except (KeyError, TypeError):  # not read before, or unhashable (not a key)
            return self._read_cold(key, hot, decode)
        if FORK_GATE.pending:
            return self._read_cold(key, hot, decode)
        with self._begin(self._state) as txn:  # uncounted: fork() waits for this frame (embedded.uncounted_read)
            raw = txn.get(found[0])
        if raw == found[1]:
            return found[2]
        return self._read_cold(key, hot, decode, raw)

    def _read_cold(self, key: str, hot: dict[str, Any], decode: Callable[[str, bytes | None], Any],
                   raw: bytes | None | bool = False) -> Any:
        """get/get_counter without a usable entry: validate, read (unless ``raw`` was just read),
        decode (raising for bytes read as a counter, or a value no provider wrote), remember."""
        encode_key(key)
        raw_key = self._prefix + key.encode()
        if raw is False:
            with transaction(self._env, db=self._state) as txn:
                raw = txn.get(raw_key)
        answer = decode(key, raw)  # type: ignore[arg-type]  # bytes or None once read
        if raw is not None and len(raw) <= 512:  # type: ignore[arg-type]
            remember(hot, key, (raw_key, raw, answer), 4096)
        return answer

    def get_entries(self, keys: Iterable[str]) -> dict[str, StateEntry]:
        """All present keys among ``keys`` in one read transaction."""
        keys = check_keys(keys)
        with transaction(self._env, db=self._state) as txn:
            return read_entries(txn.get, self._prefix, keys)

    def fetch_many(self, keys: Iterable[str]) -> dict[str, tuple[bytes | None, int | None]]:
        """As :meth:`StateStore.fetch_many`, in one read transaction (the Spark runtime's prefetch; one key: a
        batch's first read of it)."""
        keys = check_keys(keys)
        if len(keys) == 1:
            return {keys[0]: self._fetch_one(keys[0])}
        prefix = self._prefix
        with transaction(self._env, db=self._state) as txn:
            get = txn.get
            return {key: _stored(key, get(prefix + key.encode())) for key in sorted(keys)}  # neighbouring pages

    @uncounted_read
    def _fetch_one(self, key: str) -> tuple[bytes | None, int | None]:
        if FORK_GATE.pending:
            with transaction(self._env, db=self._state) as txn:
                return _stored(key, txn.get(self._prefix + key.encode()))
        with self._begin(self._state) as txn:  # uncounted: fork() waits for this frame (embedded.uncounted_read)
            raw = txn.get(self._prefix + key.encode())
        return _stored(key, raw)

    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        check_scan(prefix, start_after, limit)
        return self._scan(prefix, start_after, limit)

    def _scan(self, prefix: str, start_after: str | None, limit: int | None) -> Iterator[StateEntry]:
        with transaction(self._env, db=self._state) as txn:  # one consistent snapshot for the whole scan
            yield from scan_in(txn.cursor(), self._prefix, prefix, start_after, limit)

    def read_changelog(self, after: int = -1, limit: int | None = None) -> list[records.ChangelogRecord]:
        """Changelog records with offset > ``after``, oldest first."""
        out: list[records.ChangelogRecord] = []
        with transaction(self._env, db=self._changelog) as txn:
            cursor = txn.cursor()
            if not cursor.set_range(self._prefix + _U64.pack(after + 1)):
                return out
            for raw_key, raw in cursor:
                if not raw_key.startswith(self._prefix) or (limit is not None and len(out) >= limit):
                    break
                out.append(records.decode_record(raw, _U64.unpack(raw_key[len(self._prefix):])[0]))
        return out

    def has_marker(self, marker: str) -> bool:
        with transaction(self._env, db=self._meta) as txn:
            return txn.get(self._marker_key(marker)) is not None

    def _marker_key(self, marker: str) -> bytes:
        return self._prefix + b"m" + encode_key(marker, what="batch marker").encode()

    # ---- writes ------------------------------------------------------------------------------

    def _write(self, work: Callable[[_Txn], Any]) -> Any:
        """Run ``work(_Txn)`` in a durable write transaction (shared with other writers' commits).
        ``work`` must raise before its first write, never after: its writes are not buffered."""
        def build(reader: Any, now_ms: int) -> tuple[Any, None]:
            t = _Txn(self, reader.txn, now_ms)
            result = work(t)
            t.finish()
            return result, None

        return self._engine.submit(build)

    def _write_key(self, key: str, expected: int | None, values: Mapping[str, bytes | None],
                   deltas: Mapping[str, int]) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        def work(t: _Txn) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
            raw, changes = self._plan_key(t.get, key, expected, values, deltas, t.now_ms)
            t.write_many(changes)
            return raw, changes

        return self._write(work)  # type: ignore[no-any-return]

    def apply_batch(self, puts: Mapping[str, bytes | None], counters: Mapping[str, int],
                    marker: str | None = None) -> bool:
        values, deltas = validate_batch(puts, counters, self.max_value_size)
        # planned, written and logged in key order: LMDB reads and writes neighbouring pages
        values, deltas = {k: values[k] for k in sorted(values)}, {k: deltas[k] for k in sorted(deltas)}
        marker_key = None if marker is None else self._marker_key(marker)

        def work(t: _Txn) -> bool:
            if marker_key is not None and t.txn.get(marker_key, db=self._meta) is not None:
                return False
            # plan every change before writing any: _Txn writes straight into the shared
            # transaction, so whatever can raise (overflow, a key holding bytes) must raise first
            changes = t.plan(values, deltas)
            if marker_key is not None:
                t.txn.put(marker_key, b"", db=self._meta)
            t.write_many(changes)
            return True

        return self._write(work)  # type: ignore[no-any-return]

    def cleanup(self) -> None:
        def work(t: _Txn) -> None:
            for db in (self._state, self._changelog, self._meta):
                cursor = t.txn.cursor(db=db)
                found = cursor.set_range(self._prefix)
                while found and cursor.key().startswith(self._prefix):
                    found = cursor.delete()  # moves to the next key

        self._write(work)
