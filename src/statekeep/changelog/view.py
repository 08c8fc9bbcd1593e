"""What a follower materializes of a leader's state: all of it, or a subset (KIP-813, "a follower based
on an existing changelog, but with a subset of the actual data").

    view = FollowerView(key_prefix="cust-42/", key_filter=lambda k: not k.endswith(".tmp"),
                        transform=lambda key, value: value[:100])

Contract:

- A key is in the view when it starts with ``key_prefix`` and ``key_filter(key)`` (if given) is true.
- ``transform(key, value)`` (if given) rewrites each value of a key in the view: ``value`` is the
  ``bytes`` of a bytes entry or the ``int`` of a counter; it returns ``bytes`` (stored as bytes),
  an ``int`` (stored as a counter, signed 64-bit) or ``None`` (the key is left out, and removed if
  it was there). The leader's version is kept. Deletes of keys in the view always apply.
- Both callables must be pure functions of their arguments: a follower calls them again on a
  re-bootstrap and expects the same answers.
- :meth:`fingerprint` identifies the view in the follower's metadata, so reopening a follower with
  another view rebuilds its copy instead of mixing two views. It is the prefix plus, for each
  callable, its qualified name and a sha256 of its code (bytecode, constants, names, nested code),
  its default arguments and the values it closes over when they are plain data (str, bytes,
  numbers...). A change the fingerprint cannot see (a global the callable reads, a callable
  object's attributes) needs an explicit ``view_id``: when given, it replaces the callables'
  part of the fingerprint, so the user decides when the view changed. The bytecode differs
  between Python versions, so a follower rebuilds once after a Python upgrade unless it has a
  ``view_id``.
"""

from __future__ import annotations

import hashlib
import json
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state import records
from statekeep.state.base import StateEntry

KeyFilter = Callable[[str], bool]
Transform = Callable[[str, "bytes | int"], "bytes | int | None"]

_PLAIN = (str, bytes, int, float, bool, complex, type(None))


class ViewError(InvalidArgumentError):
    """The user's ``key_filter`` or ``transform`` raised, or the transform returned the wrong type."""


class FollowerView:
    """See the module docstring. Raises :class:`InvalidArgumentError` for a non-str prefix or
    view_id, or a non-callable filter or transform."""

    def __init__(self, key_prefix: str = "", key_filter: KeyFilter | None = None, transform: Transform | None = None,
                 view_id: str | None = None) -> None:
        if not isinstance(key_prefix, str):
            raise InvalidArgumentError(f"key_prefix must be a str, not {type(key_prefix).__name__}")
        try:
            key_prefix.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(f"key_prefix is not valid UTF-8: {e}") from e
        for what, fn in (("key_filter", key_filter), ("transform", transform)):
            if fn is not None and not callable(fn):
                raise InvalidArgumentError(f"{what} must be callable or None, not {type(fn).__name__}")
        if view_id is not None and (not isinstance(view_id, str) or not view_id):
            raise InvalidArgumentError(f"view_id must be a non-empty str or None, not {view_id!r}")
        self.key_prefix, self.key_filter, self.transform, self.view_id = key_prefix, key_filter, transform, view_id
        self.prefix_bytes = key_prefix.encode("utf-8")

    @property
    def everything(self) -> bool:
        """True for the whole state, unchanged (no prefix, filter, transform or view_id)."""
        return not self.key_prefix and self.key_filter is None and self.transform is None and self.view_id is None

    def fingerprint(self) -> str | None:
        """The view's identity as a string (None for the whole state): equal for equal views."""
        if self.everything:
            return None
        data: dict[str, Any] = {"prefix": self.key_prefix}
        if self.view_id is not None:
            data["id"] = self.view_id
        else:
            for what, fn in (("filter", self.key_filter), ("transform", self.transform)):
                if fn is not None:
                    data[what] = _callable_fingerprint(fn)
        return json.dumps(data, sort_keys=True)

    def describe(self) -> dict[str, Any]:
        """The view as JSON-ready data (for status)."""
        return {"keyPrefix": self.key_prefix, "keyFilter": _name(self.key_filter), "transform": _name(self.transform),
                "viewId": self.view_id}

    def matches(self, key: str) -> bool:
        """True if ``key`` is in the view. :class:`ViewError` if the filter raises."""
        if not key.startswith(self.key_prefix):
            return False
        if self.key_filter is None:
            return True
        try:
            return bool(self.key_filter(key))
        except Exception as e:
            raise ViewError(f"key_filter {_name(self.key_filter)} raised on key {key!r}: {e!r}") from e

    def _rewrite(self, key: str, kind: str, value: bytes) -> tuple[str, bytes] | None:
        """(kind, stored payload) of ``value`` after the transform, or None to leave the key out."""
        try:
            assert self.transform is not None  # only called with a transform
            out = self.transform(key, records.decode_counter(value) if kind == "counter" else bytes(value))
        except Exception as e:
            raise ViewError(f"transform {_name(self.transform)} raised on key {key!r}: {e!r}") from e
        if out is None:
            return None
        if isinstance(out, bool) or not isinstance(out, (bytes, bytearray, memoryview, int)):
            raise ViewError(f"transform returned {type(out).__name__} for key {key!r}: it must return "
                            "bytes, an int (a counter) or None")
        if isinstance(out, int):
            if not records.COUNTER_MIN <= out <= records.COUNTER_MAX:
                raise ViewError(f"transform returned {out} for key {key!r}: a counter is signed 64-bit")
            return "counter", records.counter_bytes(out)
        return "bytes", bytes(out)

    def records(self, batch: list[records.ChangelogRecord]) -> list[records.ChangelogRecord]:
        """The records of ``batch`` in the view, rewritten by the transform (a value it drops becomes a
        tombstone, so a key that was there goes)."""
        if self.everything:
            return batch
        out = []
        for r in batch:
            if not self.matches(r.key):
                continue
            if self.transform is not None and r.value is not None:
                rewritten = self._rewrite(r.key, r.kind or "bytes", r.value)
                kind, value = rewritten or (None, None)
                r = records.ChangelogRecord(r.key, kind, value, r.version, r.offset)  # type: ignore[arg-type]
            out.append(r)
        return out

    def entry(self, e: StateEntry) -> StateEntry | None:
        """``e`` rewritten if its key is in the view, else None."""
        if not self.matches(e.key):
            return None
        if self.transform is None:
            return e
        rewritten = self._rewrite(e.key, e.kind, e.value)
        return None if rewritten is None else StateEntry(e.key, rewritten[1], rewritten[0], e.version)  # type: ignore[arg-type]

    def entries(self, entries: Iterable[StateEntry]) -> Iterator[StateEntry]:
        """The entries of ``entries`` (in key order, as snapshots and ``read_all`` give them) in the view,
        rewritten; reading stops after the prefix's range."""
        if self.everything:
            yield from entries
            return
        prefix = self.key_prefix
        for e in entries:
            if prefix and not e.key.startswith(prefix):
                if e.key > prefix:
                    return
                continue
            shown = self.entry(e)
            if shown is not None:
                yield shown


def _name(fn: Any) -> str | None:
    if fn is None:
        return None
    return f"{getattr(fn, '__module__', None) or type(fn).__module__}." \
           f"{getattr(fn, '__qualname__', None) or type(fn).__qualname__}"


def _callable_fingerprint(fn: Any) -> str:
    h = hashlib.sha256()
    h.update((_name(fn) or "").encode())
    target = fn
    if not hasattr(target, "__code__"):  # a callable object: its class's __call__
        call = type(fn).__call__
        target = getattr(call, "__func__", call)
    code = getattr(target, "__code__", None)
    if code is not None:
        _hash_code(h, code)
        h.update(_plain(getattr(target, "__defaults__", None)))
        h.update(_plain(getattr(target, "__kwdefaults__", None)))
        for cell in getattr(target, "__closure__", None) or ():
            try:
                h.update(_plain(cell.cell_contents))
            except ValueError:  # an empty cell
                h.update(b"<empty>")
    return h.hexdigest()


def _hash_code(h: Any, code: types.CodeType) -> None:
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _hash_code(h, const)
        else:
            h.update(_plain(const))


def _plain(value: Any) -> bytes:
    """A stable encoding of plain data (same in every process: no hash-seed dependent order);
    anything else by its type's name only."""
    if isinstance(value, _PLAIN):
        return repr((type(value).__name__, value)).encode()
    if isinstance(value, (tuple, list)):
        return b"(" + b",".join(_plain(v) for v in value) + b")"
    if isinstance(value, (frozenset, set)):
        return b"{" + b",".join(sorted(_plain(v) for v in value)) + b"}"
    if isinstance(value, dict):
        return b"{" + b",".join(sorted(_plain(k) + b":" + _plain(v) for k, v in value.items())) + b"}"
    return f"<{type(value).__qualname__}>".encode()
