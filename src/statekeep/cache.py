"""``MetadataCache[T]``: typed values of a ``MetadataStore``, served from memory, kept coherent by
notifications, updated by compare-and-set with bounded retries (after Pulsar PIP-45).

    cache = MetadataCache(store, serde=JsonSerde(Policy))
    policy = cache.get("/policies/t1")                       # a store read the first time only
    cache.read_modify_update("/policies/t1", lambda p: replace(p, limit=p.limit + 1))
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, cast

from statekeep.errors import BadVersionError, InvalidArgumentError, NotFoundError
from statekeep.metadata.base import Closing, MetadataStore
from statekeep.metadata.types import Notification, NotificationType, SessionEvent, Stat, validate_path
from statekeep.retry import DEFAULT as RETRY
from statekeep.validate import check_int

T = TypeVar("T")


class Serde(Protocol[T]):
    """Turns values into bytes and back. ``deserialize(serialize(v)) == v``; both raise
    :class:`InvalidArgumentError` for values or bytes they cannot handle."""

    def serialize(self, value: T) -> bytes: ...

    def deserialize(self, data: bytes) -> T: ...


class JsonSerde(Generic[T]):
    """UTF-8 JSON. With a dataclass type, values must be instances of it (fields become an object;
    nested dataclasses are written as objects and read back as dicts unless the outer type converts
    them); with any other type (``dict``, ``list``, ``int``...) values must be instances of that type;
    with no type, any JSON value."""

    def __init__(self, type_: type[T] | None = None) -> None:
        if type_ is not None and not isinstance(type_, type):
            raise InvalidArgumentError(f"JsonSerde needs a type, not {type_!r}")
        self.type = type_
        self._dataclass = type_ is not None and dataclasses.is_dataclass(type_)

    def serialize(self, value: T) -> bytes:
        if self.type is not None and not isinstance(value, self.type):
            raise InvalidArgumentError(f"expected {self.type.__name__}, got {type(value).__name__}")
        obj = dataclasses.asdict(value) if self._dataclass else value  # type: ignore[call-overload]
        try:
            return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()
        except (TypeError, ValueError) as e:
            raise InvalidArgumentError(f"value is not JSON-serializable: {e}") from e

    def deserialize(self, data: bytes) -> T:
        try:
            obj = json.loads(data)
            return self.type(**obj) if self.type is not None and self._dataclass else cast(T, obj)
        except (ValueError, TypeError) as e:
            name = self.type.__name__ if self.type else "JSON"
            raise InvalidArgumentError(f"stored bytes are not a valid {name}: {e}") from e


@dataclasses.dataclass(frozen=True, slots=True)
class CacheEntry(Generic[T]):
    """A cached value with the stat it was read (or written) at; ``stat.version`` is what a
    compare-and-set against this value expects."""

    value: T
    stat: Stat
    data: bytes = dataclasses.field(repr=False, compare=False)  # the serialized form, as stored


_UNLOADED: Any = object()


class _Slot:
    """One path's cache state. ``epoch`` rises on every invalidation, so a read that started before
    a notification never installs its (possibly stale) result after it. ``entry`` is one attribute
    (a CacheEntry, None for "known absent", or _UNLOADED) so lock-free readers see it whole."""

    __slots__ = ("epoch", "entry")

    def __init__(self) -> None:
        self.epoch = 0
        self.entry: CacheEntry[Any] | None = _UNLOADED

    def reset(self) -> None:
        self.epoch += 1
        self.entry = _UNLOADED


class MetadataCache(Closing, Generic[T]):
    """Typed read-through cache of a store. Thread-safe.

    Guarantees:

    - :meth:`get` reads the store once per path, then serves from memory until a notification
      (from this or any process) or a session event invalidates the path. A value is never installed
      after a notification that could make it stale; between a change and its notification reads may
      still return the previous value (as with any notification-driven cache).
    - Values returned by :meth:`get` are shared: treat them as read-only (frozen dataclasses help).
      ``fn`` of the read-modify-update methods receives a private copy.
    - :meth:`read_modify_update` writes with ``expected_version`` of the value ``fn`` saw; on a lost
      race it re-reads and calls ``fn`` again, at most ``max_retries`` more times, then raises
      :class:`BadVersionError`. Each lost race adds one to :attr:`conflicts`.
    - Exceptions from ``fn`` and from the store propagate; nothing is written then.
    - While the connection is lost, values are served as last known; after a reconnect or a new
      session everything is re-read (notifications may have been missed meanwhile).
    - At most ``max_entries`` paths are kept; beyond that the oldest-loaded path is dropped.
    """

    def __init__(self, store: MetadataStore, serde: Serde[T] | None = None, *, max_retries: int = 16,
                 max_entries: int = 100_000) -> None:
        if not isinstance(store, MetadataStore):
            raise InvalidArgumentError(f"MetadataCache needs a MetadataStore, not {type(store).__name__}")
        serde = JsonSerde() if serde is None else serde
        if not (callable(getattr(serde, "serialize", None)) and callable(getattr(serde, "deserialize", None))):
            raise InvalidArgumentError("serde must have serialize(value) -> bytes and deserialize(bytes)")
        for name, value, least in (("max_retries", max_retries, 0), ("max_entries", max_entries, 1)):
            check_int(value, name, minimum=least)
        self.store = store
        self.serde = serde
        self.max_retries = max_retries
        self._retry = RETRY.bounded(attempts=max_retries + 1)
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._slots: dict[str, _Slot] = {}
        self._conflicts = 0
        self._subscriptions = [store.add_listener(self._on_notification),
                               store.add_session_listener(self._on_session_event)]

    @property
    def conflicts(self) -> int:
        """Lost compare-and-set races so far (for metrics)."""
        return self._conflicts

    # ---- reads -------------------------------------------------------------------------------

    def get(self, path: str) -> T | None:
        """The value at ``path``, or ``None`` if absent. :class:`InvalidPathError` for a bad path,
        :class:`InvalidArgumentError` if the stored bytes do not deserialize."""
        entry = self.get_entry(path)
        return None if entry is None else entry.value

    def get_entry(self, path: str) -> CacheEntry[T] | None:
        """Like :meth:`get`, with the stat (version) the value was read at."""
        try:
            slot = self._slots.get(path)
        except TypeError:  # unhashable: certainly not a path
            slot = None
        if slot is not None:
            entry = slot.entry
            if entry is not _UNLOADED:  # the hot path: no lock, no validation needed
                return entry
        validate_path(path)
        slot, epoch = self._begin(path)
        result = self.store.get(path)
        entry = None if result is None else CacheEntry(self.serde.deserialize(result.value), result.stat, result.value)
        self._install(path, slot, epoch, entry)
        return entry

    # ---- writes ------------------------------------------------------------------------------

    def create(self, path: str, value: T) -> CacheEntry[T]:
        """Create ``path`` holding ``value``; :class:`AlreadyExistsError` if it exists."""
        validate_path(path, allow_root=False)
        data = self.serde.serialize(value)
        slot, epoch = self._begin(path)
        stat = self.store.put(path, data, expected_version=-1)
        entry = CacheEntry(self.serde.deserialize(data), stat, data)
        self._install(path, slot, epoch, entry)
        return entry

    def delete(self, path: str) -> None:
        """Delete ``path``; :class:`NotFoundError` if it is absent."""
        validate_path(path, allow_root=False)
        try:
            self.store.delete(path)
        finally:
            self.invalidate(path)

    def read_modify_update(self, path: str, fn: Callable[[T], T]) -> T:
        """Replace the value at ``path`` by ``fn(value)`` with compare-and-set; returns what was
        written. :class:`NotFoundError` if absent; :class:`BadVersionError` after ``max_retries``
        retries; :class:`InvalidArgumentError` if ``fn`` returns ``None`` or a value the serde refuses."""
        return self._update(path, fn, create=False)

    def read_modify_update_or_create(self, path: str, fn: Callable[[T | None], T]) -> T:
        """Like :meth:`read_modify_update`, but ``fn(None)`` gives the value to create if absent."""
        return self._update(path, fn, create=True)

    def _update(self, path: str, fn: Callable[[Any], T], *, create: bool) -> T:
        validate_path(path, allow_root=False)
        if not callable(fn):
            raise InvalidArgumentError("fn must be callable")
        for _ in self._retry.attempts():
            current = self.get_entry(path)
            if current is None and not create:
                raise NotFoundError(f"{path} does not exist")
            # fn gets a private copy: a mutation it makes must not leak into the cache if we lose.
            old = None if current is None else self.serde.deserialize(current.data)
            new = fn(old)
            if new is None:
                raise InvalidArgumentError("fn must return the new value, not None")
            data = self.serde.serialize(new)
            slot, epoch = self._begin(path)
            try:
                stat = self.store.put(path, data, expected_version=-1 if current is None else current.stat.version)
            except BadVersionError:  # also a lost create (AlreadyExistsError) or a key deleted meanwhile
                with self._lock:
                    self._conflicts += 1
                self.invalidate(path)  # the notification may not be here yet: read the store next time
                continue  # the policy spreads the contenders out
            self._install(path, slot, epoch, CacheEntry(self.serde.deserialize(data), stat, data))
            return new
        raise BadVersionError(f"{path}: lost {self.max_retries + 1} compare-and-set races in a row")

    # ---- invalidation ------------------------------------------------------------------------

    def invalidate(self, path: str) -> None:
        """Forget ``path``: the next :meth:`get` reads the store."""
        validate_path(path)
        with self._lock:
            slot = self._slots.get(path)
            if slot is not None:
                slot.reset()

    def invalidate_all(self) -> None:
        """Forget everything: every next :meth:`get` reads the store."""
        with self._lock:
            for slot in self._slots.values():
                slot.reset()
            self._slots.clear()

    def close(self) -> None:
        """Stop listening to the store and drop all entries (the store stays open). Idempotent."""
        for subscription in self._subscriptions:
            subscription.close()
        self.invalidate_all()

    def _on_notification(self, n: Notification) -> None:
        if n.type is not NotificationType.ChildrenChanged and n.path in self._slots:
            self.invalidate(n.path)

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is not SessionEvent.ConnectionLost:  # notifications may have been missed meanwhile
            self.invalidate_all()

    # ---- slots -------------------------------------------------------------------------------

    def _begin(self, path: str) -> tuple[_Slot, int]:
        """The slot of ``path`` and its epoch, taken before reading or writing the store."""
        with self._lock:
            slot = self._slots.get(path)
            if slot is None:
                if len(self._slots) >= self.max_entries:  # evict the oldest-created slot
                    self._slots.pop(next(iter(self._slots))).reset()
                slot = self._slots[path] = _Slot()
            return slot, slot.epoch

    def _install(self, path: str, slot: _Slot, epoch: int, entry: CacheEntry[Any] | None) -> None:
        """Cache ``entry`` unless ``path`` was invalidated (or evicted) since ``epoch`` was taken."""
        with self._lock:
            if slot.epoch == epoch and self._slots.get(path) is slot:
                slot.entry = entry
