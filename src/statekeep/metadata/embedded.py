"""The embedded engine seam: what code outside a backend may use of the LMDB environment a store keeps its
data in (the embedded state provider, follower replicas, partition-owned state), and the fork safety every
LMDB transaction in this process takes part in.

    if has_embedded_engine(store):                  # the one rule: the store's "embedded_state" capability
        engine = embedded_engine(store)             # InvalidArgumentError for a store without one
        db = engine.open_db(b"my_db")
        with engine.read(db) as txn:                # a counted read transaction
            value = txn.get(b"key")
        engine.submit(lambda reader, now_ms: (reader.txn.put(b"key", b"v", db=db), None))  # durable on return

Fork safety. LMDB forbids using an environment across ``fork()``. A child that opens a store must first close
the inherited environment, and closing ends every transaction other threads of the parent had open at the fork
(a write transaction only its own thread can end: the close hangs; ending a read frees the parent's reader slot,
and that reader loses its snapshot). So ``fork()`` waits until no transaction is open in this process and holds
new ones back until it is done (:data:`FORK_GATE`; ``local.py`` registers the fork hooks). Hence every LMDB
transaction opens through :class:`transaction` (or :meth:`EmbeddedEngine.read`), never ``env.begin()``, except
the hottest reads, which are marked :func:`uncounted_read`.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, Protocol, TypeVar

import lmdb

from statekeep.errors import InvalidArgumentError, StatekeepError
from statekeep.metadata._tree import Changes
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.registry import backend_class

#: The capability (:attr:`MetadataStore.capabilities`) of a store that has an embedded engine.
EMBEDDED_STATE = "embedded_state"
#: How long ``fork()`` waits for open transactions to end before it forks anyway.
FORK_WAIT_S = 5.0


# ---- the fork gate ---------------------------------------------------------------------------------

class ForkGate:
    """The state ``fork()`` and LMDB transactions share; one per process, :data:`FORK_GATE`.

    ``open_txns``: one entry per open counted transaction (list append and pop are atomic under the GIL,
    and cheaper than a lock on the read path). ``pending``: a fork is under way; a transaction that sees it
    after counting itself calls :meth:`hold`. Plain attributes, so a hot read checks ``FORK_GATE.pending``
    with one attribute load."""

    __slots__ = ("pending", "open_txns", "_cond")

    def __init__(self) -> None:
        self.pending = False
        self.open_txns: list[None] = []
        self._cond = threading.Condition()

    def hold(self) -> None:
        """Called by a transaction (already counted) that found a fork under way: wait until it is done."""
        while self.pending:
            self.open_txns.pop()
            with self._cond:
                while self.pending:
                    self._cond.wait()
            self.open_txns.append(None)

    def before_fork(self, wait_s: float = FORK_WAIT_S) -> bool:
        """Hold new transactions back and wait up to ``wait_s`` for the open ones (counted, and uncounted
        reads) to end; True if none is left open."""
        with self._cond:
            self.pending = True
        deadline = time.monotonic() + wait_s
        while (self.open_txns or _uncounted_reads_running()) and time.monotonic() < deadline:
            time.sleep(0.0002)  # transactions are short; scans are the exception
        return not (self.open_txns or _uncounted_reads_running())

    def after_fork_in_parent(self) -> None:
        """Let the held transactions go on."""
        with self._cond:
            self.pending = False
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        """Open again, and forget the transactions of the parent's other threads (they do not exist here)."""
        self.pending, self._cond = False, threading.Condition()
        self.open_txns.clear()


FORK_GATE = ForkGate()
_open_txns = FORK_GATE.open_txns  # the same list for the life of the process (cleared, never replaced)


# The hottest reads (LocalStore.get, the embedded provider's get and get_counter) do not count themselves:
# they check FORK_GATE.pending and otherwise open, use and end their transaction without leaving their own
# frame, so fork() finds them by their code on the threads' stacks and waits for them too. A read that sees
# a fork pending takes the counted path instead.
_uncounted_reads: set[CodeType] = set()
_F = TypeVar("_F", bound=Callable[..., Any])


def uncounted_read(function: _F) -> _F:
    """Mark ``function`` as a read that opens and ends an LMDB transaction within its own frame without
    counting it (see above); it must check ``FORK_GATE.pending`` before opening one, and take a counted
    :class:`transaction` if set."""
    _uncounted_reads.add(function.__code__)
    return function


def _uncounted_reads_running() -> bool:
    """Whether another thread is inside an uncounted read. One waiting in :meth:`ForkGate.hold` above such a
    frame holds no transaction of it: the read took its counted path, which it enters with none open."""
    me = threading.get_ident()
    hold = ForkGate.hold.__code__
    for ident, top in sys._current_frames().items():
        if ident != me:
            frame: FrameType | None = top
            while frame is not None and frame.f_code is not hold:
                if frame.f_code in _uncounted_reads:
                    return True
                frame = frame.f_back
    return False


class transaction:  # lower case: used like lmdb's own env.begin()
    """``with transaction(env, **kw) as txn:`` is ``with env.begin(**kw) as txn:`` (commit on success,
    abort on error), counted so that fork() never happens while it is open. Outside a ``with``, end it
    with :meth:`end` (or use :class:`held_transaction`)."""

    __slots__ = ("txn",)

    def __init__(self, env: lmdb.Environment, **options: Any) -> None:
        _open_txns.append(None)
        if FORK_GATE.pending:
            FORK_GATE.hold()
        try:
            self.txn: lmdb.Transaction | None = env.begin(**options)
        except BaseException:
            self.txn = None
            _open_txns.pop()
            raise

    def __enter__(self) -> lmdb.Transaction:
        return self.txn

    def __exit__(self, exc_type: object, *_: object) -> None:
        txn, self.txn = self.txn, None
        assert txn is not None, "a transaction ends once"
        try:
            if exc_type is None:
                txn.commit()
            else:
                txn.abort()
        finally:
            _open_txns.pop()

    def end(self) -> None:
        """Abort (end, for a read) the transaction; a no-op once ended."""
        if self.txn is not None:
            self.__exit__(BaseException)


class held_transaction(transaction):
    """A :class:`transaction` that its holder ends with :meth:`end`, e.g. one a lazy iterator reads
    from; aborted when collected if it never was (an iterator dropped before it started)."""

    __slots__ = ()

    def __del__(self) -> None:
        self.end()


def prefixed(cursor: lmdb.Cursor, prefix: bytes, start: bytes = b"", *, values: bool = True) -> Iterator[Any]:
    """``cursor``'s ``(key, value)`` items (its keys, without ``values``) from ``start`` (default: ``prefix``)
    on, in key order, while the keys start with ``prefix``."""
    if cursor.set_range(start or prefix):
        for item in cursor.iternext(values=values):
            if not (item[0] if values else item).startswith(prefix):
                return
            yield item


# ---- the engine ------------------------------------------------------------------------------------

class EngineReader(Protocol):
    """What :meth:`EmbeddedEngine.submit` hands to ``build``: the open write transaction."""

    @property
    def txn(self) -> lmdb.Transaction: ...


class EmbeddedEngine(Protocol):
    """An LMDB environment a store keeps its data in (``local://``: one per directory and process, shared
    by its stores). Other users keep their data in databases of their own (:meth:`open_db`)."""

    @property
    def env(self) -> lmdb.Environment:
        """The environment: for ``env.begin`` in an :func:`uncounted_read` only; else use :meth:`read`."""

    @property
    def directory(self) -> Path:
        """The store's directory."""

    def open_db(self, name: bytes) -> Any:
        """The named database ``name`` of the environment, created if absent (opened once per engine)."""

    def submit(self, build: Callable[[EngineReader, int], tuple[Any, Changes | None]]) -> Any:
        """A durable write: run ``build(reader, now_ms)`` in a write transaction and return its result once
        that transaction is committed and fsynced. Writers waiting at once share one transaction and one
        fsync (group commit), so ``build`` must raise before its first write, never after (its writes are
        not undone: a request that raises is skipped, the rest of the transaction commits). It returns
        ``(result, changes)``: ``changes`` are metadata-tree changes of the store itself; ``None`` for a
        user that writes its own databases only. :class:`StoreClosedError` once the engine is closed."""

    def read(self, db: Any = None) -> transaction:
        """A counted read :class:`transaction` (``with engine.read(db) as txn:``), on ``db`` by default."""


def has_embedded_engine(store: MetadataStore | type[MetadataStore] | str) -> bool:
    """Whether ``store`` (an open store, a store class, or a store URL: its backend class, nothing is opened)
    declares the :data:`EMBEDDED_STATE` capability. A URL naming no usable backend (malformed, an unknown
    scheme, a missing dependency) has none: opening it fails anyway."""
    if isinstance(store, str):
        scheme, found, _ = store.partition("://")
        if not found:
            return False
        try:
            store = backend_class(scheme)
        except (StatekeepError, ImportError):  # InvalidArgumentError, MissingDependencyError, a broken plugin
            return False
    return EMBEDDED_STATE in getattr(store, "capabilities", ())


def embedded_engine(store: MetadataStore) -> EmbeddedEngine:
    """The embedded engine of ``store``: the one way to reach it. :class:`InvalidArgumentError` unless
    ``store`` is a :class:`MetadataStore` that declares :data:`EMBEDDED_STATE` (and so has ``embedded_engine``)."""
    engine = getattr(store, "embedded_engine", None) if isinstance(store, MetadataStore) and \
        has_embedded_engine(store) else None
    if engine is None:
        what = f"a {store.scheme}:// store" if isinstance(store, MetadataStore) else repr(store)
        raise InvalidArgumentError(f"{what} has no embedded engine (it does not declare the {EMBEDDED_STATE!r} "
                                   "capability, as local://PATH does); use the 'metadata' state provider there")
    return engine  # type: ignore[no-any-return]
