"""The changelog side of the ``metadata`` provider (KIP-813): position, counting and compaction over
the ``log/r<offset>`` nodes. Mixed into :class:`~statekeep.state.metadata.store.MetadataStateStore`.

- The epoch is ``"<creation ms of the log node>:<its token>"``; both go with ``cleanup``. The log node
  is created before the first write of each incarnation holding a random token, so the epoch changes
  whenever a function's state is deleted and written again, even within one millisecond on ZooKeeper
  (which restarts sequence numbers). (A handle of another process that goes on writing after a cleanup
  recreates the node without a token; the epoch is then ``"<creation ms>:<offset of the first
  record>"``, told apart by the creation time and, except on ZooKeeper, the never reused sequence
  numbers.)
- ``compaction`` (a node beside ``kv``/``log``) holds JSON ``{"first", "compacted", "purged",
  "through"}``: the first offset of the incarnation (recorded before compaction may delete it), the
  compaction point, the newest dropped tombstone, and the newest offset compaction deleted (so
  ``last_offset`` never goes back when the newest records were old tombstones). It is updated by
  compare-and-set in the same ``multi`` as the deletes it describes.
- A full read (``read_all``) reads the position first, then scans: keys changed during the scan
  may show newer values than the position, which replaying from the position repairs (records are
  absolute values). Restores (``replace_state``) go in ``apply_batch`` chunks: not atomic here.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from statekeep import jsonrecords
from statekeep.errors import BadVersionError, NotFoundError
from statekeep.metadata import Delete, MetadataStore, Op, Put
from statekeep.retry import DEFAULT as RETRY
from statekeep.state import records
from statekeep.state.base import BatchLimits, ChangelogPosition, CompactionResult
from statekeep.state.keys import encode_key

#: records looked at per round: their reads overlap, and their deletes go in multis of DELETE_CHUNK
COMPACTION_CHUNK = 500
DELETE_CHUNK = 100  # at most; and at most the backend's batch_limits.max_keys (etcd: --max-txn-ops)


class MetadataChangelog:
    """Changelog operations over the attributes of a ``MetadataStateStore`` (``_store``, ``base``,
    ``_kv``, ``_log``)."""

    _store: MetadataStore
    base: str
    _kv: str
    _log: str

    if TYPE_CHECKING:
        @property
        def batch_limits(self) -> BatchLimits: ...  # the state store's

    @property
    def _log_parent(self) -> str:
        return self._log[:-2]

    def _compaction_info(self) -> tuple[dict[str, int], int | None]:
        current = self._store.get(self.base + "/compaction")
        if current is None:
            return {}, None
        return jsonrecords.decode(current.value, self.base + "/compaction", "compaction record"), current.stat.version

    def changelog_position(self) -> ChangelogPosition:
        parent = self._store.get(self._log_parent)
        if parent is None:
            return ChangelogPosition(None, -1)
        names = self._store.get_children(self._log_parent)
        info, _ = self._compaction_info()
        last = max(int(names[-1][1:]) if names else -1, info.get("through", -1))
        first = info.get("first", int(names[0][1:]) if names else "")
        # the token names the incarnation from before its first record (so the epoch stays the same when
        # that record comes); a log node without one (see the module docstring) falls back to the first offset
        token = parent.value.decode(errors="replace") or f"{first}"
        return ChangelogPosition(f"{parent.stat.created_ms}:{token}", last, info.get("compacted", -1),
                                 info.get("purged", -1))

    def count_changelog(self, after: int = -1) -> int:
        return sum(1 for name in self._store.get_children(self._log_parent) if int(name[1:]) > after)

    def compact_changelog(self, upto_offset: int, tombstone_retention_s: float, *,
                          now_ms: int | None = None) -> CompactionResult:
        cutoff = (int(time.time() * 1000) if now_ms is None else now_ms) - int(tombstone_retention_s * 1000)
        every = self._store.get_children(self._log_parent)
        names = [n for n in every if int(n[1:]) <= upto_offset]
        first = int(every[0][1:]) if every else -1  # listed before this pass deletes anything
        scanned = removed = dropped = 0
        for i in range(0, len(names), COMPACTION_CHUNK):
            chunk = names[i:i + COMPACTION_CHUNK]
            paths = [self._log + n[1:] for n in chunk]
            found = [(int(n[1:]), p, r) for n, p, r in zip(chunk, paths, self._store.get_many(paths))
                     if r is not None]
            decoded = [(offset, path, records.decode_record(r.value, offset)) for offset, path, r in found]
            currents = self._store.get_many([self._kv + encode_key(rec.key) for _, _, rec in decoded])
            deletes: list[tuple[int, str, bool]] = []  # (offset, path, is a dropped tombstone)
            for (offset, path, rec), current in zip(decoded, currents):
                scanned += 1
                if rec.tombstone:
                    if current is None and (rec.deleted_ms is None or rec.deleted_ms < cutoff):
                        deletes.append((offset, path, True))
                    elif current is not None:
                        deletes.append((offset, path, False))
                elif current is None or current.stat.version != rec.version or \
                        current.value != records.encode_value(rec.kind, rec.value or b""):
                    deletes.append((offset, path, False))
            per = max(1, min(DELETE_CHUNK, self.batch_limits.max_keys))
            for j in range(0, len(deletes), per):
                part = deletes[j:j + per]
                self._delete_records(part, int(chunk[-1][1:]), first)
                dropped += sum(1 for d in part if d[2])
                removed += sum(1 for d in part if not d[2])
            if not deletes:
                self._delete_records([], int(chunk[-1][1:]), first)
        return CompactionResult(scanned, removed, dropped, upto_offset)

    def _delete_records(self, part: list[tuple[int, str, bool]], chunk_last: int, first: int) -> None:
        """Delete ``part`` and advance the compaction node in one multi (compare-and-set on it)."""
        purged = max((o for o, _, tomb in part if tomb), default=-1)
        through = max((o for o, _, _ in part), default=-1)
        for _ in RETRY.attempts():
            info, version = self._compaction_info()
            new = {"first": min(info.get("first", first), first),
                   "compacted": max(info.get("compacted", -1), chunk_last),
                   "purged": max(info.get("purged", -1), purged), "through": max(info.get("through", -1), through)}
            if new == info and not part:
                return
            ops: list[Op] = [Put(self.base + "/compaction", json.dumps(new).encode(),
                                 -1 if version is None else version)]
            ops += [Delete(path) for _, path, _ in part]
            try:
                self._store.multi(ops)
                return
            except BadVersionError:
                continue  # another compactor moved the node: merge again
            except NotFoundError:  # a record went meanwhile (another compactor): retry without it
                part = [d for d in part if self._store.exists(d[1])]
        raise BadVersionError(f"compaction of {self.base}: its compaction node kept changing")

