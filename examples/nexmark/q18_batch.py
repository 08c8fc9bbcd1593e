"""Nexmark q18, vectorized: each bidder's latest bid on each auction.

The same function as ``q18.py`` (keyed by ``bidder``, the same typed state: each bidder's ``latest`` map from an
auction to its latest bid's time): the batch's latest bid per pair (of bids at the same time, the later one)
found in Arrow, then each pair's entry read and, where the batch's bid is the latest, written
(``.of(bidder)``), and that bid output once.
"""

import pyarrow as pa

FIELDS = ["auction", "bidder", "price", "channel", "url", "dateTime", "extra"]


def process_batch(bids, context):
    bids = bids.append_column("at", pa.array(range(bids.num_rows), pa.int64()))
    # each pair's last row once sorted by time, then arrival (one thread: "last" follows that order)
    ordered = bids.select(["bidder", "auction", "dateTime", "at"]).sort_by([("dateTime", "ascending"),
                                                                            ("at", "ascending")])
    picked = ordered.group_by(["bidder", "auction"], use_threads=False).aggregate([("at", "last")])
    latest = bids.take(picked["at_last"]).sort_by("at")
    state = context.map_state("latest", int, int)
    newer = []
    for bidder, auction, when in zip(latest["bidder"].to_pylist(), latest["auction"].to_pylist(),
                                     latest["dateTime"].to_pylist()):
        entries = state.of(str(bidder))
        fresh = entries.get(auction, when) <= when
        if fresh:
            entries.put(auction, when)
        newer.append(fresh)
    return latest.filter(pa.array(newer, pa.bool_())).select(FIELDS)
