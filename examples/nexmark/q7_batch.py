"""Nexmark q7, vectorized: per tumbling 10 s window, the bids at the window's highest price.

The same function as ``q7.py`` (same state per window, timers and ``on_timer``): the batch's highest price per
window by an Arrow group-by, its bids at that price by a join back; then each window's state is read and
written once (``get_states``, ``put_states``) and a timer set at the end of each window new to the state.
"""

import json

import pyarrow as pa
import pyarrow.compute as pc

SIZE = 10_000


def process_batch(bids, context):
    when = bids["dateTime"]
    bids = pa.table({"start": pc.subtract(when, pc.modulo(when, SIZE)), "price": bids["price"],
                     "auction": bids["auction"], "bidder": bids["bidder"], "dateTime": when})
    tops = bids.group_by("start").aggregate([("price", "max")]).rename_columns(["start", "price"])
    best = bids.join(tops, ["start", "price"], join_type="inner")  # each window's bids at its highest price
    per_window = {}
    for start, price, auction, bidder, at in zip(*(best[c].to_pylist() for c in best.column_names)):
        per_window.setdefault(str(start), [price, []])[1].append([auction, bidder, at])
    keys = list(per_window)
    changed, documents = [], []
    for key, raw in zip(keys, context.get_states(keys)):
        price, found = per_window[key]
        if raw is None:
            context.register_timer(int(key) + SIZE)
            top, stored = price, []
        else:
            top, stored = json.loads(raw)
        if price < top:
            continue
        if price > top:
            top, stored = price, []
        stored.extend(found)
        changed.append(key)
        documents.append(json.dumps([top, stored]))
    context.put_states(changed, documents)


def on_timer(key, timestamp_ms, context):
    start = timestamp_ms - SIZE
    top, bids = json.loads(context.get_state(str(start)))
    context.del_state(str(start))
    return {"start": start, "end": timestamp_ms, "price": top, "bids": bids}
