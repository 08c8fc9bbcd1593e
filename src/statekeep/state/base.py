"""The function state contract (after Pulsar PIP-312): :class:`StateStore` and :class:`StateStoreProvider`.

Every provider guarantees, and ``tests/contract/test_state_contract.py`` checks:

- Keys are non-empty ``str`` (any Unicode, ``/`` and ``.`` included, at most
  :data:`statekeep.state.keys.MAX_SEGMENT` characters once encoded); values are ``bytes`` of at most
  :attr:`StateStore.max_value_size`. Otherwise :class:`InvalidArgumentError` or
  :class:`ValueTooLargeError`, and nothing is written.
- A key holds either bytes or a counter (``kind``); ``get`` of a counter returns its 8-byte signed
  big-endian form. ``incr`` is atomic across threads and processes, refuses a key holding bytes
  (:class:`InvalidArgumentError`) and never wraps (:class:`CounterOverflowError`).
- ``scan`` yields keys in code point order, from after ``start_after``, only those starting with ``prefix``.
- Versions (``StateEntry.version``) are 0 when a key is created and rise by one per change; a
  ``expected_version`` that does not match raises :class:`BadVersionError` (:class:`NotFoundError` if
  the key is absent, :class:`AlreadyExistsError` for ``-1`` when present) and writes nothing.
- Every mutation appends a changelog record in the same atomic write as the change (KIP-813).
- ``apply_batch`` is all or nothing and at most once per marker.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from statekeep.errors import InvalidArgumentError, ValueTooLargeError
from statekeep.state.keys import encode_key
from statekeep.state.records import COUNTER_MAX, COUNTER_MIN, Kind, decode_counter


class StateEntry(NamedTuple):
    """One key's value. ``value`` is the raw bytes (a counter's 8-byte big-endian form)."""

    key: str
    value: bytes
    kind: Kind
    version: int

    @property
    def counter(self) -> int | None:
        """The counter's value, or None when the key holds bytes."""
        return decode_counter(self.value) if self.kind == "counter" else None


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """What one atomic write (``apply_batch``) may hold on this store's backend."""

    max_keys: int
    max_bytes: int


def validate_value(value: object, max_size: int) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"a state value must be bytes, not {type(value).__name__}")
    value = bytes(value)
    if len(value) > max_size:
        raise ValueTooLargeError(f"state value of {len(value)} bytes exceeds the limit of {max_size} bytes")
    return value


def validate_amount(amount: object, what: str = "counter amount") -> int:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise InvalidArgumentError(f"a {what} must be an int, not {type(amount).__name__}")
    if not COUNTER_MIN <= amount <= COUNTER_MAX:
        raise InvalidArgumentError(f"a {what} must fit a signed 64-bit integer, got {amount}")
    return amount


def validate_expected_version(version: object) -> int | None:
    if version is None:
        return None
    if isinstance(version, bool) or not isinstance(version, int) or version < -1:
        raise InvalidArgumentError(f"expected_version must be None, -1 or a version >= 0, not {version!r}")
    return version


class StateStore(abc.ABC):
    """One function's state. Thread-safe; see the module docstring for the contract."""

    max_value_size: int = 1 << 20

    def __init__(self, tenant: str, namespace: str, name: str) -> None:
        self.tenant, self.namespace, self.name = tenant, namespace, name

    # ---- implemented by providers ------------------------------------------------------------

    @abc.abstractmethod
    def get_entry(self, key: str) -> StateEntry | None:
        """The key's value, kind and version, or None if absent."""

    @abc.abstractmethod
    def put(self, key: str, value: bytes, *, expected_version: int | None = None) -> int:
        """Store bytes at ``key`` (replacing a counter too); returns the new version."""

    @abc.abstractmethod
    def set_counter(self, key: str, value: int, *, expected_version: int | None = None) -> int:
        """Make ``key`` a counter holding ``value``; returns the new version."""

    @abc.abstractmethod
    def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        """Delete ``key``; False (and nothing written) if it was absent and no version was expected."""

    @abc.abstractmethod
    def incr(self, key: str, amount: int = 1) -> int:
        """Atomically add ``amount`` to the counter at ``key`` (absent: 0); returns the new value."""

    @abc.abstractmethod
    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        """Entries of keys starting with ``prefix``, after ``start_after``, in key order, at most ``limit``."""

    @abc.abstractmethod
    def apply_batch(self, puts: Mapping[str, bytes | None], counters: Mapping[str, int],
                    marker: str | None = None) -> bool:
        """Apply ``puts`` (bytes, or None to delete), then ``counters`` (key -> delta, so a key in both
        ends as a counter equal to its delta), their changelog records and the marker, in ONE atomic
        write. Returns False, writing nothing, if ``marker`` was already applied. Raises
        :class:`BatchTooLargeError` above :attr:`batch_limits`, and as the single-key methods do."""

    @abc.abstractmethod
    def has_marker(self, marker: str) -> bool:
        """Whether a batch with this marker was applied."""

    @property
    @abc.abstractmethod
    def batch_limits(self) -> BatchLimits:
        """The most keys and bytes one ``apply_batch`` may carry on this backend."""

    # ---- derived -----------------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The value (a counter as 8-byte big-endian), or None."""
        entry = self.get_entry(key)
        return None if entry is None else entry.value

    def get_counter(self, key: str) -> int:
        """The counter at ``key``; 0 if absent. :class:`InvalidArgumentError` if it holds bytes."""
        entry = self.get_entry(key)
        if entry is None:
            return 0
        if entry.kind != "counter":
            raise InvalidArgumentError(f"state key {key!r} holds bytes, not a counter")
        return decode_counter(entry.value)

    def scan(self, prefix: str = "", start_after: str | None = None,
             limit: int | None = None) -> Iterator[tuple[str, bytes]]:
        """``(key, value)`` pairs as :meth:`scan_entries` orders and filters them."""
        for entry in self.scan_entries(prefix, start_after, limit):
            yield entry.key, entry.value

    def get_entries(self, keys: Iterable[str]) -> dict[str, StateEntry]:
        """Entries of the present keys among ``keys`` (providers may read them in one round trip)."""
        keys = list(dict.fromkeys(keys))
        for key in keys:
            encode_key(key)  # validate all before reading any
        out = {}
        for key in keys:
            entry = self.get_entry(key)
            if entry is not None:
                out[key] = entry
        return out

    def get_many(self, keys: Iterable[str]) -> dict[str, bytes]:
        """``{key: value}`` for the present keys among ``keys``."""
        return {k: e.value for k, e in self.get_entries(keys).items()}

    def fetch_many(self, keys: Iterable[str]) -> dict[str, tuple[bytes | None, int | None]]:
        """``{key: (value or None, counter or None)}`` for EVERY key asked (the Spark runtime's prefetch)."""
        keys = list(dict.fromkeys(keys))
        found = self.get_entries(keys)
        return {k: (found[k].value, found[k].counter) if k in found else (None, None) for k in keys}

    def close(self) -> None:
        """Release what this handle holds (not the provider's shared resources)."""


class StateStoreProvider(abc.ABC):
    """Creates each function's :class:`StateStore` (Pulsar's ``StateStoreProvider``).

    ``init(config)`` is called once before anything else (``open_provider`` calls it); ``cleanup``
    deletes all of a function's state (called when the function is deleted; a no-op if there is none);
    ``close`` releases the provider's resources. Providers register by name: see
    :mod:`statekeep.state.registry`.
    """

    #: Registered name, e.g. "metadata".
    name: ClassVar[str] = ""
    #: True when reads are local and never block on the network (the REST server then reads inline).
    nonblocking_reads: bool = False

    @abc.abstractmethod
    def init(self, config: Mapping[str, Any]) -> None: ...

    @abc.abstractmethod
    def get_state_store(self, tenant: str, namespace: str, name: str) -> StateStore: ...

    @abc.abstractmethod
    def cleanup(self, tenant: str, namespace: str, name: str) -> None: ...

    def close(self) -> None:
        """Release resources; stores obtained from this provider stop working."""

    def __enter__(self) -> StateStoreProvider:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
