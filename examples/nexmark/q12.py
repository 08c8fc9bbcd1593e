"""Nexmark q12, processing-time windows: bids per bidder per tumbling 10 s of processing time.

    SELECT B.bidder, count(*) AS bid_count, window_start, window_end
    FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(p_time), INTERVAL '10' SECOND)) GROUP BY B.bidder, window

Keyed by ``bidder``. State per bidder: its current window and count. Output: the bidder's count in its
window after each bid (an updating result: the last record per (bidder, window) is its count). Which window a
bid lands in depends on when it is processed, so only the sum over windows is reproducible.
"""

import json
import time

SIZE_MS = 10_000


def process(bid, context):
    key = str(bid["bidder"])
    start = int(time.time() * 1000) // SIZE_MS * SIZE_MS
    raw = context.get_state(key)
    window, count = json.loads(raw) if raw else (start, 0)
    count = count + 1 if window == start else 1
    context.put_state(key, json.dumps([start, count]).encode())
    return {"bidder": bid["bidder"], "bid_count": count, "start": start, "end": start + SIZE_MS}
