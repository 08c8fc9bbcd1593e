"""The ``embedded`` state provider: function state in the ``local://`` store's own LMDB file.

    provider = open_provider("embedded", {"metadata_url": "local:///var/lib/statekeep"})

Why it exists: the ``metadata`` provider stores each key as a metadata node and each write as a
compare-and-set ``multi`` with a sequential changelog node, which is portable but costs tens of
microseconds of bookkeeping per key. A Spark micro-batch writes tens of thousands of keys per task;
here a whole batch is one LMDB transaction of plain puts (``benchmarks/state.py`` has the figures).
It needs a store with an embedded engine (:mod:`statekeep.metadata.embedded`: the ``embedded_state``
capability, e.g. ``local://``; several processes may share it: LMDB serializes writers), and writes
share the store's group commit, so every write is durable when it returns.

Layout, in three databases of the store's environment; ``F`` is ``tenant \\0 namespace \\0 name \\0``:

- ``state``: ``F + key (UTF-8)`` -> ``version (8 bytes) + tagged value`` (:mod:`statekeep.state.records`);
- ``changelog``: ``F + offset (8 bytes)`` -> a changelog record; offsets rise by one per record;
- ``state_meta``: ``F + b"m" + marker`` for applied batches, ``F + b"o"`` the next offset, and the
  changelog's epoch, compaction point and purge point (:mod:`statekeep.state.embedded_changelog`).

Keys follow the same rules as every provider (:func:`statekeep.state.keys.encode_key`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from statekeep.errors import CounterOverflowError, InvalidArgumentError
from statekeep.lru import remember
from statekeep.metadata import MetadataStore, open_store
from statekeep.metadata.embedded import (FORK_GATE, embedded_engine, has_embedded_engine, transaction,
                                         uncounted_read)
from statekeep.state import records
from statekeep.state.base import (BatchLimits, StateEntry, StateStore, StateStoreProvider, check_expected_version,
                                  validate_amount, validate_amounts, validate_expected_version, validate_value)
from statekeep.state.embedded_changelog import EmbeddedChangelog
from statekeep.state.keys import check_scan, encode_key, validate_name

_U64 = struct.Struct(">Q")
_RECORD = struct.Struct(records.RECORD_FORMAT)
_I64 = struct.Struct(">q")
_unpack_i64 = _I64.unpack_from
_TAG_COUNTER = records.COUNTER[0]


class _Txn:
    """Reads and writes of one function inside one LMDB write transaction."""

    def __init__(self, store: EmbeddedStateStore, txn: Any, now_ms: int) -> None:
        self.s, self.txn, self.now_ms = store, txn, now_ms
        self.offset: int | None = None

    def read(self, key: str) -> tuple[int, bytes] | None:
        raw = self.txn.get(self.s._prefix + key.encode(), db=self.s._state)
        return None if raw is None else (_U64.unpack_from(raw)[0], raw[8:])

    def write(self, key: str, current: tuple[int, bytes] | None, stored: bytes | None) -> int:
        """Set ``key`` to ``stored`` (None: delete) and log it; returns the new (or deleted) version."""
        return self.write_many([(key, None if current is None else current[0], stored)])[0]

    def write_many(self, changes: list[tuple[str, int | None, bytes | None]]) -> list[int]:
        """:meth:`write` of each ``(key, version before or None if absent, stored)`` in order (a key
        at most once), with the puts of a whole batch handed to LMDB in one call per database."""
        if not changes:
            return []
        s, txn, now_ms, pack = self.s, self.txn, self.now_ms, _U64.pack
        if self.offset is None:
            raw = txn.get(s._offset_key, db=s._meta)
            self.offset = 0 if raw is None else _U64.unpack(raw)[0]
            if raw is None:  # the first record of this incarnation: a new epoch
                txn.put(s._prefix + b"e", f"{now_ms}-{os.urandom(6).hex()}".encode(), db=s._meta)
        prefix, offset, header = s._prefix, self.offset, _RECORD.pack
        versions: list[int] = []
        state_puts, log_puts = [], []
        for key, before, stored in changes:
            key_bytes = key.encode()
            if stored is None:
                assert before is not None  # a delete is of a present key
                version = before
                txn.delete(prefix + key_bytes, db=s._state)
                record = header(records.TOMBSTONE, version, len(key_bytes)) + key_bytes + pack(now_ms)
            else:
                version = 0 if before is None else before + 1
                state_puts.append((prefix + key_bytes, pack(version) + stored))
                record = header(stored[:1], version, len(key_bytes)) + key_bytes + stored[1:]  # records.encode_record
            log_puts.append((prefix + pack(offset), record))
            offset += 1
            versions.append(version)
        if state_puts:
            txn.cursor(db=s._state).putmulti(state_puts)
        txn.cursor(db=s._changelog).putmulti(log_puts)
        self.offset = offset
        return versions

    def finish(self) -> None:
        if self.offset is not None:
            self.txn.put(self.s._offset_key, _U64.pack(self.offset), db=self.s._meta)


def _counter(key: str, current: tuple[int, bytes] | None) -> int:
    return records.entry_counter(key, None if current is None else _U64.pack(current[0]) + current[1])


#: the LMDB databases of embedded state: values and counters, changelog records, offsets and markers
DATABASES = (b"state", b"changelog", b"state_meta")


class EmbeddedStateStore(EmbeddedChangelog, StateStore):
    provider_name = "embedded"

    def __init__(self, provider: EmbeddedStateProvider, tenant: str, namespace: str, name: str) -> None:
        super().__init__(tenant, namespace, name)
        assert provider.store is not None  # handles come from an initialized provider
        engine = embedded_engine(provider.store)
        self._engine, self._env = engine, engine.env
        self._state, self._changelog, self._meta = (engine.open_db(name) for name in DATABASES)
        self._prefix = f"{tenant}\0{namespace}\0{name}\0".encode()
        self._offset_key = self._prefix + b"o"
        # see get(): key -> (LMDB key, stored bytes, answer)
        self._hot_values: dict[str, tuple[bytes, bytes, bytes | None]] = {}
        self._hot_counters: dict[str, tuple[bytes, bytes, int]] = {}
        self._begin = self._env.begin
        self.max_value_size = provider.store.max_value_size

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

    @uncounted_read
    def get(self, key: str) -> bytes | None:
        """As :meth:`StateStore.get`: a fresh read of the committed value (a counter as 8 bytes)."""
        try:
            hot = self._hot_values[key]  # as MetadataStore.get in local.py: subscript, positional db
        except (KeyError, TypeError):  # not read before, or unhashable (not a key)
            return self._read_cold(key, self._hot_values, records.entry_value)  # type: ignore[no-any-return]
        if FORK_GATE.pending:
            return self._read_cold(key, self._hot_values, records.entry_value)  # type: ignore[no-any-return]
        with self._begin(self._state) as txn:  # uncounted: fork() waits for this frame (embedded.uncounted_read)
            raw = txn.get(hot[0])
        if raw == hot[1]:
            return hot[2]
        return self._read_cold(key, self._hot_values, records.entry_value, raw)  # type: ignore[no-any-return]

    @uncounted_read
    def get_counter(self, key: str) -> int:
        """As :meth:`StateStore.get_counter`: 0 if absent, :class:`InvalidArgumentError` if it holds bytes."""
        try:
            hot = self._hot_counters[key]  # as MetadataStore.get in local.py: subscript, positional db
        except (KeyError, TypeError):  # not read before, or unhashable (not a key)
            return self._read_cold(key, self._hot_counters, records.entry_counter)  # type: ignore[no-any-return]
        if FORK_GATE.pending:
            return self._read_cold(key, self._hot_counters, records.entry_counter)  # type: ignore[no-any-return]
        with self._begin(self._state) as txn:  # uncounted: fork() waits for this frame (embedded.uncounted_read)
            raw = txn.get(hot[0])
        if raw == hot[1]:
            return hot[2]
        return self._read_cold(key, self._hot_counters, records.entry_counter, raw)  # type: ignore[no-any-return]

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
        keys = list(dict.fromkeys(keys))
        for key in keys:
            encode_key(key)
        out = {}
        prefix = self._prefix
        with transaction(self._env, db=self._state) as txn:
            get = txn.get
            for key in keys:
                raw = get(prefix + key.encode())
                if raw is not None:
                    out[key] = records.decode_entry(key, raw)
        return out

    def fetch_many(self, keys: Iterable[str]) -> dict[str, tuple[bytes | None, int | None]]:
        """As :meth:`StateStore.fetch_many`, in one read transaction (the Spark runtime's prefetch)."""
        keys = list(dict.fromkeys(keys))
        for key in keys:
            encode_key(key)
        out: dict[str, tuple[bytes | None, int | None]] = {}
        prefix, absent, counter_tag, unpack = self._prefix, (None, None), records.COUNTER, _I64.unpack_from
        with transaction(self._env, db=self._state) as txn:
            get = txn.get
            for key in keys:
                raw = get(prefix + key.encode())
                if raw is None:
                    out[key] = absent
                elif raw[8:9] == counter_tag and len(raw) == 17:
                    out[key] = (raw[9:], unpack(raw, 9)[0])
                else:
                    entry = records.decode_entry(key, raw)
                    out[key] = (entry.value, entry.counter)
        return out

    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        check_scan(prefix, start_after, limit)
        return self._scan(prefix, start_after, limit)

    def _scan(self, prefix: str, start_after: str | None, limit: int | None) -> Iterator[StateEntry]:
        low = self._prefix + prefix.encode()
        if start_after is not None and start_after.encode() >= prefix.encode():
            low = self._prefix + start_after.encode() + b"\0"  # the first key after start_after
        produced = 0
        with transaction(self._env, db=self._state) as txn:  # one consistent snapshot for the whole scan
            cursor = txn.cursor()
            if not cursor.set_range(low):
                return
            want = self._prefix + prefix.encode()
            for raw_key, raw in cursor:
                if not raw_key.startswith(want) or (limit is not None and produced >= limit):
                    return
                yield records.decode_entry(raw_key[len(self._prefix):].decode(), raw)
                produced += 1

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

    def put(self, key: str, value: bytes, *, expected_version: int | None = None) -> int:
        return self._set(key, records.encode_bytes(validate_value(value, self.max_value_size)), expected_version)

    def set_counter(self, key: str, value: int, *, expected_version: int | None = None) -> int:
        return self._set(key, records.encode_counter(validate_amount(value, "counter value")), expected_version)

    def _set(self, key: str, stored: bytes, expected_version: int | None) -> int:
        encode_key(key)
        expected = validate_expected_version(expected_version)

        def work(t: _Txn) -> int:
            current = t.read(key)
            check_expected_version(key, None if current is None else current[0], expected)
            return t.write(key, current, stored)

        return self._write(work)  # type: ignore[no-any-return]

    def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        encode_key(key)
        expected = validate_expected_version(expected_version)
        if expected == -1:
            raise InvalidArgumentError("delete takes expected_version None or >= 0")

        def work(t: _Txn) -> bool:
            current = t.read(key)
            check_expected_version(key, None if current is None else current[0], expected)
            if current is None:
                return False
            t.write(key, current, None)
            return True

        return self._write(work)  # type: ignore[no-any-return]

    def incr(self, key: str, amount: int = 1) -> int:
        encode_key(key)
        amount = validate_amount(amount)

        def work(t: _Txn) -> int:
            current = t.read(key)
            value = _counter(key, current) + amount
            if not records.COUNTER_MIN <= value <= records.COUNTER_MAX:
                raise CounterOverflowError(f"counter {key!r} would overflow a signed 64-bit integer")
            t.write(key, current, records.encode_counter(value))
            return value

        return self._write(work)  # type: ignore[no-any-return]

    def apply_batch(self, puts: Mapping[str, bytes | None], counters: Mapping[str, int],
                    marker: str | None = None) -> bool:
        if not isinstance(puts, Mapping) or not isinstance(counters, Mapping):
            raise InvalidArgumentError("apply_batch takes two mappings: puts and counters")
        for key in (*puts, *counters):
            encode_key(key)
        values = {k: None if v is None else records.encode_bytes(validate_value(v, self.max_value_size))
                  for k, v in puts.items()}
        deltas = validate_amounts(counters)
        marker_key = None if marker is None else self._marker_key(marker)

        def work(t: _Txn) -> bool:
            if marker_key is not None and t.txn.get(marker_key, db=self._meta) is not None:
                return False
            # compute every new value before writing any: _Txn writes straight into the shared
            # transaction, so whatever can raise (overflow, a key holding bytes) must raise first
            changes = []
            get, prefix, state_db, encode = t.txn.get, self._prefix, self._state, records.encode_counter
            for key in (dict.fromkeys([*values, *deltas]) if values else deltas):
                raw = get(prefix + key.encode(), db=state_db)  # _Txn.read, inlined
                before = None if raw is None else _U64.unpack_from(raw)[0]
                delta = deltas.get(key)
                if delta is None:
                    stored = values[key]
                    if stored is None and raw is None:  # deleting an absent key changes nothing
                        continue
                else:
                    if raw is None or key in values:
                        total = delta
                    elif raw[8] == _TAG_COUNTER and len(raw) == 17:  # _counter's common case, inlined
                        total = _unpack_i64(raw, 9)[0] + delta
                    else:
                        total = records.entry_counter(key, raw) + delta
                    if not records.COUNTER_MIN <= total <= records.COUNTER_MAX:
                        raise CounterOverflowError(f"counter {key!r} would overflow a signed 64-bit integer")
                    stored = encode(total)
                changes.append((key, before, stored))
            if marker_key is not None:
                t.txn.put(marker_key, b"", db=self._meta)
            t.write_many(changes)
            return True

        return self._write(work)  # type: ignore[no-any-return]

    def cleanup(self) -> None:
        def work(t: _Txn) -> None:
            for db in (self._state, self._changelog, self._meta):
                cursor = t.txn.cursor(db=db)
                if cursor.set_range(self._prefix):
                    while cursor.key().startswith(self._prefix):
                        if not cursor.delete():
                            break

        self._write(work)


class EmbeddedStateProvider(StateStoreProvider):
    """State in the LMDB file of a store with an embedded engine (``local://``); see the module docstring.

    Config: ``metadata_url`` (the URL of such a store, opened and closed by the provider) or ``store``
    (an open one shared with the caller)."""

    name = "embedded"
    nonblocking_reads = True

    def __init__(self) -> None:
        self.store: MetadataStore | None = None
        self._owns_store = False

    def init(self, config: Mapping[str, Any]) -> None:
        if not isinstance(config, Mapping) or set(config) - {"metadata_url", "store"}:
            raise InvalidArgumentError("the embedded provider takes 'metadata_url' (local://...) or 'store'")
        store = config.get("store")
        if store is None:
            url = config.get("metadata_url")
            if not isinstance(url, str) or not has_embedded_engine(url):  # the backend's capability, before opening
                raise InvalidArgumentError("the embedded provider needs the 'metadata_url' of a store with an embedded "
                                           "engine (local://...)")
            store, self._owns_store = open_store(url), True
        try:
            engine = embedded_engine(store)  # InvalidArgumentError for a store without one
            for db in DATABASES:  # now, not on a first read (a server's may come on its event loop)
                engine.open_db(db)
        except BaseException:
            if self._owns_store:
                store.close()
                self._owns_store = False
            raise
        self.store = store

    def get_state_store(self, tenant: str, namespace: str, name: str) -> EmbeddedStateStore:
        if self.store is None:
            raise InvalidArgumentError("the provider was not initialized: call init(config) first")
        return EmbeddedStateStore(self, validate_name(tenant, "tenant"), validate_name(namespace, "namespace"),
                                  validate_name(name, "function name"))

    def cleanup(self, tenant: str, namespace: str, name: str) -> None:
        self.get_state_store(tenant, namespace, name).cleanup()

    def close(self) -> None:
        if self._owns_store and self.store is not None:
            self.store.close()
        self.store = None
