"""A linearizability checker for one versioned register with compare-and-set, and a recorder that
runs concurrent clients against a real store to produce histories for it.

Checker: Wing & Gong's search with Lowe's memoization (as in Porcupine / Knossos): walk the history
in time order, try to linearize each pending call whose effect agrees with the model, backtrack at
a return that cannot be passed, and remember every (set of linearized ops, state) already tried.

Model: the register is absent (``None``) or ``(value, version)``; the version is 0 on create and
rises by one per write, as in the metadata contract.

- ``read()`` returns the state.
- ``write(v)`` stores ``v`` unconditionally and returns the new version.
- ``cas(expected_version, v)`` stores ``v`` if the version is ``expected_version`` (-1: if absent)
  and returns the new version, else returns :data:`FAIL` and changes nothing.

An operation whose outcome is unknown (it raised ``StoreUnavailableError``, timed out, ...) has no
return time (``ret=None``) and result :data:`UNKNOWN`: it may take effect at any point after its
call, or never (it can always be linearized after everything else, where it changes nothing seen).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statekeep.errors import (
    BadVersionError,
    PossibleInconsistentStateError,
    StoreUnavailableError,
)
from statekeep.testing import in_threads

FAIL = "FAIL"  # a cas that did not apply
UNKNOWN = "UNKNOWN"  # outcome not known to the client
_INF = float("inf")

State = tuple[bytes, int] | None


@dataclass(frozen=True, slots=True)
class Operation:
    client: int
    kind: str  # "read" | "write" | "cas"
    args: tuple[Any, ...]  # read: (); write: (value,); cas: (expected_version, value)
    call: float  # invocation time (any monotonic clock shared by the clients)
    ret: float | None  # response time; None if the outcome is unknown
    result: Any  # read: State; write: version; cas: version or FAIL; UNKNOWN if ret is None

    def __str__(self) -> str:
        end = "?" if self.ret is None else f"{self.ret:.0f}"
        return f"client {self.client}: {self.kind}{self.args!r} -> {self.result!r} [{self.call:.0f}, {end}]"


@dataclass(slots=True)
class CheckResult:
    ok: bool | None  # None: gave up (search budget exhausted)
    linearized: int  # ops linearized in the longest partial linearization found
    total: int
    explored: int  # distinct (linearized set, state) configurations tried
    stuck_at: Operation | None = None  # the op whose response could not be explained
    order: list[Operation] = field(default_factory=list)  # a witness linearization if ok

    def __bool__(self) -> bool:
        return self.ok is True


def step(state: State, op: Operation) -> tuple[bool, State]:
    """Apply ``op`` to the model: (does its result agree, the state after it)."""
    unknown = op.result == UNKNOWN
    if op.kind == "read":
        return unknown or op.result == state, state
    if op.kind == "write":
        new = (op.args[0], 0 if state is None else state[1] + 1)
        return unknown or op.result == new[1], new
    if op.kind == "cas":
        expected, value = op.args
        applies = state is None if expected == -1 else state is not None and state[1] == expected
        if not applies:
            return unknown or op.result == FAIL, state
        new = (value, expected + 1)
        return unknown or op.result == new[1], new
    raise ValueError(f"unknown operation kind {op.kind!r}")


class _Entry:
    __slots__ = ("op", "is_call", "match", "prev", "next")

    def __init__(self, op: int, is_call: bool) -> None:
        self.op = op
        self.is_call = is_call
        self.match: _Entry | None = None
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


def check(history: Sequence[Operation], initial: State = None, *, max_explored: int = 2_000_000) -> CheckResult:
    """Is ``history`` linearizable for the register model starting at ``initial``?"""
    ops = list(history)
    events = []
    for i, op in enumerate(ops):
        events.append((op.call, 0, i))
        # calls sort before returns at equal times: such ops count as overlapping (the lenient side)
        events.append((_INF if op.ret is None else op.ret, 1, i))
    events.sort()
    head = _Entry(-1, False)
    calls: dict[int, _Entry] = {}
    prev = head
    for _, kind, i in events:
        node = _Entry(i, kind == 0)
        if kind == 0:
            calls[i] = node
        else:
            calls[i].match = node
        node.prev, prev.next = prev, node
        prev = node

    state, linearized = initial, 0
    stack: list[tuple[_Entry, State]] = []
    seen: set[tuple[int, State]] = set()
    best, stuck = 0, None
    known = sum(op.ret is not None for op in ops)  # ops with a response not linearized yet
    entry: _Entry | None = head.next
    while head.next is not None:
        assert entry is not None  # a call's response always follows it in the list
        if entry.is_call:
            op = ops[entry.op]
            ok, new_state = step(state, op)
            if ok and op.ret is None and new_state == state and known:
                # an op of unknown outcome that changes nothing here (a read, a cas that does not apply) is as
                # well linearized after everything else, where any outcome is allowed: tried there only (else
                # each of k such ops would be tried at every point, 2^k sets of them)
                ok = False
            if ok:
                key = (linearized | (1 << entry.op), new_state)
                if key not in seen:
                    if len(seen) >= max_explored:
                        return CheckResult(None, best, len(ops), len(seen), stuck)
                    seen.add(key)
                    stack.append((entry, state))
                    state, linearized = new_state, key[0]
                    known -= op.ret is not None
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
        else:  # a response with its call not linearized yet: undo the last choice
            if len(stack) >= best:
                best, stuck = len(stack), ops[entry.op]
            if not stack:
                return CheckResult(False, best, len(ops), len(seen), stuck)
            top, state = stack.pop()
            linearized &= ~(1 << top.op)
            known += ops[top.op].ret is not None
            _unlift(top)
            entry = top.next
    return CheckResult(True, len(ops), len(ops), len(seen), None, [ops[e.op] for e, _ in stack])


def _lift(entry: _Entry) -> None:
    for e in (entry, entry.match):
        assert e is not None and e.prev is not None  # every listed entry has a predecessor (the head)
        e.prev.next = e.next
        if e.next is not None:
            e.next.prev = e.prev


def _unlift(entry: _Entry) -> None:
    for e in (entry.match, entry):
        assert e is not None and e.prev is not None
        e.prev.next = e
        if e.next is not None:
            e.next.prev = e


# ---- recording histories against a real store ------------------------------------------------------

AMBIGUOUS = (StoreUnavailableError, PossibleInconsistentStateError, TimeoutError)


class InjectedFault(StoreUnavailableError):
    """Raised by the recorder's fault injection: a request or its reply "lost" on purpose."""


def record_register_history(
    open_client: Callable[[int], Any],
    path: str,
    *,
    clients: int = 4,
    ops_per_client: int = 75,
    fault_rate: float = 0.0,
    seed: int = 0,
) -> list[Operation]:
    """Run ``clients`` threads, each with its own store from ``open_client(i)`` (closed afterwards),
    doing random reads, writes and compare-and-sets on ``path``; return the history.

    With ``fault_rate`` > 0 that fraction of operations is made ambiguous on purpose: half are
    dropped before reaching the store, half lose their reply after being applied; both are
    recorded with an open end, as a real timeout would be.
    """
    history: list[Operation] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def run(client: int) -> None:
        store = open_client(client)
        try:
            barrier.wait(timeout=60)
            ops = run_client(store, path, client, ops_per_client, fault_rate=fault_rate, seed=seed)
            with lock:
                history.extend(ops)
        finally:
            store.close()

    in_threads(run, [(c,) for c in range(clients)], name="lin-client")
    return history


def run_client(store: Any, path: str, client: int, n_ops: int, *, fault_rate: float = 0.0,
               seed: int = 0) -> list[Operation]:
    """One client's part of a history: ``n_ops`` random operations on ``path``, timed with
    ``time.monotonic_ns`` (one clock for all processes of a machine)."""
    rng = random.Random(seed * 1000 + client)
    ops, last_version = [], -1
    for n in range(n_ops):
        op, last_version = _one_op(store, path, client, n, rng, last_version, fault_rate)
        ops.append(op)
    return ops


def to_json(op: Operation) -> list[Any]:
    """A JSON-able form of ``op`` (bytes as latin-1 text), for histories recorded in other processes."""
    def enc(x: Any) -> Any:
        if isinstance(x, bytes):
            return {"b": x.decode("latin-1")}
        if isinstance(x, tuple):
            return {"t": [enc(i) for i in x]}
        return x
    return [op.client, op.kind, enc(op.args), op.call, op.ret, enc(op.result)]


def from_json(raw: list[Any]) -> Operation:
    def dec(x: Any) -> Any:
        if isinstance(x, dict):
            return x["b"].encode("latin-1") if "b" in x else tuple(dec(i) for i in x["t"])
        return x
    client, kind, args, call, ret, result = raw
    return Operation(client, kind, dec(args), call, ret, dec(result))


def _one_op(store: Any, path: str, client: int, n: int, rng: random.Random, last_version: int,
            fault_rate: float) -> tuple[Operation, int]:
    roll = rng.random()
    value = f"{client}:{n}".encode()
    args: tuple[Any, ...]
    if roll < 0.4:
        kind, args = "read", ()
    elif roll < 0.6:
        kind, args = "write", (value,)
    else:  # mostly the last version seen (often current), sometimes a stale or absent guess
        expected = last_version if rng.random() < 0.8 else rng.choice([-1, max(-1, last_version - 1)])
        kind, args = "cas", (expected, value)
    fault = rng.random() < fault_rate
    drop_before = fault and rng.random() < 0.5
    call = time.monotonic_ns()
    try:
        if drop_before:
            raise InjectedFault("request dropped (injected)")
        if kind == "read":
            got = store.get(path)
            result: Any = None if got is None else (got.value, got.stat.version)
        elif kind == "write":
            result = store.put(path, value).version
        else:
            try:
                result = store.put(path, value, expected_version=expected).version
            except BadVersionError:  # a lost create (AlreadyExistsError) or a key absent at expected version N
                result = FAIL
        if fault:
            raise InjectedFault("reply lost (injected)")
    except AMBIGUOUS:
        return Operation(client, kind, args, call, None, UNKNOWN), last_version
    ret = time.monotonic_ns()
    if kind == "read":
        last_version = -1 if result is None else result[1]
    elif result != FAIL:
        last_version = result
    return Operation(client, kind, args, call, ret, result), last_version
