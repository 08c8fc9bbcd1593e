"""Nexmark q18, vectorized: each bidder's latest bid on each auction.

The same function as ``q18.py`` (``bid/``, no key field; the same typed state: each pair's ``latest`` under the
key ``bidder-auction``): the batch's latest bid per pair (of bids at the same time, the later one) found in
Arrow, the pairs' stored times read at once (``get_many``), and each pair whose latest bid is in the batch
written (``update_many``) and output once.
"""

import pyarrow as pa
import pyarrow.compute as pc

FIELDS = ["auction", "bidder", "price", "channel", "url", "dateTime", "extra"]


def process_batch(bids, context):
    bids = bids.append_column("at", pa.array(range(bids.num_rows), pa.int64()))
    # each pair's last row once sorted by time, then arrival (one thread: "last" follows that order)
    ordered = bids.select(["bidder", "auction", "dateTime", "at"]).sort_by([("dateTime", "ascending"),
                                                                            ("at", "ascending")])
    picked = ordered.group_by(["bidder", "auction"], use_threads=False).aggregate([("at", "last")])
    latest = bids.take(picked["at_last"]).sort_by("at")
    keys = pc.binary_join_element_wise(pc.cast(latest["bidder"], pa.string()), pc.cast(latest["auction"], pa.string()),
                                       "-").to_pylist()
    times = latest["dateTime"].to_pylist()
    state = context.value_state("latest", int)
    newer = [stored is None or stored <= when for stored, when in zip(state.get_many(keys), times)]
    state.update_many([k for k, fresh in zip(keys, newer) if fresh],
                      [when for when, fresh in zip(times, newer) if fresh])
    return latest.filter(pa.array(newer, pa.bool_())).select(FIELDS)
