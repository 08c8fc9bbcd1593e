"""The checks every provider makes of a write's arguments, before anything is written: one rule each."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statekeep.errors import AlreadyExistsError, BadVersionError, InvalidArgumentError, NotFoundError
from statekeep.metadata.types import validate_value as validate_value  # one rule for metadata and state values
from statekeep.state.keys import check_keys
from statekeep.state.records import BYTES, COUNTER_MAX, COUNTER_MIN, encode_bytes
from statekeep.validate import check_int


def validate_amount(amount: object, what: str = "counter amount") -> int:
    amount = check_int(amount, what)
    if not COUNTER_MIN <= amount <= COUNTER_MAX:
        raise InvalidArgumentError(f"a {what} must fit a signed 64-bit integer, got {amount}")
    return amount


def validate_amounts(amounts: Mapping[str, object], what: str = "counter delta") -> dict[str, int]:
    """:func:`validate_amount` of every value of ``amounts``, as a new dict. The common case (plain
    ints within 64 bits) is checked in bulk; otherwise each is checked, raising for the first bad one."""
    values: Any = amounts.values()
    if all(a.__class__ is int for a in values) and (
            not values or (COUNTER_MIN <= min(values) and max(values) <= COUNTER_MAX)):
        return dict(amounts)  # type: ignore[arg-type]  # every value is an int, just checked
    return {k: validate_amount(a, what) for k, a in amounts.items()}


def validate_batch(puts: object, counters: object, max_size: int) -> tuple[dict[str, bytes | None], dict[str, int]]:
    """The arguments of ``apply_batch``, checked before anything is written: ``(values, deltas)``, the
    values as stored values (None: delete). :class:`InvalidArgumentError` for an argument that is not
    a mapping or a bad key, as :func:`validate_value` and :func:`validate_amounts` for the rest."""
    if not isinstance(puts, Mapping) or not isinstance(counters, Mapping):
        raise InvalidArgumentError("apply_batch takes two mappings: puts and counters")
    check_keys([*puts, *counters])
    values = {k: None if v is None else BYTES + v if v.__class__ is bytes and len(v) <= max_size  # the common case
              else encode_bytes(validate_value(v, max_size)) for k, v in puts.items()}
    return values, validate_amounts(counters)


def check_expected_version(key: str, current: int | None, expected: int | None) -> None:
    """The condition of a write with ``expected_version``, for a key now at version ``current`` (None:
    absent); every provider checks it here. ``expected`` None: none; -1: the key must be absent
    (:class:`AlreadyExistsError`); N: it must be at version N (:class:`NotFoundError` if absent,
    :class:`BadVersionError` otherwise)."""
    if expected is None:
        return
    if expected == -1:
        if current is not None:
            raise AlreadyExistsError(f"state key {key!r} exists (expected it absent)")
    elif current is None:
        raise NotFoundError(f"state key {key!r} does not exist (expected version {expected})")
    elif current != expected:
        raise BadVersionError(f"state key {key!r} is at version {current}, not {expected}")
