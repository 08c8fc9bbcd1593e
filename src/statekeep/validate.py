"""The one validator of numeric options and arguments: every int or number a public API takes is checked
here, so the rule (``bool`` is not a number, NaN is not a number) and the message shape (``NAME must be WHAT,
got VALUE``) are the same everywhere. Raises :class:`InvalidArgumentError` (or the ``error`` given)."""

from __future__ import annotations

from typing import Literal, overload

from statekeep.errors import InvalidArgumentError, StatekeepError


def _fail(error: type[StatekeepError], name: str, what: str, value: object, optional: bool) -> StatekeepError:
    return error(f"{name} must be {'None or ' if optional else ''}{what}, got {value!r}")


@overload
def check_int(value: object, name: str, *, minimum: int | None = None, maximum: int | None = None,
              optional: Literal[False] = False, error: type[StatekeepError] = InvalidArgumentError) -> int: ...


@overload
def check_int(value: object, name: str, *, minimum: int | None = None, maximum: int | None = None,
              optional: bool, error: type[StatekeepError] = InvalidArgumentError) -> int | None: ...


def check_int(value: object, name: str, *, minimum: int | None = None, maximum: int | None = None,
              optional: bool = False, error: type[StatekeepError] = InvalidArgumentError) -> int | None:
    """``value`` if it is an int (not a bool) within ``minimum``..``maximum`` (or None when ``optional``)."""
    if value is None and optional:
        return None
    if (isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum)
            or (maximum is not None and value > maximum)):
        if minimum is not None and maximum is not None:
            what = f"an int in {minimum}..{maximum}"
        elif minimum == 1:
            what = "a positive int"
        else:
            what = "an int" + (f" >= {minimum}" if minimum is not None else "") + (
                f" <= {maximum}" if maximum is not None else "")
        raise _fail(error, name, what, value, optional)
    return value


@overload
def check_number(value: object, name: str, *, positive: bool = False, minimum: float | None = None,
                 unit: str = "", optional: Literal[False] = False) -> float: ...


@overload
def check_number(value: object, name: str, *, positive: bool = False, minimum: float | None = None,
                 unit: str = "", optional: bool) -> float | None: ...


def check_number(value: object, name: str, *, positive: bool = False, minimum: float | None = None,
                 unit: str = "", optional: bool = False) -> float | None:
    """``value`` as a float if it is an int or float (not a bool, not NaN), > 0 when ``positive``, >=
    ``minimum`` if given (or None when ``optional``). ``unit`` is named in the message (e.g. " of seconds")."""
    if value is None and optional:
        return None
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or value != value
            or (positive and not value > 0) or (minimum is not None and not value >= minimum)):
        kind = "a positive number" if positive else "a non-negative number" if minimum == 0 else (
            f"a number >= {minimum}" if minimum is not None else "a number")
        raise _fail(InvalidArgumentError, name, kind + unit, value, optional)
    return float(value)
