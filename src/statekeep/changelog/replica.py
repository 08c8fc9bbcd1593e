"""A follower's materialized copy of one function's state, in the follower's own ``local://`` store.

Layout in the store's LMDB environment (databases of their own, so a replica never collides with an
embedded provider's state even in the same directory); ``P`` is ``tenant \\0 namespace \\0 name \\0``:

- ``follower_state``: ``P + generation (8 bytes) + key`` -> ``version (8 bytes) + tagged value``, the
  embedded provider's entry format, with the leader's versions;
- ``follower_meta``: ``P+g`` the active generation, ``P+a`` its applied offset (signed), ``P+e`` the
  leader's epoch it follows, ``P+r`` an unfinished restore (JSON), ``P+x<gen>`` a generation to delete,
  ``P+v`` the fingerprint of the view the copy holds (:mod:`statekeep.changelog.view`; absent: the
  whole state).

A (re)bootstrap writes a NEW generation in chunks, then switches ``g``/``a``/``e`` in one write, so
readers always see a whole generation; old ones are deleted afterwards in small writes. Applying
changelog records and moving ``a`` happen in one write, so a process killed at any moment resumes
exactly where its last write ended. Every write is durable when it returns (the store's group commit).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from statekeep import jsonrecords
from statekeep.errors import InvalidArgumentError
from statekeep.metadata.base import Closing
from statekeep.metadata.embedded import embedded_engine, prefixed, transaction
from statekeep.state import records
from statekeep.state.base import StateEntry
from statekeep.state.embedded import EmbeddedStateProvider
from statekeep.state.embedded.changelog import read_entries, scan_in
from statekeep.state.keys import check_keys, check_scan, encode_key

_U64 = struct.Struct(">Q")
_I64 = struct.Struct(">q")
#: One change of a copy: ``(key, stored entry)`` to put, or ``(key, None)`` to delete.
Op = tuple[bytes, "bytes | None"]


@dataclass
class ReplicaMeta:
    gen: int | None  # None: never bootstrapped
    applied: int
    epoch: str | None
    restore: dict[str, Any] | None
    garbage: list[int]
    view: str | None = None  # the view's fingerprint (None: the whole state)


class LocalReplica(Closing):
    """See the module docstring. Writes come from one thread (the follower's); reads from any."""

    def __init__(self, local_dir: str, tenant: str, namespace: str, name: str) -> None:
        if not local_dir:
            raise InvalidArgumentError("a follower needs its own local directory (local_dir)")
        self.local_dir = os.path.abspath(local_dir)
        self.provider = EmbeddedStateProvider()
        self.provider.init({"metadata_url": f"local://{self.local_dir}"})
        assert self.provider.store is not None  # an initialized provider
        engine = embedded_engine(self.provider.store)
        self._engine, self._env = engine, engine.env
        self._state, self._meta = engine.open_db(b"follower_state"), engine.open_db(b"follower_meta")
        self._p = f"{tenant}\0{namespace}\0{name}\0".encode()

    def close(self) -> None:
        self.provider.close()

    def _where(self, meta_key: str) -> str:
        """Names a meta record of this copy in errors."""
        return f"{self.local_dir} follower_meta {self._p.decode().replace(chr(0), '/')}{meta_key}"

    # ---- meta --------------------------------------------------------------------------------

    def load(self) -> ReplicaMeta:
        p = self._p
        with transaction(self._env, db=self._meta) as txn:
            gen, applied, epoch, restore, view = (txn.get(p + k) for k in (b"g", b"a", b"e", b"r", b"v"))
            garbage = [_U64.unpack(key[len(p) + 1:])[0] for key in prefixed(txn.cursor(), p + b"x", values=False)]
        progress = None if restore is None else jsonrecords.decode(restore, self._where("r"), "restore progress")
        return ReplicaMeta(None if gen is None else _U64.unpack(gen)[0],
                           -1 if applied is None else _I64.unpack(applied)[0],
                           None if not epoch else epoch.decode(), progress,
                           garbage, None if view is None else view.decode())

    def reset_view(self, view: str | None) -> None:
        """Forget the copy (its generations become garbage, an unfinished restore is dropped) and
        record ``view`` as what the next bootstrap builds, in one write: a copy of another view is
        never read or resumed after this."""
        def work(txn: Any) -> None:
            p, meta = self._p, self._meta
            old = txn.get(p + b"g", db=meta)
            if old is not None:
                txn.put(p + b"x" + old, b"", db=meta)
            self._drop_restore(txn)
            for k in (b"g", b"a", b"e"):
                txn.delete(p + k, db=meta)
            if view is None:
                txn.delete(p + b"v", db=meta)
            else:
                txn.put(p + b"v", view.encode(), db=meta)

        self._submit(work)

    def _submit(self, work: Callable[[Any], Any]) -> Any:
        return self._engine.submit(lambda reader, now_ms: (work(reader.txn), None))

    # ---- tailing -----------------------------------------------------------------------------

    def apply(self, gen: int, batch: list[records.ChangelogRecord], applied: int, epoch: str | None) -> None:
        """Apply ``batch`` (in offset order) to generation ``gen`` and record ``applied`` and ``epoch``, in
        one write. A record sets its key to its absolute value and version (or deletes it), so applying
        any record twice changes nothing: re-applying after a crash is harmless."""
        ops = [(r.key.encode(), None if r.value is None else records.entry_bytes(r.version, r.kind, r.value))
               for r in batch]

        def work(txn: Any) -> None:
            write_ops(txn, self._state, self._p + _U64.pack(gen), ops)
            txn.put(self._p + b"a", _I64.pack(applied), db=self._meta)
            txn.put(self._p + b"e", (epoch or "").encode(), db=self._meta)

        self._submit(work)

    # ---- (re)bootstrap -------------------------------------------------------------------------

    def begin_restore(self, source: dict[str, Any]) -> dict[str, Any]:
        """Start writing a new generation; returns its progress, ``source`` (where it comes from) with
        the generation ``gen`` and the entries ``written`` so far, kept so a restarted follower can resume."""
        meta = self.load()
        gen = max([meta.gen or 0, *meta.garbage, (meta.restore or {}).get("gen", 0)]) + 1
        progress = {**source, "gen": gen, "written": 0}
        self._submit(lambda txn: txn.put(self._p + b"r", json.dumps(progress).encode(), db=self._meta))
        return progress

    def restore_chunk(self, progress: dict[str, Any], ops: list[Op]) -> None:
        """Write ``ops`` into the restore's generation and count them, in one write."""
        prefix = self._p + _U64.pack(progress["gen"])
        progress["written"] += len(ops)
        raw = json.dumps(progress).encode()

        def work(txn: Any) -> None:
            write_ops(txn, self._state, prefix, ops)
            txn.put(self._p + b"r", raw, db=self._meta)

        self._submit(work)

    def finish_restore(self, gen: int, applied: int, epoch: str | None, meta: Mapping[bytes, bytes] = {}) -> None:
        """Make ``gen`` the active generation at ``applied``/``epoch`` (and write the other ``meta`` keys),
        in one write; the old generation becomes garbage."""
        def work(txn: Any) -> None:
            p, db = self._p, self._meta
            old = txn.get(p + b"g", db=db)
            if old is not None and _U64.unpack(old)[0] != gen:
                txn.put(p + b"x" + old, b"", db=db)
            for key, value in {b"g": _U64.pack(gen), b"a": _I64.pack(applied), b"e": (epoch or "").encode(),
                               **meta}.items():
                txn.put(p + key, value, db=db)
            txn.delete(p + b"r", db=db)

        self._submit(work)

    def abandon_restore(self) -> None:
        """Drop an unfinished restore: its generation becomes garbage."""
        self._submit(self._drop_restore)

    def _drop_restore(self, txn: Any) -> None:
        raw = txn.get(self._p + b"r", db=self._meta)
        if raw is not None:
            gen = jsonrecords.decode(raw, self._where("r"), "restore progress", lambda d: int(d["gen"]))
            txn.put(self._p + b"x" + _U64.pack(gen), b"", db=self._meta)
            txn.delete(self._p + b"r", db=self._meta)

    def collect_garbage(self, gens: list[int], max_keys: int = 20_000) -> bool:
        """Delete up to ``max_keys`` keys of garbage generations in one write; True when none is left."""
        def work(txn: Any) -> bool:
            budget = max_keys
            for gen in gens:
                prefix = self._p + _U64.pack(gen)
                cursor = txn.cursor(db=self._state)
                found = cursor.set_range(prefix)
                while found and budget > 0 and cursor.key().startswith(prefix):
                    found = cursor.delete()
                    budget -= 1
                if budget <= 0:
                    return False
                txn.delete(self._p + b"x" + _U64.pack(gen), db=self._meta)
            return True

        return self._submit(work)  # type: ignore[no-any-return]

    # ---- reads: the active generation, read in the same transaction as its number ------------

    def _active(self, txn: Any) -> bytes | None:
        gen = txn.get(self._p + b"g", db=self._meta)
        return None if gen is None else self._p + gen

    def get_entry(self, key: str) -> StateEntry | None:
        encode_key(key)
        with transaction(self._env) as txn:
            prefix = self._active(txn)
            raw = None if prefix is None else txn.get(prefix + key.encode(), db=self._state)
        return None if raw is None else records.decode_entry(key, raw)

    def get_entries(self, keys: Iterable[str]) -> dict[str, StateEntry]:
        keys = check_keys(keys)
        with transaction(self._env) as txn:
            prefix = self._active(txn)
            return {} if prefix is None else read_entries(lambda k: txn.get(k, db=self._state), prefix, keys)

    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        check_scan(prefix, start_after, limit)
        return self._scan(prefix, start_after, limit)

    def _scan(self, prefix: str, start_after: str | None, limit: int | None) -> Iterator[StateEntry]:
        with transaction(self._env) as txn:  # one snapshot for the whole scan
            base = self._active(txn)
            if base is not None:
                yield from scan_in(txn.cursor(db=self._state), base, prefix, start_after, limit)


def write_ops(txn: Any, db: Any, prefix: bytes, ops: list[Op]) -> None:
    put, delete = txn.put, txn.delete
    for key, value in ops:
        if value is None:
            delete(prefix + key, db=db)
        else:
            put(prefix + key, value, db=db)


def followed(local_dir: str) -> list[tuple[str, str, str]]:
    """The functions whose replicas live in ``local_dir`` (those bootstrapped at least once), sorted."""
    with EmbeddedStateProvider() as provider:
        provider.init({"metadata_url": f"local://{os.path.abspath(local_dir)}"})
        assert provider.store is not None  # an initialized provider
        engine = embedded_engine(provider.store)
        with engine.read(engine.open_db(b"follower_meta")) as txn:
            keys = [key.split(b"\0") for key in txn.cursor().iternext(values=False)]
        return sorted((p[0].decode(), p[1].decode(), p[2].decode()) for p in keys if len(p) == 4 and p[3] == b"g")
