"""Typed state variables written as a function's records write them, for the tests of their readers."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable

import pytest

from statekeep.functions.config.service import FunctionService
from statekeep.state import timestate as context_module
from statekeep.functions.executor.context import Context
from statekeep.state.timekeeping import TimeState
from statekeep.state.keygroups import KEY_GROUPS
from statekeep.state.base import StateStore
from statekeep.state.transaction import KeyedTransaction
from statekeep.state.timestate import wall_clock_ms

FN = ("public", "default", "typed")


@dataclasses.dataclass
class Bid:
    auction: int
    price: int


ANN = {"count": 2, "bids": [{"auction": 1, "price": 10}, {"auction": 2, "price": 5}], "best": {"1": 10, "2": 5}}


def commit(store: StateStore, write: Callable[[Context], None], owned: Iterable[int] = range(KEY_GROUPS)) -> None:
    """``write(context)``'s state changes committed in one batch, as the runtime commits a batch's: with the time
    state (the TTL index) of a run owning the key groups ``owned``, at the clock of ``timestate.wall_clock_ms``."""
    txn = KeyedTransaction.begin(store)
    context = Context(*FN, txn)
    time = TimeState(txn.state, KEY_GROUPS, owned, clock=lambda: context_module.wall_clock_ms())
    txn.view(time.flush)
    context.keep_time(time)
    write(context)
    txn.prepare()
    txn.commit()


def write_state(service: FunctionService) -> None:
    """Value, list and map state of "ann" and "bob" (and a user's bytes key), committed as a batch commits it;
    then a list of "ann" whose one element expired a minute ago, and a value of "bob" that did too."""
    store = service.registry.state_store(*FN)
    batch = functools.partial(commit, store)
    def first(context: Context) -> None:
        context.value_state("count", int).of("ann").update(2)
        context.list_state("bids", Bid).of("ann").extend([Bid(1, 10), Bid(2, 5)])
        context.map_state("best", int, int).of("ann").put_all({1: 10, 2: 5})
        context.value_state("count", int).of("bob").update(1)

    batch(first)
    store.put("plain", b"bytes")
    now = wall_clock_ms()

    def expiring(context: Context) -> None:
        context.list_state("old", int, ttl=1).of("ann").append(7)
        context.value_state("gone", str, ttl=1).of("bob").update("x")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(context_module, "wall_clock_ms", lambda: now - 60_000)  # written with a 1 s TTL, 60 s ago
        batch(expiring)
