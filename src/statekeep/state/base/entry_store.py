"""A state store keeping every key as a stored entry (:mod:`statekeep.state.records`): the write path
the embedded and partitioned providers share."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping

from statekeep.errors import InvalidArgumentError
from statekeep.metadata.types import validate_version
from statekeep.state.base.checks import check_expected_version, validate_amount, validate_value
from statekeep.state.base.store import StateStore
from statekeep.state.keys import encode_key
from statekeep.state.records import encode_bytes, encode_counter, entry_counter, entry_version, plan_batch


class EntryStateStore(StateStore):
    """A store keeping every key as a stored entry (:mod:`statekeep.state.records`; the embedded and
    partitioned providers): each single-key write is planned by :func:`records.plan_batch` inside the
    store's own atomic write, :meth:`_write_key`."""

    @abc.abstractmethod
    def _write_key(self, key: str, expected: int | None, values: Mapping[str, bytes | None],
                   deltas: Mapping[str, int]) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        """In one write: :meth:`_plan_key` over the current stored entries, then write the changes;
        returns what :meth:`_plan_key` did."""

    @staticmethod
    def _plan_key(get: Callable[[bytes], bytes | None], key: str, expected: int | None,
                  values: Mapping[str, bytes | None], deltas: Mapping[str, int],
                  now_ms: int) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        """``key``'s stored entry before (:func:`check_expected_version` of ``expected`` on it) and the
        changes of ``values`` and ``deltas`` (:func:`records.plan_batch`), raising before any write."""
        raw = get(key.encode())
        check_expected_version(key, None if raw is None else entry_version(raw), expected)
        return raw, plan_batch(get, values, deltas, now_ms)

    def put(self, key: str, value: bytes, *, expected_version: int | None = None) -> int:
        return self._set(key, encode_bytes(validate_value(value, self.max_value_size)), expected_version)

    def set_counter(self, key: str, value: int, *, expected_version: int | None = None) -> int:
        return self._set(key, encode_counter(validate_amount(value, "counter value")), expected_version)

    def _set(self, key: str, stored: bytes, expected_version: int | None) -> int:
        encode_key(key)
        changes = self._write_key(key, validate_version(expected_version), {key: stored}, {})[1]
        return entry_version(changes[0][1])

    def delete(self, key: str, *, expected_version: int | None = None) -> bool:
        encode_key(key)
        expected = validate_version(expected_version)
        if expected == -1:
            raise InvalidArgumentError("delete takes expected_version None or >= 0")
        return self._write_key(key, expected, {key: None}, {})[0] is not None

    def incr(self, key: str, amount: int = 1) -> int:
        encode_key(key)
        changes = self._write_key(key, None, {}, {key: validate_amount(amount)})[1]
        return entry_counter(key, changes[0][1])
