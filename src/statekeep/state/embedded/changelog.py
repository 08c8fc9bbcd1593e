"""The changelog side of the ``embedded`` provider (KIP-813): position, counting, compaction, a full
read in one snapshot, and an atomic restore. Mixed into :class:`~statekeep.state.embedded.EmbeddedStateStore`.
Its LMDB reads of entries (:func:`read_entries`, :func:`scan_in`) serve the store and followers' copies too.

Meta keys of a function (``F`` its prefix, in the ``state_meta`` database): ``F+o`` the next offset,
``F+e`` the epoch (written with the first record of an incarnation; ``cleanup`` removes every ``F``
key, so the next write starts a new epoch), ``F+c`` the compaction point and ``F+p`` the newest
dropped tombstone (signed 8-byte big-endian).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.metadata.embedded import held_transaction, prefixed, transaction
from statekeep.state import records
from statekeep.state.base import (ChangelogPosition, CompactionResult, StateEntry, StateView, merge_entries,
                                  validate_value)
from statekeep.state.keys import encode_key

_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
_HEADER = records.RECORD_HEADER_SIZE
#: records looked at per compaction write: small, so the leader's writes wait milliseconds at most
COMPACTION_CHUNK = 5_000


def read_entries(get: Callable[[bytes], bytes | None], base: bytes, keys: Iterable[str]) -> dict[str, StateEntry]:
    """The entries of the present ones among ``keys`` (valid keys), stored at ``base + key`` (``get``: a
    read transaction's, of the database holding them)."""
    return {key: records.decode_entry(key, raw) for key in keys if (raw := get(base + key.encode())) is not None}


def scan_in(cursor: Any, base: bytes, prefix: str, start_after: str | None, limit: int | None
            ) -> Iterator[StateEntry]:
    """``scan_entries`` over the keys stored at ``base + key`` in ``cursor``'s database (arguments checked)."""
    want = base + prefix.encode()
    low = want
    if start_after is not None and start_after.encode() >= prefix.encode():
        low = base + start_after.encode() + b"\0"  # the first key after start_after
    for produced, (raw_key, raw) in enumerate(prefixed(cursor, want, low)):
        if limit is not None and produced >= limit:
            return
        yield records.decode_entry(raw_key[len(base):].decode(), raw)


class EmbeddedChangelog:
    """Changelog operations over the attributes of an ``EmbeddedStateStore`` (``_env``, ``_state``,
    ``_changelog``, ``_meta``, ``_prefix``, ``_write``)."""

    _env: Any
    _state: Any
    _changelog: Any
    _meta: Any
    _prefix: bytes
    max_value_size: int
    _write: Callable[..., Any]  # a method of the state store

    def _position_in(self, txn: Any) -> ChangelogPosition:
        p = self._prefix
        raw_next, epoch, compacted, purged = (txn.get(p + k, db=self._meta) for k in (b"o", b"e", b"c", b"p"))
        return ChangelogPosition(
            None if epoch is None else epoch.decode(),
            -1 if raw_next is None else _U64.unpack(raw_next)[0] - 1,
            -1 if compacted is None else _I64.unpack(compacted)[0],
            -1 if purged is None else _I64.unpack(purged)[0])

    def changelog_position(self) -> ChangelogPosition:
        with transaction(self._env) as txn:
            return self._position_in(txn)

    def count_changelog(self, after: int = -1) -> int:
        with transaction(self._env, db=self._changelog) as txn:
            after_key = self._prefix + _U64.pack(after + 1)
            return sum(1 for _ in prefixed(txn.cursor(), self._prefix, after_key, values=False))

    def read_all(self) -> StateView:
        """Entries and position from ONE read transaction: exactly the state at ``last_offset``."""
        gated = held_transaction(self._env)
        try:
            position = self._position_in(gated.txn)
        except BaseException:
            gated.end()
            raise
        return StateView(position, self._entries_in(gated))

    def _entries_in(self, gated: held_transaction) -> Iterator[StateEntry]:
        try:
            yield from scan_in(gated.txn.cursor(db=self._state), self._prefix, "", None, None)  # type: ignore[union-attr]
        finally:
            gated.end()

    def compact_changelog(self, upto_offset: int, tombstone_retention_s: float, *,
                          now_ms: int | None = None) -> CompactionResult:
        """See :meth:`StateStore.compact_changelog`. A record is kept when the key's current value and
        version are exactly the record's (so the newest record always is); a tombstone while its key
        is absent and it is younger than the retention. Runs in writes of :data:`COMPACTION_CHUNK`
        records each."""
        import time

        cutoff = (int(time.time() * 1000) if now_ms is None else now_ms) - int(tombstone_retention_s * 1000)
        totals, position, done = [0, 0, 0], 0, False  # records scanned, removed, tombstones dropped
        while not done:
            position, *counts, done = self._write(
                lambda t, start=position: self._compact_chunk(t.txn, start, upto_offset, cutoff))
            totals = [total + count for total, count in zip(totals, counts)]
        return CompactionResult(totals[0], totals[1], totals[2], upto_offset)

    def _compact_chunk(self, txn: Any, start: int, upto: int, cutoff: int) -> tuple[int, int, int, int, bool]:
        prefix, n = self._prefix, len(self._prefix)
        cursor = txn.cursor(db=self._changelog)
        scanned = removed = dropped = 0
        purged = last = -1
        done = True
        found = cursor.set_range(prefix + _U64.pack(start))
        while found:
            raw_key = cursor.key()
            if not raw_key.startswith(prefix):
                break
            offset = _U64.unpack_from(raw_key, n)[0]
            if offset > upto:
                break
            if scanned >= COMPACTION_CHUNK:
                done = False
                break
            scanned += 1
            last = offset
            rec = cursor.value()
            key_len = int.from_bytes(rec[9:11], "big")
            current = txn.get(prefix + rec[_HEADER:_HEADER + key_len], db=self._state)
            if rec[:1] == records.TOMBSTONE:
                keep = current is None and len(rec) == _HEADER + key_len + 8 and \
                    _I64.unpack_from(rec, _HEADER + key_len)[0] >= cutoff
                if not keep and current is None:
                    dropped += 1
                    purged = offset
            else:  # the newest record of a key is the one its current value and version equal
                keep = current is not None and current[:8] == rec[1:9] and current[8:9] == rec[:1] \
                    and current[9:] == rec[_HEADER + key_len:]
            if keep:
                found = cursor.next()
            else:
                removed += 1
                found = cursor.delete()  # moves to the next record
        if last >= 0:
            old = txn.get(prefix + b"c", db=self._meta)
            if old is None or _I64.unpack(old)[0] < last:
                txn.put(prefix + b"c", _I64.pack(last), db=self._meta)
        if purged >= 0:  # in the same write as the drop: a reader never misses a delete unknowingly
            old = txn.get(prefix + b"p", db=self._meta)
            if old is None or _I64.unpack(old)[0] < purged:
                txn.put(prefix + b"p", _I64.pack(purged), db=self._meta)
        return (last + 1 if last >= 0 else start), scanned, removed - dropped, dropped, done

    def replace_state(self, entries: Iterable[StateEntry]) -> int:
        """See :meth:`StateStore.replace_state`; here ONE transaction: readers see the old state or the
        new one, and a failure (a corrupt stream, a bad entry) writes nothing."""

        def work(t: Any) -> int:
            outer = t.txn
            child = self._env.begin(write=True, parent=outer)  # nested: a failure part-way writes nothing
            try:
                t.txn = child
                changed = self._replace_in(t, entries)
                t.finish()
                t.offset = None  # finish() already wrote it, inside the child
                child.commit()
                return changed
            except BaseException:
                child.abort()
                raise
            finally:
                t.txn = outer

        changed: int = self._write(work)
        return changed

    def _replace_in(self, t: Any, entries: Iterable[StateEntry]) -> int:
        n = len(self._prefix)
        keys = [raw_key[n:].decode() for raw_key in prefixed(t.txn.cursor(db=self._state), self._prefix, values=False)]

        def current() -> Iterator[StateEntry]:
            for key in keys:
                raw = t.get(key.encode())
                if raw is not None:
                    yield records.decode_entry(key, raw)

        changed = 0
        for key, want, have in merge_entries(entries, current()):
            if want is None:
                stored = None
            elif want.kind == "counter" and len(want.value) == 8:
                stored = records.encode_counter(records.decode_counter(want.value))
            elif want.kind == "bytes":
                encode_key(key)
                stored = records.encode_bytes(validate_value(want.value, self.max_value_size))
            else:
                raise InvalidArgumentError(f"entry {key!r}: kind must be 'bytes' or 'counter' (8 bytes)")
            if have is not None and want is not None and (have.kind, have.value) == (want.kind, want.value):
                continue
            t.write_many(t.plan({key: stored}, {}))
            changed += 1
        return changed
