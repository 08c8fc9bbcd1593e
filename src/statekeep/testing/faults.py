"""Faults injected from tests, in one place, so tests never reach into private attributes.

Each helper stands in for something that happens for real but cannot be triggered on demand: a session
event from the client library, a stalled client event loop, notifications that never arrive, bytes in a
state database that no provider wrote. They use internals on purpose: only this module has to follow
when those change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statekeep.coordination import CoordinationService
    from statekeep.metadata import MetadataStore, SessionEvent
    from statekeep.state.embedded.store import EmbeddedStateStore

__all__ = ["fail", "hold", "inject_session_event", "mute_notifications", "stall_event_loop", "write_raw_state"]


def inject_session_event(store: MetadataStore, event: SessionEvent) -> None:
    """Deliver ``event`` to ``store``'s session listeners as if its client library reported it."""
    store._emit_session(event)


def mute_notifications(coord: CoordinationService) -> None:
    """Stop ``coord`` from hearing the store's notifications (as if they were lost); session events
    and its re-check timer still reach it."""
    coord._subscriptions[0].close()


def stall_event_loop(store: MetadataStore, seconds: float) -> None:
    """Block an ``etcd://`` store's client event loop for ``seconds`` (a stuck process: no keep-alive)."""
    # the etcd store's private loop: MetadataStore does not declare it
    store._loop.call_soon_threadsafe(time.sleep, seconds)  # type: ignore[attr-defined]


def write_raw_state(state: EmbeddedStateStore, key: str, raw: bytes) -> None:
    """Store ``raw`` as the value of ``key`` of an embedded state store, bypassing every check."""
    with state._env.begin(write=True, db=state._state) as txn:
        txn.put(state._prefix + key.encode(), raw)


def hold(store: MetadataStore, method: str, matches: Callable[[Any], bool]) -> tuple[threading.Event, threading.Event]:
    """Make the first call of ``store.<method>`` whose first argument ``matches`` wait before it is
    sent (a slow reader or writer: the store may change meanwhile). Returns ``(held, release)``:
    ``held`` is set once that call waits; it goes on when the caller sets ``release``."""
    held, release = threading.Event(), threading.Event()
    send = getattr(store, method)

    def call(first: Any, *args: Any, **kwargs: Any) -> Any:
        if not held.is_set() and matches(first):
            held.set()
            release.wait()
        return send(first, *args, **kwargs)

    setattr(store, method, call)
    return held, release


def fail(store: MetadataStore, method: str, error: BaseException, *, times: int = 1, sent: bool = False,
         matches: Callable[[Any], bool] = lambda first: True) -> list[Any]:
    """Make the next ``times`` calls of ``store.<method>`` whose first argument ``matches`` raise ``error``
    (an unreachable store; with ``sent``, after the call went through: a write whose answer was lost, as
    under a :class:`PossibleInconsistentStateError`). Later calls go through. Returns the list that the
    first argument of each failed call is appended to."""
    failed: list[Any] = []
    send = getattr(store, method)

    def call(first: Any, *args: Any, **kwargs: Any) -> Any:
        if len(failed) < times and matches(first):
            failed.append(first)
            if sent:
                send(first, *args, **kwargs)
            raise error
        return send(first, *args, **kwargs)

    setattr(store, method, call)
    return failed
