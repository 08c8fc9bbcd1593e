"""Typed state operations against their targets, on the embedded store (``local://``), in one process: each
batch through a function's Context and its batch buffer, committed as a micro-batch commits it.

    python benchmarks/typed_state.py [--ops 20000] [--appends 1000000]

- ``map_state`` put then get of one entry in a map of 10k entries against one of 10 (target: within 1.5x); and the
  map of 10k with every entry read by the batch before its ops (no store read at all: the ratio's floor);
- 1M appends to one key's list in batches of 10k, each batch committed: the time per append of the first and
  the last batches (target: constant);
- ``value_state`` get and update against ``get_counter`` and ``incr_counter`` per record (the end-to-end
  comparison is ``benchmarks/spark_state.py --variants statekeep,statekeep_value_state``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from typing import Any

from statekeep.functions.config.service import FunctionService
from statekeep.functions.executor.context import Context
from statekeep.state.buffer import BufferedState
from statekeep.state.typed import variable_prefix


def batch(store: Any, work: Callable[[Context], None], read: Iterable[str] = ()) -> float:
    """Run ``work`` on a Context over a new batch buffer (``read``: state keys read into it first), commit it; the
    seconds ``work`` took."""
    state = BufferedState(store.fetch_many, store.max_value_size, store.scan)
    state.prefetch(read)
    context = Context("public", "default", "typed", state)
    began = time.perf_counter()
    work(context)
    took = time.perf_counter() - began
    store.apply_batch(state.puts, state.counter_deltas)
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=20_000)
    parser.add_argument("--appends", type=int, default=1_000_000)
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as work, FunctionService.open(f"local://{work}") as service:
        service.registry.create({"tenant": "public", "namespace": "default", "name": "typed", "inputs": ["x"]},
                                b"def process(input, context):\n    pass\n")
        store = service.registry.state_store("public", "default", "typed")

        for size in (10, 10_000):
            batch(store, lambda c, size=size: c.map_state("m", str, int).of(f"map{size}").put_all(
                {f"e{i}": i for i in range(size)}))

        def ops(c: Context, size: int) -> None:
            entries = c.map_state("m", str, int).of(f"map{size}")
            for _ in range(args.ops):
                name = f"e{rng.randrange(size)}"
                entries.put(name, entries.get(name, 0) + 1)
        entries = [f"{variable_prefix('map10000', 'm')}mse{i}" for i in range(10_000)]  # map_entry's state keys
        rounds: dict[Any, list[float]] = {10: [], 10_000: [], "read": []}
        for _ in range(5):  # alternated, medians: this machine's speed drifts within a run
            for size in rounds:
                if size == "read":
                    rounds[size].append(batch(store, lambda c: ops(c, 10_000), entries) / args.ops)
                else:
                    rounds[size].append(batch(store, lambda c, size=size: ops(c, size)) / args.ops)
        per_op = {size: statistics.median(times) for size, times in rounds.items()}
        print(f"map_state get+put of one entry: {per_op[10] * 1e6:.2f} µs in a map of 10, "
              f"{per_op[10_000] * 1e6:.2f} µs in a map of 10k: {per_op[10_000] / per_op[10]:.2f}x (target <= 1.5x); "
              f"{per_op['read'] * 1e6:.2f} µs with the 10k entries read before: {per_op['read'] / per_op[10]:.2f}x")

        chunk, times = 10_000, []
        for _ in range(args.appends // chunk):
            times.append(batch(store, lambda c: c.list_state("log", int).of("one").extend(range(chunk))) / chunk)
        first, last = statistics.median(times[:10]), statistics.median(times[-10:])
        print(f"list_state append, {args.appends:,} to one key in batches of {chunk:,}: {first * 1e6:.2f} µs each in "
              f"the first ten batches, {last * 1e6:.2f} µs in the last ten (medians): {last / first:.2f}x "
              "(target: constant)")

        keys = [f"k{i}" for i in range(1000)]

        def counters(c: Context) -> None:
            for i in range(args.ops):
                c.incr_counter(keys[i % 1000], 1)

        def values(c: Context) -> None:
            for i in range(args.ops):
                count = c.value_state("count", int).of(keys[i % 1000])
                count.update(count.get(0) + 1)
        counter_s, value_s = batch(store, counters) / args.ops, batch(store, values) / args.ops
        print(f"per record: incr_counter {counter_s * 1e6:.2f} µs, value_state get+update {value_s * 1e6:.2f} µs "
              f"({counter_s / value_s:.2f}x incr_counter's speed)")


if __name__ == "__main__":
    main()
