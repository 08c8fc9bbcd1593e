"""Exactly-once batches larger than one atomic write of the backend (ZooKeeper's ``jute.maxbuffer``,
etcd's ``--max-txn-ops`` and ``--max-request-bytes``), for the ``metadata`` provider.

A batch that fits one write goes in one ``multi`` with its marker, as on ``local://``. A larger one
is committed in three steps, so no guarantee rests on its size:

1. **Stage.** The batch's operations (puts, deletes, counter deltas: the inputs, not their results)
   are written under ``staging/<marker>/<attempt>/c<i>``, each piece small enough for one write. An
   attempt has its own id, so a zombie attempt of the same batch never mixes pieces with another.
2. **Commit.** ONE write creates the marker ``applied/<marker>`` holding the attempt id. This is the
   commit point: before it, nothing of the batch is visible and a rerun stages again; after it, the
   batch is decided and only ever rolled forward, never recomputed.
3. **Apply.** Each piece is applied in groups that fit one write; each group's write carries its
   keys' changes, their changelog records and the piece's progress counter ``p<i>`` (a
   compare-and-set on its version, which counts the groups applied) and a check that the marker still
   holds this attempt unfinished (its version). A crash, a replay or a second applier racing this one
   therefore applies every group exactly once: a late applier whose group was already applied fails on
   the progress counter, or, once the batch is finished and its progress counters are gone, on the
   marker. When every piece is done, the marker is emptied (``b""``: applied, as a one-write batch
   leaves it; this is the finish point) and only then does the staging subtree go.

``has_marker`` on a committed, unfinished batch finishes it first, so the replay of a task that died
mid-apply completes the batch instead of skipping it. A batch without a marker gets a private one
(removed once applied); having no replay, it is finished by the function's next large batch or by
``finish_pending_batches()``. A reader may see a large batch half applied (each
key's value is always whole, and each key's changelog records follow its commit order); once the batch
completes, it has been applied exactly once.
"""

from __future__ import annotations

import contextlib
import functools
import os
import struct
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Protocol

from statekeep.errors import AlreadyExistsError, BadVersionError, CorruptStateError, NotFoundError
from statekeep.metadata import Check, GetResult, MetadataStore, Op, Put
from statekeep.state.base import BatchLimits

_HEAD = struct.Struct(">BH")  # flags, key length
_LEN = struct.Struct(">I")
_DELTA = struct.Struct(">q")
_PUT, _DELETE, _DELTA_FLAG = 1, 2, 4
PIECE_OVERHEAD = _HEAD.size + _LEN.size + _DELTA.size
#: markers of batches applied without one (removed once applied)
ANONYMOUS = "\x00batch-"
ANONYMOUS_SEGMENT = "!00batch-"  # encode_key(ANONYMOUS)


class Item(NamedTuple):
    """One key's change in a batch: ``put`` (bytes, None to delete, or absent) and ``delta`` (a
    counter increment, or None); both set: the key ends as a counter equal to ``delta``."""

    key: str
    path: str
    has_put: bool
    put: bytes | None
    delta: int | None


def encode_piece(items: Sequence[Item]) -> bytes:
    out = bytearray()
    for item in items:
        key = item.key.encode()
        flags = (_PUT if item.has_put and item.put is not None else 0) | \
                (_DELETE if item.has_put and item.put is None else 0) | (_DELTA_FLAG if item.delta is not None else 0)
        out += _HEAD.pack(flags, len(key)) + key
        if flags & _PUT:
            out += _LEN.pack(len(item.put)) + item.put  # type: ignore[arg-type,operator]  # set: _PUT
        if flags & _DELTA_FLAG:
            out += _DELTA.pack(item.delta)
    return bytes(out)


def decode_piece(raw: bytes, path_of: Callable[[str], str], where: str) -> list[Item]:
    items, pos = [], 0
    try:
        while pos < len(raw):
            flags, n = _HEAD.unpack_from(raw, pos)
            pos += _HEAD.size
            key = raw[pos:pos + n].decode()
            pos += n
            put = None
            if flags & _PUT:
                (size,) = _LEN.unpack_from(raw, pos)
                put = raw[pos + _LEN.size:pos + _LEN.size + size]
                pos += _LEN.size + size
            delta = None
            if flags & _DELTA_FLAG:
                (delta,) = _DELTA.unpack_from(raw, pos)
                pos += _DELTA.size
            items.append(Item(key, path_of(key), bool(flags & (_PUT | _DELETE)), put, delta))
    except (struct.error, UnicodeDecodeError) as e:
        raise CorruptStateError(f"staged batch piece {where} is malformed: {e}") from e
    return items


def split(items: Sequence[Item], max_keys: int, max_bytes: int, size_of: Callable[[Item], int]) -> list[list[Item]]:
    """``items`` in order, cut into groups of at most ``max_keys`` keys and ``max_bytes`` (as
    ``size_of`` counts them; a single item larger than that forms a group of its own)."""
    groups: list[list[Item]] = [[]]
    size = 0
    for item in items:
        n = size_of(item)
        if groups[-1] and (len(groups[-1]) >= max_keys or size + n > max_bytes):
            groups.append([])
            size = 0
        groups[-1].append(item)
        size += n
    return groups if groups[0] else []


def piece_size(item: Item) -> int:
    return PIECE_OVERHEAD + len(item.key) * 4 + len(item.put or b"")


_stagers: ThreadPoolExecutor | None = None
_stagers_lock = threading.Lock()


def _forget_stagers() -> None:
    global _stagers
    _stagers = None  # a forked child has none of the pool's threads: it makes its own


os.register_at_fork(after_in_child=_forget_stagers)


def _overlapped(fn: Callable[[int], object], n: int) -> None:
    """``fn(i)`` for i in range(n), up to 8 at once (writes of pieces overlap on networked stores)."""
    global _stagers
    with _stagers_lock:
        if _stagers is None:
            _stagers = ThreadPoolExecutor(max_workers=8, thread_name_prefix="statekeep-stage")
        pool = _stagers
    for future in [pool.submit(fn, i) for i in range(n)]:
        future.result()


class StagingTarget(Protocol):
    """What staged batches need of the state store they commit for (the ``metadata`` provider's
    :class:`~statekeep.state.metadata.store.MetadataStateStore`): where it keeps things, and its
    one-write apply of a group of items (which retries lost races and calls ``done()`` to tell a group
    another applier already applied)."""

    @property
    def metadata_store(self) -> MetadataStore: ...

    @property
    def batch_limits(self) -> BatchLimits: ...

    base: str  # the function's subtree: staging goes under base + "/staging/"
    applied_root: str  # markers live at applied_root + encoded marker

    def path_of(self, key: str) -> str: ...

    def write_size(self, item: Item) -> int: ...

    def stored_of(self, item: Item, current: GetResult | None) -> bytes | None: ...

    def read_items(self, items: Sequence[Item]) -> list[GetResult | None]: ...

    def apply_items(self, items: Sequence[Item], extra: Callable[[], list[Op]], done: Callable[[], bool],
                    currents: Sequence[GetResult | None] | None = None) -> bool: ...


class StagedBatches:
    """The three steps above over one function's state store (see the module docstring)."""

    def __init__(self, state: StagingTarget) -> None:
        self.state = state
        self.store = state.metadata_store
        self.staging = state.base + "/staging/"

    def apply(self, items: list[Item], marker_path: str, segment: str, anonymous: bool) -> bool:
        """Stage, commit and apply ``items``; False (nothing written) if the marker was committed
        before (that batch is finished first if a crash left it unfinished). Every item is checked
        against the current state before the commit, so a batch that would fail writes nothing."""
        if self.finish(marker_path, segment):
            return False
        self.finish_all()  # batches without a marker that a crash interrupted have no replay to finish them
        currents = self.state.read_items(items)
        for item, current in zip(items, currents):
            self.state.stored_of(item, current)  # raises before anything is written
        pieces = list(split(items, 1 << 30, self.store.max_value_size - 1024, piece_size))
        attempt = uuid.uuid4().hex
        root = f"{self.staging}{segment}/{attempt}"
        _overlapped(lambda i: self.store.put(f"{root}/c{i:06d}", encode_piece(pieces[i]), -1), len(pieces))
        try:
            committed = self.store.put(marker_path, attempt.encode(), -1)  # the commit point
        except (AlreadyExistsError, BadVersionError):  # another attempt of this batch committed first
            found = self.store.get(marker_path)
            if found is None or found.value != attempt.encode():  # (not this one, sent again after a lost answer)
                self.store.delete_recursive(root)
                self.finish(marker_path, segment)
                return False
            committed = found.stat
        known = {item.path: current for item, current in zip(items, currents)}
        self._roll_forward(Check(marker_path, committed.version), segment, attempt, anonymous, pieces, known)
        return True

    def finish(self, marker_path: str, segment: str, anonymous: bool = False) -> bool:
        """Whether the batch of ``marker_path`` was committed; if it is unfinished, finish it first."""
        found = self.store.get(marker_path)
        if found is None:
            return False
        if found.value:
            self._roll_forward(Check(marker_path, found.stat.version), segment, found.value.decode(), anonymous)
        return True

    def finish_all(self) -> int:
        """Finish every committed, unfinished batch of this function (and remove what a crash after
        a batch's finish point left of its staging); returns how many batches it finished."""
        finished = 0
        for segment in self.store.get_children(self.staging[:-1]):
            marker_path = self.state.applied_root + segment
            anonymous = segment.startswith(ANONYMOUS_SEGMENT)
            found = self.store.get(marker_path)
            if found is None:
                continue  # not committed (yet): its stager commits it or removes its staging
            if found.value:
                self._roll_forward(Check(marker_path, found.stat.version), segment, found.value.decode(), anonymous)
                finished += 1
            else:
                self._clean_up(marker_path, segment, anonymous)
        return finished

    def _roll_forward(self, unfinished: Check, segment: str, attempt: str, anonymous: bool,
                      pieces: list[list[Item]] | None = None, known: dict[str, Any] | None = None) -> None:
        """Apply every group of every piece not applied yet (``pieces`` and the ``known`` current
        values when this process staged them; else read from the store), then finish the batch and
        clean up. ``unfinished`` checks that the marker still holds ``attempt``: every group's write
        carries it, so no group is applied again once the batch is finished."""
        root = f"{self.staging}{segment}/{attempt}"
        if pieces is None:
            names = [n[1:] for n in self.store.get_children(root) if n.startswith("c")]
        else:
            names = [f"{i:06d}" for i in range(len(pieces))]
        limits = self.state.batch_limits
        for i, name in enumerate(names):
            if pieces is not None:
                items = pieces[i]
            else:
                piece = self.store.get(f"{root}/c{name}")
                if piece is None:
                    continue
                items = decode_piece(piece.value, self.state.path_of, f"{root}/c{name}")
            progress = f"{root}/p{name}"
            for g, group in enumerate(split(items, limits.max_keys, limits.max_bytes, self.state.write_size)):
                self.state.apply_items(group, functools.partial(_progress_put, unfinished, progress, g),
                                        functools.partial(self._applied, unfinished, progress, g),
                                        None if known is None else [known[item.path] for item in group])
        with contextlib.suppress(NotFoundError, BadVersionError):  # another applier finished it first
            self.store.put(unfinished.path, b"", unfinished.version)  # the finish point
        self._clean_up(unfinished.path, segment, anonymous)

    def _clean_up(self, marker_path: str, segment: str, anonymous: bool) -> None:
        """After the finish point: the staging goes, and a private marker too."""
        self.store.delete_recursive(f"{self.staging}{segment}")
        if anonymous:
            with contextlib.suppress(NotFoundError):
                self.store.delete(marker_path)

    def _applied(self, unfinished: Check, progress: str, group: int) -> bool:
        """Whether ``group`` of a piece was applied: its progress counts it, or the batch was
        finished (by another applier, which applied every group before)."""
        found = self.store.get(progress)
        if found is not None and found.stat.version >= group:
            return True
        marker = self.store.get(unfinished.path)
        return marker is None or marker.stat.version != unfinished.version


def _progress_put(unfinished: Check, progress: str, group: int) -> list[Op]:
    """The write that records group ``group`` of a piece as applied (a compare-and-set on its count),
    valid only while the batch is unfinished."""
    return [unfinished, Put(progress, b"", group - 1)]
