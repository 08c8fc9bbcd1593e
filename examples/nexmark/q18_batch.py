"""Nexmark q18, vectorized: each bidder's latest bid on each auction.

The same function as ``q18.py`` (input ``rekey_batch.py``'s or ``rekey.py``'s output keyed by ``k``,
bidder-auction; the same state per pair): the batch's latest bid per pair (of bids at the same time, the
later one) found in Arrow, the pairs' stored times read at once (``get_states``), and each pair whose latest
bid is in the batch written (``put_states``) and output once.
"""

import pyarrow as pa

FIELDS = ["auction", "bidder", "price", "channel", "url", "dateTime", "extra"]


def process_batch(bids, context):
    bids = bids.append_column("at", pa.array(range(bids.num_rows), pa.int64()))
    # each pair's last row once sorted by time, then arrival (one thread: "last" follows that order)
    ordered = bids.select(["k", "dateTime", "at"]).sort_by([("dateTime", "ascending"), ("at", "ascending")])
    picked = ordered.group_by("k", use_threads=False).aggregate([("at", "last")])
    latest = bids.take(picked["at_last"]).sort_by("at")
    stored = context.get_states(latest["k"])
    newer = pa.array([raw is None or int(raw) <= when for raw, when in zip(stored, latest["dateTime"].to_pylist())],
                     pa.bool_())
    latest = latest.filter(newer)
    context.put_states(latest["k"], [str(when) for when in latest["dateTime"].to_pylist()])
    return latest.select(FIELDS)
