"""Nexmark q7, highest bid: per tumbling 10 s window, the bids at the window's highest price.

    SELECT B.auction, B.price, B.bidder, B.dateTime FROM bid B JOIN (
        SELECT MAX(price) AS maxprice, window_end FROM TUMBLE(bid, dateTime, 10 s) GROUP BY window) B1
    ON B.price = B1.maxprice AND B.dateTime in the window

Run without a key field (every bid is in one window per 10 s), with ``--user-config '{"eventTimeField":
"dateTime"}'``. State per window: its highest price so far and the bids at it; an event-time timer at the
window's end emits them once the watermark passes it. (A ``windowConfig`` function would keep every bid of
the window, far more than a state entry's 1 MiB at Nexmark's rate.)
"""

import json

SIZE = 10_000


def process(bid, context):
    start = bid["dateTime"] - bid["dateTime"] % SIZE
    raw = context.get_state(str(start))
    if raw is None:
        context.register_timer(start + SIZE)
        top, bids = bid["price"], []
    else:
        top, bids = json.loads(raw)
    if bid["price"] < top:
        return
    if bid["price"] > top:
        top, bids = bid["price"], []
    bids.append([bid["auction"], bid["bidder"], bid["dateTime"]])
    context.put_state(str(start), json.dumps([top, bids]).encode())


def on_timer(key, timestamp_ms, context):
    start = timestamp_ms - SIZE
    top, bids = json.loads(context.get_state(str(start)))
    context.del_state(str(start))
    return {"start": start, "end": timestamp_ms, "price": top, "bids": bids}
