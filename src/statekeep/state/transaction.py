"""One (batch, partition)'s keyed state: :class:`KeyedTransaction`, the one owner of a partition's state changes in a
run, between the store and a function's Context (the role of Quix Streams' ``PartitionTransaction`` and Spark's
``StatefulProcessorHandle``).

It owns the batch's update cache (:class:`~statekeep.state.buffer.BufferedState`, read from the store in bulk and
written back in one atomic write) and a lifecycle: **open** (the function runs against it) → :meth:`prepared
<KeyedTransaction.prepare>` (its views -- the time state's timers, watermarks and TTL index, the windows' buffers --
flushed into the cache, the changes fixed; the changelog's records are made from them) → :meth:`committed
<KeyedTransaction.commit>` (changes and the (batch, partition) marker in one atomic write), or **failed** (a
commit that raised: nothing more is done with it). A checkpoint
(:class:`statekeep.functions.executor.checkpoint.Checkpoint`) calls the two in order around the outputs' keeping and
delivery.

It alone

- **checks and scopes keys**: a user's plain state key (:meth:`~KeyedTransaction.state_key`, the bulk forms'
  :meth:`~KeyedTransaction.state_keys`), the record key a typed variable belongs to
  (:meth:`~KeyedTransaction.record_key`: the current record's, the timer's inside ``on_timer``), another one named
  with ``.of(key)`` (:meth:`~KeyedTransaction.scoped`), a timer's (:meth:`~KeyedTransaction.timer_key`);
- **encodes entries**, one codec per entry kind: a plain value (bytes, or str as UTF-8, within the store's value
  limit: :func:`plain_value`), a counter's amount (:func:`counter_amount`), a typed variable's entry (its value's
  MessagePack behind its expiry: :meth:`~KeyedTransaction.write` and :meth:`~KeyedTransaction.payload`);
- **memoizes state keys** in one bounded memo (:func:`statekeep.lru.remember`): a typed entry's state key per
  (variable, record key, entry) and per map key, checked once; of it, the batch's record keys' per (variable,
  entry) (:meth:`~KeyedTransaction.entries`: a record's handle finds its key's with one lookup);
- **applies TTL** through the run's time state (``ttl``, the TTL index of
  :class:`statekeep.state.timekeeping.TimeState`; None: the function keeps none): an expired plain key
  reads as absent (an expired counter restarts from 0), a write sets or refreshes its expiry, a typed entry carries
  its expiry and is listed in the same index.

Every operation raises :class:`InvalidArgumentError` for what it refuses, before it buffers anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from statekeep.errors import InvalidArgumentError, StatekeepError
from statekeep.lru import memo, remember
from statekeep.state import timestate
from statekeep.state.base import TaskState, validate_value
from statekeep.state.buffer import BufferedState, JournaledState
from statekeep.state.keys import check_key, encode_key
from statekeep.state.timestate import check_ttl, check_user_key
from statekeep.state.typed import (EXPIRING, MAP_KEY_TYPES, Variable, checked_key, delete_elements, encode_entry,
                                   entry_payload, map_key_code, read_elements, variable_prefix)

#: how many state keys the memo holds per variable and entry before it starts again (a batch of more keys checks
#: them again)
MEMO_SIZE = 100_000
#: THE memo of state keys, shared by the process's transactions (a state key depends only on its parts, so a hot key
#: is derived and checked once, not once per batch): by (variable, entry) -- ``=`` a value, ``#`` a list's bounds,
#: ``m`` a map's entries -- then by record key (a map's: by (map prefix, key class, map key)) -> state key. A batch
#: looks its record keys up in one dict per variable. A lost entry (a clear, a race between threads) is only a miss.
_KEYS: dict[tuple[str, str], dict[Any, str]] = memo()


#: a transaction's states (:attr:`KeyedTransaction.status`)
OPEN, PREPARED, COMMITTED, FAILED = "open", "prepared", "committed", "failed"


class TransactionStateError(StatekeepError):
    """A transaction was asked for a step its state does not allow (prepared twice, committed unprepared, used
    after its commit): a bug of the caller, never of the data."""


class TTL(Protocol):
    """The TTL index a transaction applies (the run's time state)."""

    now: int
    ttl_ms: int | None  # the function's TTL of every entry without its own (stateTtlSeconds)

    def expired(self, key: str) -> bool: ...

    def prefetch_expiries(self, keys: Iterable[str]) -> None: ...

    def written(self, key: str, ttl_seconds: int | None) -> None: ...

    def deleted(self, key: str) -> None: ...

    def index(self, key: str, expires: int) -> None: ...


def plain_value(value: object, limit: int, op: str = "") -> bytes:
    """A plain state value as stored: bytes as they are, a str as UTF-8; :class:`InvalidArgumentError` for another
    type or a value over ``limit`` bytes (``op`` names the bulk operation)."""
    if isinstance(value, str):
        value = value.encode()
    elif not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"{op}: state values are bytes or str, not {type(value).__name__}" if op else
                                   f"state values are bytes or str, not {type(value).__name__}")
    return validate_value(value, limit)


def counter_amount(amount: object, op: str = "") -> int:
    """A counter's amount: an int, not a bool; :class:`InvalidArgumentError` otherwise."""
    if amount.__class__ is not int and (isinstance(amount, bool) or not isinstance(amount, int)):
        raise InvalidArgumentError(f"{op}: a counter amount must be an int, not {type(amount).__name__} ({amount!r})"
                                   if op else f"a counter amount must be an int, not {type(amount).__name__}")
    return amount  # an int (checked above)


def _listed(items: object, op: str, what: str, kind: str = "sequence") -> list[Any]:
    """``items`` (a pyarrow Array or ChunkedArray, a numpy/pandas array, or any iterable) as a list."""
    if hasattr(items, "to_pylist"):  # pyarrow
        items = items.to_pylist()
    elif hasattr(items, "tolist"):  # numpy, pandas
        items = items.tolist()
    try:  # any iterable: list() raises TypeError otherwise
        listed: list[Any] = list(items)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(f"{op}: {what} must be a {kind}, not {type(items).__name__}") from None
    return listed


class KeyedTransaction:
    """See the module docstring. ``state``: the batch's buffer; ``key_of()``: the current record's key (None:
    none); ``batch_keys()``: the batch's record keys (a typed variable's first read prefetches its entry of
    each); ``ttl`` (:meth:`keep_time`): the run's TTL index."""

    def __init__(self, state: BufferedState, key_of: Callable[[], str | None] = lambda: None,
                 batch_keys: Callable[[], Iterable[Any]] = tuple, *, store: TaskState | None = None) -> None:
        self.state, self.key_of, self._batch_keys = state, key_of, batch_keys
        self.store = store  # where commit() writes (None: a transaction whose caller commits its buffer)
        self.status = OPEN
        self.ttl: TTL | None = None
        self._now: int | None = None
        self._keys = _KEYS
        self._batch: dict[tuple[str, str], dict[Any, str]] = {}  # (variable, entry) -> see entries()
        self._views: list[Callable[[], None]] = []  # see view()

    @classmethod
    def begin(cls, store: TaskState, *, careful: bool = False) -> KeyedTransaction:
        """An open transaction over ``store``'s state: nothing read yet (reads go in bulk, on first use). ``careful``:
        its cache can take back one record's changes (:class:`~statekeep.state.buffer.JournaledState`)."""
        buffer = (JournaledState if careful else BufferedState)(store.fetch_many, store.max_value_size, store.scan)
        return cls(buffer, store=store)

    def follow(self, key_of: Callable[[], str | None], batch_keys: Callable[[], Iterable[Any]]) -> None:
        """Read the current record's key from ``key_of()`` and the batch's record keys from ``batch_keys()`` (the
        Context's record cursor)."""
        self.key_of, self._batch_keys = key_of, batch_keys

    def view(self, flush: Callable[[], None]) -> None:
        """Register a view kept in memory over this transaction (the time state, the windows): ``flush()`` writes it
        into the cache at :meth:`prepare`, in the order registered."""
        self._views.append(flush)

    def _check(self, status: str, step: str) -> None:
        if self.status != status:
            raise TransactionStateError(f"a keyed-state transaction cannot {step} when {self.status}")

    def prepare(self, changes: bool = False) -> dict[str, tuple[bytes | None, int | None]] | None:
        """Flush the views into the cache and fix the changes: nothing may change after this. Returns them
        (``changes``: what each written key holds after the commit, as
        :meth:`~statekeep.state.buffer.BufferedState.written`, for a changelog's records), else None. Raises as
        a view's flush does (:class:`InvalidArgumentError` for a value the store would refuse; the transaction is
        then failed), :class:`TransactionStateError` unless open."""
        self._check(OPEN, "be prepared")
        try:
            for flush in self._views:
                flush()
            written = self.state.written() if changes else None
        except BaseException:
            self.status = FAILED
            raise
        self.status = PREPARED
        return written

    def commit(self, marker: str | None = None) -> bool:
        """Write the prepared changes, with ``marker`` (``"{batch}-{partition}"``; None: none), in one atomic write
        (:meth:`~statekeep.state.base.TaskState.apply_batch`). Returns False, having written nothing, when the
        marker was applied already; raises as ``apply_batch`` does, and the transaction is then failed.
        :class:`TransactionStateError` unless prepared or without a store."""
        self._check(PREPARED, "commit")
        if self.store is None:
            raise TransactionStateError("this keyed-state transaction has no store to commit to")
        try:
            applied = self.store.apply_batch(self.state.puts, self.state.counter_deltas, marker=marker)
        except BaseException:
            self.status = FAILED
            raise
        self.status = COMMITTED
        return applied

    def keep_time(self, ttl: TTL) -> None:
        """Apply ``ttl``, the run's time state (its batch time is the transaction's :meth:`now`)."""
        self.ttl = ttl

    def now(self) -> int:
        """The batch's time in ms: its time state's, else the clock's when first asked (one per batch)."""
        if self.ttl is not None:
            return self.ttl.now
        if self._now is None:
            self._now = timestate.wall_clock_ms()
        return self._now

    # ---- keys ------------------------------------------------------------------------------------

    @staticmethod
    def state_key(key: object) -> str:
        """``key`` as a user's plain state key: what the store takes, outside statekeep's reserved namespace."""
        encode_key(key)  # raises InvalidArgumentError for what the store would refuse (cached for hot keys)
        if key[0] == "\x00":  # type: ignore[index]  # a non-empty str (encode_key accepted it)
            check_user_key(key)  # type: ignore[arg-type]  # statekeep's own time state: refused
        return key  # type: ignore[return-value]  # encode_key accepted it, so it is a str

    @staticmethod
    def state_keys(keys: object, op: str) -> list[str]:
        """``keys`` (a pyarrow Array or ChunkedArray, a numpy/pandas array, or any sequence of str) as a list of
        valid state keys; :class:`InvalidArgumentError` naming ``op`` otherwise."""
        if isinstance(keys, (str, bytes)):
            raise InvalidArgumentError(f"{op}: keys must be a sequence of str, not one {type(keys).__name__}")
        key_list: list[str] = _listed(keys, op, "keys", "sequence of str")
        for key in key_list:
            try:
                check_user_key(encode_key(key) and key)
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f"{op}: {e}") from None
        return key_list

    def record_key(self, bound: str | None, var: Variable) -> str:
        """The record key ``var``'s entries belong to: ``bound`` (``.of(key)``), else the current record's (the
        timer's inside ``on_timer``); :class:`InvalidArgumentError` if there is none."""
        key = bound if bound is not None else self.key_of()
        if key is None:
            raise InvalidArgumentError(f"state variable {var.name!r} belongs to a record's key, and this record has "
                                       "none: give the function a key (keyField, or the operator's key column) or "
                                       "name one with .of(key)")
        return key

    @staticmethod
    def scoped(key: object) -> str:
        """``key`` as the record key of ``.of(key)``: a non-empty str."""
        if not isinstance(key, str) or not key:
            raise InvalidArgumentError(f"a record key is a non-empty str, not {key!r}")
        return key

    def timer_key(self, key: object) -> str:
        """The key a timer belongs to: ``key``, else the current record's (the timer's inside ``on_timer``; "" for
        records without a key); :class:`InvalidArgumentError` for a non-str or one starting with NUL."""
        if key is None:
            return self.key_of() or ""
        if not isinstance(key, str) or key[:1] == "\x00":
            raise InvalidArgumentError(f"a timer's key must be a str not starting with NUL, not {key!r}")
        return key

    # ---- plain state -------------------------------------------------------------------------------
    # without a TTL a plain str key outside the reserved namespace goes straight to the buffer, which checks a key
    # on its first read (BufferedState); any other key goes through state_key

    def _ttl_seconds(self, ttl_seconds: object) -> None:
        """Raise unless ``ttl_seconds`` can be applied (before anything is buffered)."""
        if self.ttl is None:
            raise InvalidArgumentError("ttl_seconds: this function keeps no time state (define on_timer, a "
                                       "windowConfig or stateTtlSeconds)")
        check_ttl(ttl_seconds)

    def get(self, key: str) -> bytes | None:
        ttl = self.ttl
        if ttl is None and key.__class__ is str and key[:1] != "\x00":
            return self.state.get(key)
        key = self.state_key(key)
        return None if ttl is not None and ttl.expired(key) else self.state.get(key)

    def put(self, key: str, value: bytes | str, ttl_seconds: int | None = None) -> None:
        raw = plain_value(value, self.state.max_value_size)
        if ttl_seconds is not None:
            self._ttl_seconds(ttl_seconds)
        self.state.put(self.state_key(key), raw)
        if self.ttl is not None:
            self.ttl.written(key, ttl_seconds)

    def delete(self, key: str) -> None:
        self.state.put(self.state_key(key), None)
        if self.ttl is not None:
            self.ttl.deleted(key)

    def incr(self, key: str, amount: int, ttl_seconds: int | None = None) -> int:
        counter_amount(amount)
        ttl = self.ttl
        if ttl_seconds is not None:
            self._ttl_seconds(ttl_seconds)
        elif ttl is None:
            return self.state.incr(key if key.__class__ is str and key[:1] != "\x00" else self.state_key(key), amount)
        assert ttl is not None  # checked by _ttl_seconds
        key = self.state_key(key)
        if ttl.expired(key):
            self.state.put(key, None)
        value = self.state.incr(key, amount)
        ttl.written(key, ttl_seconds)
        return value

    def counter(self, key: str) -> int:
        ttl = self.ttl
        if ttl is None and key.__class__ is str and key[:1] != "\x00":
            return self.state.get_counter(key)
        key = self.state_key(key)
        return 0 if ttl is not None and ttl.expired(key) else self.state.get_counter(key)

    # bulk forms: each all or nothing (everything checked before anything is buffered), keys read in one bulk read

    def incr_many(self, keys: Any, amounts: Any = 1) -> None:
        key_list = self.state_keys(keys, "incr_counters")
        if amounts.__class__ is int or (isinstance(amounts, int) and not isinstance(amounts, bool)):
            amount_list = [amounts] * len(key_list)
        else:
            amount_list = [counter_amount(a, "incr_counters")
                           for a in self._aligned(amounts, len(key_list), "incr_counters", "amounts")]
        ttl = self.ttl
        if ttl is not None:  # expired counters restart; every key's expiry is refreshed
            ttl.prefetch_expiries(key_list)
            for key in dict.fromkeys(key_list):
                if ttl.expired(key):
                    self.state.put(key, None)
        self.state.add_many(key_list, amount_list)
        if ttl is not None:
            for key in dict.fromkeys(key_list):
                ttl.written(key, None)

    def counters(self, keys: Any) -> list[int]:
        key_list = self.state_keys(keys, "get_counters")
        self.state.prefetch(key_list)
        get, ttl = self.state.get_counter, self.ttl
        if ttl is not None:
            ttl.prefetch_expiries(key_list)
            return [0 if ttl.expired(k) else get(k) for k in key_list]
        return [get(k) for k in key_list]

    def get_many(self, keys: Any) -> list[bytes | None]:
        key_list = self.state_keys(keys, "get_states")
        self.state.prefetch(key_list)
        get, ttl = self.state.get, self.ttl
        if ttl is not None:
            ttl.prefetch_expiries(key_list)
            return [None if ttl.expired(k) else get(k) for k in key_list]
        return [get(k) for k in key_list]

    def put_many(self, keys: Any, values: Any) -> None:
        key_list = self.state_keys(keys, "put_states")
        limit = self.state.max_value_size
        checked = []
        for key, value in zip(key_list, self._aligned(values, len(key_list), "put_states", "values")):
            try:
                checked.append(plain_value(value, limit, "put_states"))
            except InvalidArgumentError as e:
                raise InvalidArgumentError(f"{e} (key {key!r})") from None
        for key, raw in zip(key_list, checked):
            self.state.put(key, raw)
        if self.ttl is not None:
            for key in dict.fromkeys(key_list):
                self.ttl.written(key, None)

    def delete_many(self, keys: Any) -> None:
        for key in self.state_keys(keys, "del_states"):
            self.state.put(key, None)
            if self.ttl is not None:
                self.ttl.deleted(key)

    @staticmethod
    def _aligned(values: object, n: int, op: str, what: str) -> list[Any]:
        """``values`` (as :meth:`state_keys` takes keys) as a list of exactly ``n`` items."""
        value_list = _listed(values, op, what)
        if len(value_list) != n:
            raise InvalidArgumentError(f"{op}: {n} keys but {len(value_list)} {what} (one per key)")
        return value_list

    # ---- typed variables' entries ------------------------------------------------------------------------

    def at(self, bound: str | None, var: Variable, suffix: str) -> str:
        """The state key of ``var``'s entry ``suffix`` (``=``: a value, ``#``: a list's bounds) of the record key
        (``bound``, else the current record's), from the memo."""
        key = bound if bound is not None else self.key_of()
        if key is None:
            key = self.record_key(None, var)  # raises: no key
        batch = self.entries(var, suffix)
        found = batch.get(key)
        if found is None:  # a key outside the batch's record keys (``.of(key)``, a timer's, a message's own)
            memo = self._memo(var.name, suffix)
            found = memo.get(key)
            if found is None:
                found = remember(memo, key, checked_key(variable_prefix(key, var.name) + suffix, var.name), MEMO_SIZE)
        return found

    def _memo(self, name: str, entry: str) -> dict[Any, str]:
        """The memo's state keys of variable ``name``'s entry ``entry``."""
        memo = self._keys.get((name, entry))
        return memo if memo is not None else self._keys.setdefault((name, entry), {})

    def entries(self, var: Variable, suffix: str) -> dict[Any, str]:
        """The state keys of ``var``'s entry ``suffix`` of the batch's record keys (those the store takes), by
        record key. The first call in the batch derives them (from the memo where it can) and reads them all in
        one bulk read, as the runtime reads the record keys themselves; the memo starts again (with the batch's)
        if the batch's new state keys would take it past ``MEMO_SIZE``, and may then hold the batch's beyond that
        until its next start. Once per distinct key of the batch, so written out."""
        found = self._batch.get((var.name, suffix))
        if found is not None:
            return found
        name, memo = var.name, self._memo(var.name, suffix)
        keys = dict.fromkeys(self._batch_keys())
        batch = {key: at for key in keys if (at := memo.get(key)) is not None}
        if len(batch) < len(keys):  # keys the memo does not hold (or none: no key)
            new = {}
            for key in keys:
                if key not in batch and isinstance(key, str) and key:
                    state_key = variable_prefix(key, name) + suffix
                    try:
                        check_key(state_key)
                    except InvalidArgumentError:
                        continue  # too long: its own read says so
                    new[key] = state_key
            batch.update(new)
            if len(memo) + len(new) > MEMO_SIZE:
                memo.clear()
                new = batch
            memo.update(new)
        self._batch[(name, suffix)] = batch
        self.state.prefetch(list(batch.values()))
        return batch

    def map_entry(self, prefix: str, var: Variable, key: Any) -> str:
        """The state key of map ``var``'s entry of ``key`` (under the map's ``prefix``), from the memo (a map's get
        then put checks it once); :class:`InvalidArgumentError` for a key of another type or too long."""
        entry = (prefix, key.__class__, key) if key.__class__ in MAP_KEY_TYPES else None  # else unhashable maybe
        memo = self._memo(var.name, "m")
        found = memo.get(entry) if entry is not None else None
        if found is None:
            assert var.key is not None  # a map variable has a key type
            var.key.check(key)
            found = checked_key(prefix + "m" + map_key_code(key), var.name, key)
            if entry is not None:
                remember(memo, entry, found, MEMO_SIZE)
        return found

    def expires(self, var: Variable) -> int | None:
        """When an entry of ``var`` written now expires: after its own TTL, else the function's (``stateTtlSeconds``,
        as for a plain key); None: it has neither."""
        ttl_ms = var.ttl_ms
        if ttl_ms is None:
            ttl = self.ttl
            if ttl is None or ttl.ttl_ms is None:
                return None
            ttl_ms = ttl.ttl_ms
        return self.now() + ttl_ms

    def write(self, state_key: str, payload: bytes, expires: int | None) -> None:
        """Buffer a typed entry: its value's ``payload`` behind its expiry (None: none, see :meth:`expires`), listed
        in the TTL index."""
        if expires is None:
            self.state.put(state_key, payload)
            return
        self.state.put(state_key, encode_entry(payload, expires))
        assert self.ttl is not None  # a variable with a TTL is opened only where there is an index
        self.ttl.index(state_key, expires)

    def payload(self, state_key: str, raw: bytes | None) -> bytes | memoryview | None:
        """The value of a typed entry as read (``raw`` at ``state_key``); None if absent or expired (an expired one
        is deleted with the batch)."""
        if raw is None or raw[0] != EXPIRING:
            return raw
        found = entry_payload(raw, self.now())
        if found is None:
            self.state.put(state_key, None)
        return found

    def read(self, state_key: str) -> bytes | memoryview | None:
        """A typed entry's value (:meth:`payload` of what the batch holds at ``state_key``)."""
        return self.payload(state_key, self.state.get(state_key))

    def stored(self, state_key: str) -> bytes | None:
        """A typed entry as the batch holds it (its expiry, if any, still in front: see :meth:`payload`)."""
        return self.state.get(state_key)

    def remove(self, state_key: str) -> None:
        """Delete a typed entry with the batch."""
        self.state.put(state_key, None)

    def prefetch(self, state_keys: Iterable[str]) -> None:
        """Read typed entries not read yet in one bulk read."""
        self.state.prefetch(state_keys)

    def scan(self, prefix: str) -> list[tuple[str, bytes]]:
        """The typed entries under ``prefix`` as the batch sees them, in key order (see
        :meth:`~statekeep.state.buffer.BufferedState.scan`)."""
        return self.state.scan(prefix)

    def elements(self, prefix: str, first: int, end: int) -> list[tuple[str, bytes | None]]:
        """Elements ``first`` to ``end`` - 1 of the list ``prefix`` as (state key, stored entry or None), in order,
        read in one bulk read."""
        return read_elements(self.state, prefix, first, end)

    def remove_elements(self, prefix: str, first: int, end: int) -> None:
        """Delete elements ``first`` to ``end`` - 1 of the list ``prefix`` with the batch."""
        delete_elements(self.state, prefix, first, end)
