"""State keys as metadata path segments: reversible, order-preserving, one segment per key.

A state key is any non-empty ``str`` that encodes to UTF-8 (so no lone surrogates): it may contain
``/``, ``.``, spaces, control characters or any Unicode. Each key becomes ONE path segment made of
printable ASCII only (valid on every backend, ZooKeeper's forbidden ranges included), by encoding
each byte of its UTF-8 form with this code:

============================  =======================  ====================================
bytes                         becomes                  why
============================  =======================  ====================================
``0x00``-``0x21``             ``!`` + 2 hex digits     controls, space and ``!`` itself
``0x22``-``0x2D``             itself                   ``"#$%&'()*+,-``
``0x2E``, ``0x2F``            ``.`` + 2 hex digits     ``.`` and ``/`` (so no segment is ``.`` or ``..``)
``0x30``-``0x7D``             itself                   digits, letters, ``:;<=>?@[\\]^_`{|}``
``0x7E``-``0xFF``             ``~`` + 2 hex digits     ``~``, DEL and every non-ASCII byte
============================  =======================  ====================================

Hex digits are upper case. The code is prefix-free and each byte's code word sorts exactly where
the byte does, so byte-wise (= code point) order of keys equals the order of their segments, and
``key.startswith(prefix)`` iff ``segment.startswith(encode_key(prefix))``: a sorted
``get_children`` gives ``scan`` its order and prefix ranges directly. Examples: ``user.count``
-> ``user.2Ecount``; ``a/b`` -> ``a.2Fb``; ``é`` -> ``~C3~A9``.

An encoded key is at most :data:`MAX_SEGMENT` characters (keeps whole paths under the local://
LMDB key limit of 511 bytes): 240 ASCII letters or digits, fewer otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from statekeep.errors import InvalidArgumentError
from statekeep.validate import check_int
from statekeep.lru import memo

MAX_SEGMENT = 240


def _code(b: int) -> str:
    if b <= 0x21:
        return f"!{b:02X}"
    if b in (0x2E, 0x2F):
        return f".{b:02X}"
    if b >= 0x7E:
        return f"~{b:02X}"
    return chr(b)


_CODES = [_code(b) for b in range(256)]
_ASCII_CODES = _CODES[:128]


_segments: dict[str, str] = memo()  # recently encoded keys: hot keys skip re-encoding


def encode_key(key: object, *, what: str = "state key") -> str:
    """The path segment of ``key``. Raises :class:`InvalidArgumentError` (naming ``what``) if ``key``
    is not a non-empty str, does not encode to UTF-8, or encodes to more than :data:`MAX_SEGMENT`
    characters."""
    try:
        return _segments[key]  # type: ignore[index]  # only valid str keys are ever stored
    except (KeyError, TypeError):
        pass
    if not isinstance(key, str):
        raise InvalidArgumentError(f"a {what} must be a str, not {type(key).__name__}")
    if not key:
        raise InvalidArgumentError(f"a {what} must not be empty")
    try:
        segment = _segment(key)
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"a {what} must be valid Unicode (no lone surrogates): {key!r}") from e
    if len(segment) > MAX_SEGMENT:
        raise InvalidArgumentError(
            f"{what} too long: {len(segment)} characters once encoded, at most {MAX_SEGMENT} "
            f"(non-ASCII and punctuation like . / ~ ! and space take 3 each): {key[:40]!r}...")
    if len(_segments) > 100_000:
        _segments.clear()
    _segments[key] = segment
    return segment


def check_key(key: object) -> None:
    """Raise as :func:`encode_key` would for ``key``, without encoding a key that cannot be refused: a non-empty
    ASCII str of at most a third of :data:`MAX_SEGMENT` characters (a byte codes to at most three)."""
    if key.__class__ is not str or not key or len(key) * 3 > MAX_SEGMENT or not key.isascii():
        encode_key(key)


def valid_key(key: object) -> bool:
    """Whether :func:`encode_key` takes ``key``."""
    try:
        check_key(key)
    except InvalidArgumentError:
        return False
    return True


def encode_prefix(prefix: str) -> str:
    """The segment prefix of a key prefix ("" for ""); no length limit (it only filters)."""
    if not isinstance(prefix, str):
        raise InvalidArgumentError(f"a key prefix must be a str, not {type(prefix).__name__}")
    try:
        return "".join([_CODES[b] for b in prefix.encode("utf-8")])
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"a key prefix must be valid Unicode: {prefix!r}") from e


def check_keys(keys: Iterable[str]) -> list[str]:
    """The distinct keys of ``keys`` in order, every one validated (:func:`encode_key`) before any is read."""
    if isinstance(keys, list) and len(keys) == 1:  # a batch's first read of one key
        check_key(keys[0])
        return keys
    distinct = dict.fromkeys(keys)
    for key in () if distinct.keys() <= _segments.keys() else distinct:  # all encoded before: valid
        check_key(key)
    return list(distinct)


def check_scan(prefix: object, start_after: object, limit: object) -> str:
    """Validate the arguments of ``scan_entries`` (eagerly: a generator would raise only when first
    iterated); returns the encoded prefix. Raises :class:`InvalidArgumentError`."""
    encoded = encode_prefix(prefix)  # type: ignore[arg-type]
    if start_after is not None and not isinstance(start_after, str):
        raise InvalidArgumentError(f"start_after must be a str or None, not {type(start_after).__name__}")
    check_int(limit, "limit", minimum=0, optional=True)
    return encoded


def _segment(key: str) -> str:
    """``key``'s code (no checks); UnicodeEncodeError for a lone surrogate."""
    if key.isascii():  # one byte per character: str.translate codes them (in C)
        return key if key.isalnum() else key.translate(_ASCII_CODES)
    return "".join([_CODES[b] for b in key.encode("utf-8")])


_PLAIN = re.compile(r"[\x22-\x2d\x30-\x7d]*")  # a segment of bytes that code as themselves: the key itself
_CODED = re.compile(r"[!.~]([0-9A-F]{2})")  # a byte's code word with a leader


def _byte(coded: re.Match[str]) -> str:
    return chr(int(coded[1], 16))


def decode_key(segment: str) -> str:
    """The key whose segment is ``segment``. Raises :class:`InvalidArgumentError` on a segment that
    :func:`encode_key` cannot have produced (a foreign child in the state subtree)."""
    if _PLAIN.fullmatch(segment):
        return segment
    try:  # each code word to its byte (as a latin-1 character), the bytes as UTF-8; then coded back: only the one
        # segment encode_key gives for a key decodes (no other case of hex digits, no byte coded needlessly)
        key = _CODED.sub(_byte, segment).encode("latin-1").decode("utf-8")
        if _segment(key) == segment:
            return key
    except UnicodeError:
        pass
    raise InvalidArgumentError(f"not an encoded state key: {segment!r}")


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
MAX_NAME = 64


def validate_name(value: object, what: str = "name") -> str:
    """A tenant, namespace or function name: 1-64 characters of ``[A-Za-z0-9_.-]``, not ``.`` or ``..``.
    Raises :class:`InvalidArgumentError` naming ``what``."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{what} must be a str, not {type(value).__name__}")
    if not value or len(value) > MAX_NAME or value in (".", "..") or not _NAME_CHARS.issuperset(value):
        raise InvalidArgumentError(
            f"invalid {what} {value[:80]!r}: use 1-{MAX_NAME} characters of A-Z a-z 0-9 _ . - (not '.' or '..')")
    return value
