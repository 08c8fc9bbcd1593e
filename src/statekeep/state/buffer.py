"""One batch's write buffer over a function's state: what a micro-batch (or a trigger) reads and writes
between the store's ``fetch_many`` and its one ``apply_batch`` (:class:`~statekeep.state.base.TaskState`).
The function's ``Context`` works on it; the runtime commits :attr:`BufferedState.puts` and
:attr:`BufferedState.counter_deltas` with the batch's marker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.keys import check_key, valid_key
from statekeep.state.records import COUNTER_MAX, COUNTER_MIN

_ABSENT = object()  # a dict lookup's default: no entry (None is a buffered delete)


class BufferedState:
    """One batch's view of a function's state.

    ``fetch(keys)`` returns ``{key: (value_bytes_or_None, counter_or_None)}`` for every key asked.
    After the batch, :attr:`puts` (key -> bytes, or None for a delete) and :attr:`counter_deltas`
    (key -> amount, applied after the puts, so a delete then an increment restarts from zero) are
    what must be written. ``max_value_size`` is the store's limit, checked per put so that a value
    the store would refuse fails its own record rather than the batch's write.
    """

    def __init__(self, fetch: Callable[[Iterable[str]], Mapping[str, tuple[bytes | None, int | None]]],
                 max_value_size: int = 1 << 20,
                 scan: Callable[[str], Iterable[tuple[str, bytes]]] | None = None) -> None:
        self._fetch = fetch
        self._scan = scan
        self.max_value_size = max_value_size
        self._base: dict[str, tuple[bytes | None, int | None]] = {}
        self.puts: dict[str, bytes | None] = {}
        self.counter_deltas: dict[str, int] = {}
        #: None: nothing is taken back. A :class:`JournaledState`'s undo actions for the current record
        #: (run by its rollback): where state is held in memory beside these buffers (timers, window
        #: buffers; see statekeep.state.timekeeping), a change appends how to take it back.
        self.journal: list[Callable[[], None]] | None = None
        self._later: list[str] | None = None  # see prefetch_later

    def prefetch(self, keys: Iterable[str]) -> None:
        """Read ``keys`` not read yet in one bulk read (the store checks them)."""
        base = self._base
        missing = [k for k in keys if k not in base] if base else keys
        if missing:
            base.update(self._fetch(missing))

    def prefetch_later(self, keys: list[str]) -> None:
        """Read ``keys`` (the batch's record keys) in one bulk read at the batch's first read of a key not read yet,
        or never if there is none (a function whose state is all typed variables reads only their entries). A key
        the store refuses is left to its own read, which raises."""
        self._later = keys

    def _entry(self, key: str) -> tuple[bytes | None, int | None]:
        """A key's stored (value, counter); its first read checks it (:class:`InvalidArgumentError`)."""
        if key not in self._base:
            check_key(key)
            if self._later is not None:
                self._read_later()
            if key not in self._base:
                self._base.update(self._fetch([key]))
        return self._base[key]

    def _read_later(self) -> None:
        later, self._later = self._later, None
        assert later is not None
        try:
            self.prefetch(later)
        except InvalidArgumentError:
            self.prefetch([key for key in later if valid_key(key)])

    def get(self, key: str) -> bytes | None:
        put = self.puts.get(key, _ABSENT)  # once per record in typed functions: the common cases inlined
        if put is not _ABSENT:
            return put  # type: ignore[return-value]
        entry = self._base.get(key)
        return (entry if entry is not None else self._entry(key))[0]

    def put(self, key: str, value: bytes | None) -> None:
        self.puts[key] = value
        self.counter_deltas.pop(key, None)

    def scan(self, prefix: str) -> list[tuple[str, bytes]]:
        """``(key, value)`` of every key starting with ``prefix`` in key order, as this batch sees them: the
        stored keys (the task's prefix scan) with this batch's puts over them. Counters are not scanned (the typed
        variables that scan hold bytes). :class:`InvalidArgumentError` where the store gave no scan."""
        if self._scan is None:
            raise InvalidArgumentError("this state offers no prefix scan")
        found: dict[str, bytes] = {}
        base = self._base
        for key, value in self._scan(prefix):
            base.setdefault(key, (value, None))
            found[key] = value
        for key, put in self.puts.items():
            if key.startswith(prefix):
                if put is None:
                    found.pop(key, None)
                else:
                    found[key] = put
        return sorted(found.items())

    def _stored_counter(self, key: str, entry: tuple[bytes | None, int | None]) -> int:
        value, counter = entry
        if counter is None and value is not None:  # as the store would refuse it, but per record
            raise InvalidArgumentError(f"state key {key!r} holds bytes, not a counter")
        return counter or 0

    def get_counter(self, key: str) -> int:
        delta = self.counter_deltas.get(key, 0)
        if key in self.puts:  # deleted (or overwritten) in this batch: counts restart from zero
            return delta
        return self._stored_counter(key, self._entry(key)) + delta

    def incr(self, key: str, amount: int) -> int:
        # get_counter inlined: this runs once per record in counting functions
        delta = self.counter_deltas.get(key, 0) + amount
        if key in self.puts:
            value = delta
        else:
            base = self._base.get(key)
            if base is None:
                base = self._entry(key)
            value = (base[1] if base[1] is not None else self._stored_counter(key, base)) + delta
        if not COUNTER_MIN <= value <= COUNTER_MAX:
            raise InvalidArgumentError(f"counter {key!r} would overflow a signed 64-bit integer")
        self.counter_deltas[key] = delta
        return value

    def written(self) -> dict[str, tuple[bytes | None, int | None]]:
        """What each key this batch writes holds once :attr:`puts` and then :attr:`counter_deltas` are applied:
        ``{key: (bytes, None)}`` for a byte value, ``(None, counter)`` for a counter, ``(None, None)`` for a delete.
        A counter is its stored value plus its delta (the delta alone after a put or delete of the key in this
        batch); the stored values of counters this batch never read (``add_many``'s) are read in one bulk read. A
        delete of a key read as absent is left out (the write stores nothing for it). Raises
        :class:`InvalidArgumentError` for a delta on a key that holds bytes or a counter outside 64 bits, as the
        write would. What a concurrent writer (a REST increment) commits between this batch's read and its write
        is not in it."""
        if self._later is not None and self.counter_deltas:  # add_many reads nothing: the counters it left unread
            self._read_later()
        base, puts, deltas = self._base, self.puts, self.counter_deltas
        unread = [k for k in deltas if k not in puts and k not in base]
        if unread:
            base.update(self._fetch(unread))
        out: dict[str, tuple[bytes | None, int | None]] = {}
        for key, value in puts.items():
            if key in deltas:
                continue  # the counter below: a put or delete then increments restarts it from its delta
            if value is None and base.get(key, (b"", None)) == (None, None):
                continue  # absent before, absent after: nothing is written for it
            out[key] = (value, None)
        for key, delta in deltas.items():
            total = delta if key in puts else self._stored_counter(key, base[key]) + delta
            if not COUNTER_MIN <= total <= COUNTER_MAX:
                raise InvalidArgumentError(f"counter {key!r} would overflow a signed 64-bit integer")
            out[key] = (None, total)
        return out

    def add_many(self, keys: list[str], amounts: list[int]) -> None:
        """Buffer ``amounts`` as counter deltas of ``keys`` (a key may repeat), reading nothing: the
        stored values are checked (a key holding bytes, overflow) by the batch's write, which then
        fails whole. A running delta outside 64 bits raises here, before any of them is buffered."""
        deltas = self.counter_deltas
        new = dict.fromkeys(keys, 0)
        for key, amount in zip(keys, amounts):
            new[key] += amount
        for key, amount in new.items():
            total = deltas.get(key, 0) + amount
            if not COUNTER_MIN <= total <= COUNTER_MAX:
                raise InvalidArgumentError(f"counter {key!r} would overflow a signed 64-bit integer")
            new[key] = total
        deltas.update(new)


class JournaledState(BufferedState):
    """A :class:`BufferedState` that can take back one record's changes: :meth:`begin` before each
    record, :meth:`rollback` if it failed (retried, sent to the dead-letter output or skipped: its
    state changes must not be applied). Used only when the function's config asks for per-record
    error handling, so the default per-record path pays nothing for it."""


    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._undo_puts: dict[str, Any] = {}
        self._undo_deltas: dict[str, Any] = {}
        self.journal = []  # see BufferedState.journal

    def begin(self) -> None:
        self._undo_puts.clear()
        self._undo_deltas.clear()
        assert self.journal is not None  # always a list here
        self.journal.clear()

    def _remember(self, key: str) -> None:
        if key not in self._undo_puts:
            self._undo_puts[key] = self.puts.get(key, _ABSENT)
        if key not in self._undo_deltas:
            self._undo_deltas[key] = self.counter_deltas.get(key, _ABSENT)

    def rollback(self) -> None:
        """Restore the buffers as they were at :meth:`begin`, and run the record's :attr:`journal`
        (newest first)."""
        assert self.journal is not None  # always a list here
        for take_back in reversed(self.journal):
            take_back()
        for undo, target in ((self._undo_puts, self.puts), (self._undo_deltas, self.counter_deltas)):
            for key, old in undo.items():
                if old is _ABSENT:
                    target.pop(key, None)
                else:
                    target[key] = old
        self.begin()

    def put(self, key: str, value: bytes | None) -> None:
        self._remember(key)
        super().put(key, value)

    def incr(self, key: str, amount: int) -> int:
        self._remember(key)
        return super().incr(key, amount)

    def add_many(self, keys: list[str], amounts: list[int]) -> None:
        for key in keys:
            self._remember(key)
        super().add_many(keys, amounts)
