"""Typed state's codec: msgspec's MessagePack against JSON (the standard library's ``json``, as the Nexmark
examples hand-roll it today), for the value types a state variable holds: encode then decode, per value.

    python benchmarks/typed_codec.py [--values 200000]

Prints each codec's time per value and msgspec's speed as a multiple of JSON's (what statekeep.state.typed
chose it by).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

import msgspec


@dataclasses.dataclass
class Bid:
    auction: int
    bidder: int
    price: int
    channel: str
    date_time: int


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--values", type=int, default=200_000)
    args = parser.parse_args()
    cases: dict[str, tuple[Any, type]] = {
        "int": (123456, int), "str": ("a state value of some length", str),
        "dataclass Bid": (Bid(1007, 42, 5_500_000, "channel-3", 1_436_918_400_000), Bid),
        "list[int] of 50": (list(range(50)), list[int])}
    print(f"{'type':<18}{'json µs':>9}{'msgspec µs':>12}{'ratio':>8}")
    for name, (value, tp) in cases.items():
        encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(tp)
        is_class = dataclasses.is_dataclass(tp)
        began = time.perf_counter()
        for _ in range(args.values):
            decoder.decode(encoder.encode(value))
        fast = time.perf_counter() - began
        began = time.perf_counter()
        for _ in range(args.values):
            data = json.loads(json.dumps(dataclasses.asdict(value) if is_class else value))
            if is_class:
                tp(**data)
        slow = time.perf_counter() - began
        print(f"{name:<18}{slow / args.values * 1e6:>9.2f}{fast / args.values * 1e6:>12.2f}{slow / fast:>7.1f}x")


if __name__ == "__main__":
    main()
