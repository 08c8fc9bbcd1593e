"""The ``context`` a function receives, shaped like Pulsar's Python ``Context``.

During a micro-batch a partition's state is a :class:`BufferedState`: reads are served from one
bulk prefetch (a miss fetches that key once), writes are buffered, and the runtime applies them
all in one atomic write at the end of the batch. A function therefore never waits on the store
per record, and a batch that fails half-way has written nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.base import validate_value
from statekeep.state.keys import encode_key
from statekeep.state.records import COUNTER_MAX, COUNTER_MIN


class BufferedState:
    """One batch's view of a function's state.

    ``fetch(keys)`` returns ``{key: (value_bytes_or_None, counter_or_None)}`` for every key asked.
    After the batch, :attr:`puts` (key -> bytes, or None for a delete) and :attr:`counter_deltas`
    (key -> amount, applied after the puts, so a delete then an increment restarts from zero) are
    what must be written. ``max_value_size`` is the store's limit, checked per put so that a value
    the store would refuse fails its own record rather than the batch's write.
    """

    def __init__(self, fetch: Callable[[list[str]], Mapping[str, tuple[bytes | None, int | None]]],
                 max_value_size: int = 1 << 20) -> None:
        self._fetch = fetch
        self.max_value_size = max_value_size
        self._base: dict[str, tuple[bytes | None, int | None]] = {}
        self.puts: dict[str, bytes | None] = {}
        self.counter_deltas: dict[str, int] = {}

    def prefetch(self, keys: Iterable[str]) -> None:
        missing = [k for k in dict.fromkeys(keys) if k not in self._base]
        if missing:
            self._base.update(self._fetch(missing))

    def _entry(self, key: str) -> tuple[bytes | None, int | None]:
        if key not in self._base:
            self.prefetch([key])
        return self._base[key]

    def get(self, key: str) -> bytes | None:
        if key in self.puts:
            return self.puts[key]
        return self._entry(key)[0]

    def put(self, key: str, value: bytes | None) -> None:
        self.puts[key] = value
        self.counter_deltas.pop(key, None)

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

    @property
    def dirty(self) -> bool:
        return bool(self.puts or self.counter_deltas)


def _key(key: object) -> str:
    encode_key(key)  # raises InvalidArgumentError for what the store would refuse (cached for hot keys)
    return key  # type: ignore[return-value]


def is_valid_key(key: object) -> bool:
    """Whether the state store accepts ``key`` (a non-empty str within the length limit)."""
    try:
        encode_key(key)
    except InvalidArgumentError:
        return False
    return True


class Context:
    """What ``process(input, context)`` may use. Names follow Pulsar's Python Context."""

    def __init__(self, tenant: str, namespace: str, name: str, state: BufferedState,
                 user_config: Mapping[str, Any] | None = None, logger: logging.Logger | None = None) -> None:
        self.tenant = tenant
        self.namespace = namespace
        self.name = name
        self._state = state
        self._user_config = dict(user_config or {})
        self._logger = logger or logging.getLogger(f"statekeep.function.{tenant}.{namespace}.{name}")

    # identity and configuration
    def get_function_tenant(self) -> str:
        return self.tenant

    def get_function_namespace(self) -> str:
        return self.namespace

    def get_function_name(self) -> str:
        return self.name

    def get_user_config_value(self, key: str) -> Any:
        return self._user_config.get(key)

    def get_user_config_map(self) -> dict[str, Any]:
        return dict(self._user_config)

    def get_logger(self) -> logging.Logger:
        return self._logger

    # state
    def get_state(self, key: str) -> bytes | None:
        return self._state.get(_key(key))

    def put_state(self, key: str, value: bytes | str) -> None:
        if isinstance(value, str):
            value = value.encode()
        elif not isinstance(value, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"state values are bytes or str, not {type(value).__name__}")
        self._state.put(_key(key), validate_value(value, self._state.max_value_size))

    def del_state(self, key: str) -> None:
        self._state.put(_key(key), None)

    def incr_counter(self, key: str, amount: int = 1) -> int:
        if amount.__class__ is not int and (isinstance(amount, bool) or not isinstance(amount, int)):
            raise InvalidArgumentError(f"a counter amount must be an int, not {type(amount).__name__}")
        return self._state.incr(_key(key), amount)

    def get_counter(self, key: str) -> int:
        return self._state.get_counter(_key(key))

    def del_counter(self, key: str) -> None:
        self._state.put(_key(key), None)
