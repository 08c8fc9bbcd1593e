"""A function's partitions run in one process, as Spark's tasks run them, without Spark: what the runtime itself
costs per batch, and what the garbage collector's setting during a run (statekeep.functions.executor.collector)
changes, each against its baseline in the same run.

    python benchmarks/partition_run.py [--events 1000000] [--keys 10000] [--counting-events 750000] [--q18-events N]

- windows: ``benchmarks/windows.py``'s records-kept and aggregate functions (1-minute tumbling windows) over its
  events (``--events`` over ``--keys`` keys, 10 micro-batches, 2 partitions), with the collector as the runtime sets
  it, and with the default thresholds throughout (the baseline);
- counting: ``benchmarks/spark_state.py``'s ``incr_counter`` and ``value_state`` functions over micro-batches of
  125k records over 50k keys (one partition each), the median partition (the first batch left out); the ratio is
  ``incr_counter``'s time over ``value_state``'s;
- Nexmark q18 (``examples/nexmark/q18.py``: a typed value per (bidder, auction) through ``.of(key)``, a bid out per
  new latest) over the generator's bids in batches of 10k (``--q18-events`` events), its outputs written by the
  runtime's encoder (``jsonscan.dumps``) and by ``json.dumps`` (the baseline): microseconds per record.
State is on the embedded store (``local://``) in a temporary directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import windows  # noqa: E402
from spark_state import COUNT_ONLY, COUNT_VALUE_STATE  # noqa: E402

from statekeep.functions.config.service import FunctionService  # noqa: E402
from statekeep.functions.config.spec import Layout, executor_spec  # noqa: E402
from statekeep.functions.executor import runtime  # noqa: E402
from statekeep.functions.executor.runtime import run_partition  # noqa: E402
from statekeep.functions.windowing.timerun import stored_watermark  # noqa: E402
from statekeep.state.keygroups import key_group  # noqa: E402


def registered(service: FunctionService, url: str, name: str, code: bytes, **config: Any) -> Any:
    service.registry.create({"tenant": "b", "namespace": "p", "name": name, "inputs": ["x"], "inputFormat": "json",
                             **config}, code)
    return executor_spec(service.registry, url, "b", "p", name)[0]


def window_batches(events: int, keys: int, files: int = 10) -> list[list[tuple[list[str], list[str]]]]:
    """windows.py's events, per micro-batch and partition (2): (JSON lines, their keys)."""
    per, span, out = events // files, files * windows.LENGTH, []
    for f in range(files):
        parts: list[tuple[list[str], list[str]]] = [([], []), ([], [])]
        for i in range(f * per, (f + 1) * per):
            ts = windows.BASE + i * span // events + (i * 7919) % 3000 - 1500
            key = f"key-{(i * 31) % keys}"
            lines, owned = parts[key_group(key, 128) * 2 // 128]
            lines.append(f'{{"k":"{key}","ts":{ts}}}')
            owned.append(key)
        out.append(parts)
    return out


def windows_run(work: str, name: str, code: str, batches: Any) -> float:
    url = f"local://{work}/{name}"
    with FunctionService.open(url) as service:
        spec = registered(service, url, name, code.encode(), keyField="k", output=f"{work}/{name}-out", parallelism=2,
                          windowConfig={"windowLengthDurationMs": windows.LENGTH, "maxLagMs": windows.LAG},
                          userConfig={"eventTimeField": "ts", "maxLagMs": windows.LAG})
        store, began = spec.state_store(), time.perf_counter()
        for batch, parts in enumerate(batches):
            layout = Layout(128, 2, stored_watermark(store, batch))
            for partition, (lines, keys) in enumerate(parts):
                run_partition(spec, batch, partition, lines, record_keys=keys, layout=layout)
        return time.perf_counter() - began


def counting(work: str, events: int) -> dict[str, float]:
    rng, url, times = random.Random(1), f"local://{work}/counting", {}
    batches = []
    for _ in range(max(2, events // 125_000)):
        words = [f"w{rng.randrange(50_000)}" for _ in range(125_000)]
        batches.append(([json.dumps({"word": w}) for w in words], words))
    with FunctionService.open(url) as service:
        specs = {name: registered(service, url, name, code, keyField="word", parallelism=1)
                 for name, code in (("incr_counter", COUNT_ONLY), ("value_state", COUNT_VALUE_STATE))}
        runs: dict[str, list[float]] = {name: [] for name in specs}
        for batch, (lines, words) in enumerate(batches):
            for name in specs if batch % 2 else reversed(specs):  # alternating order
                began = time.perf_counter()
                run_partition(specs[name], batch, 0, lines, record_keys=words, layout=Layout(128, 1, None))
                runs[name].append(time.perf_counter() - began)
        for name, seconds in runs.items():
            times[name] = statistics.median(seconds[1:])
    return times


def q18(work: str, events: int) -> dict[str, float]:
    """Seconds per record of q18's function over ``events`` Nexmark events' bids, by output encoder."""
    from nexmark_model.generator import NexmarkConfig
    from nexmark_model.generator import events as nexmark_events

    from statekeep.functions.messaging import sink

    bids = [json.dumps(e["bid"]) for e in nexmark_events(NexmarkConfig(num_events=events)) if e.get("bid")]
    code = (Path(__file__).parent.parent / "examples" / "nexmark" / "q18.py").read_bytes()
    encoders = {"json.dumps": lambda r: json.dumps(r, separators=(",", ":"), default=str), "jsonscan.dumps": sink.dumps}
    times: dict[str, list[float]] = {name: [] for name in encoders}
    for round_ in range(2):  # alternating order
        for name in encoders if round_ % 2 == 0 else reversed(encoders):
            url = f"local://{work}/q18-{name}-{round_}"
            with FunctionService.open(url) as service:
                spec = registered(service, url, "q18", code, parallelism=1, output=f"{work}/q18-{name}-{round_}-out")
                sink.dumps = encoders[name]
                try:
                    began = time.perf_counter()
                    for batch, start in enumerate(range(0, len(bids), 10_000)):
                        run_partition(spec, batch, 0, bids[start:start + 10_000], layout=Layout(128, 1, None))
                    times[name].append((time.perf_counter() - began) / len(bids))
                finally:
                    sink.dumps = encoders["jsonscan.dumps"]
    return {name: min(seconds) for name, seconds in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--counting-events", type=int, default=750_000)
    parser.add_argument("--q18-events", type=int, default=230_000)
    args = parser.parse_args()
    batches = window_batches(args.events, args.keys)
    setting = runtime.young_generation_only
    with tempfile.TemporaryDirectory() as work:
        print(f"windows, {args.events:,} events over {args.keys:,} keys, 10 micro-batches, 2 partitions in one process")
        print(f"{'form':14} {'default GC s':>13} {'runtime GC s':>13} {'ratio':>7}")
        for form, code in (("records kept", windows.PER_RECORD), ("aggregate", windows.PER_RECORD_AGGREGATE)):
            runtime.young_generation_only = contextlib.nullcontext  # type: ignore[assignment]  # the baseline
            try:
                default = windows_run(work, f"{form[:3]}-default", code, batches)
            finally:
                runtime.young_generation_only = setting
            ours = windows_run(work, f"{form[:3]}-runtime", code, batches)
            print(f"{form:14} {default:13.2f} {ours:13.2f} {default / ours:6.2f}x")
        times = counting(work, args.counting_events)
        print(f"counting, partitions of 125,000 records over 50,000 keys (median s): incr_counter "
              f"{times['incr_counter']:.3f}, value_state {times['value_state']:.3f}: "
              f"{times['incr_counter'] / times['value_state']:.2f}x incr_counter's speed")
        per = q18(work, args.q18_events)
        print(f"Nexmark q18, {args.q18_events:,} events' bids in batches of 10,000, us per record (the faster of two "
              f"runs): outputs by json.dumps {per['json.dumps'] * 1e6:.2f}, by jsonscan.dumps "
              f"{per['jsonscan.dumps'] * 1e6:.2f}: {per['json.dumps'] / per['jsonscan.dumps']:.2f}x")


if __name__ == "__main__":
    main()
