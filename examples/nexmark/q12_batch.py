"""Nexmark q12, vectorized: bids per bidder per tumbling 10 s of processing time.

The same function as ``q12.py`` (keyed by ``bidder``, the same state per bidder): the batch's bids counted
per bidder in Arrow (``value_counts``), each bidder's state read and written once (``get_states``,
``put_states``); a bidder's count in its window output once per batch. The batch's bids share one
processing time, the batch's.
"""

import json
import time

import pyarrow.compute as pc

SIZE_MS = 10_000


def process_batch(bids, context):
    start = int(time.time() * 1000) // SIZE_MS * SIZE_MS
    counts = pc.value_counts(bids["bidder"])
    bidders, added = counts.field("values").to_pylist(), counts.field("counts").to_pylist()
    keys = [str(b) for b in bidders]
    documents, rows = [], []
    for key, bidder, n, raw in zip(keys, bidders, added, context.get_states(keys)):
        window, count = json.loads(raw) if raw else (start, 0)
        count = count + n if window == start else n
        documents.append(json.dumps([start, count]))
        rows.append({"bidder": bidder, "bid_count": count, "start": start, "end": start + SIZE_MS})
    context.put_states(keys, documents)
    return rows
