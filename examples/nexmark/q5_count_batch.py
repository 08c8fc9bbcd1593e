"""Nexmark q5, step 1 of 2, vectorized: bids per auction in sliding windows of 10 s every 2 s.

The same function as ``q5_count.py`` (same state, timers and ``on_timer``), with the batch's bids counted per
(auction, window) in Arrow: each bid's five window starts, then one group-by. State is read and written once
per auction in the batch (``get_states``, ``put_states``); a timer at the end of each window new to an auction.
"""

import json

import pyarrow as pa
import pyarrow.compute as pc

SIZE, SLIDE = 10_000, 2_000


def process_batch(bids, context):
    auction, when = bids["auction"], bids["dateTime"]
    last = pc.subtract(when, pc.modulo(when, SLIDE))  # the start of each bid's newest window
    starts = [pc.subtract(last, back) for back in range(0, SIZE, SLIDE)]
    pairs = pa.table({"auction": pa.chunked_array([c for _ in starts for c in auction.chunks]),
                      "start": pa.chunked_array([c for s in starts for c in s.chunks])})
    counted = pairs.group_by(["auction", "start"]).aggregate([([], "count_all")]).to_pydict()
    per_auction = {}
    for a, start, num in zip(counted["auction"], counted["start"], counted["count_all"]):
        per_auction.setdefault(str(a), []).append((str(start), num))
    keys = list(per_auction)
    documents = []
    for key, raw in zip(keys, context.get_states(keys)):
        counts = json.loads(raw) if raw else {}
        for start, num in per_auction[key]:
            if start not in counts:
                counts[start] = 0
                context.register_timer(int(start) + SIZE, key=key)
            counts[start] += num
        documents.append(json.dumps(counts))
    context.put_states(keys, documents)


def on_timer(key, timestamp_ms, context):
    counts = json.loads(context.get_state(key))
    start = timestamp_ms - SIZE
    num = counts.pop(str(start))
    if counts:
        context.put_state(key, json.dumps(counts).encode())
    else:
        context.del_state(key)
    return {"auction": int(key), "start": start, "end": timestamp_ms, "num": num}
