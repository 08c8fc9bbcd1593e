"""Nexmark q5, step 1 of 2: bids per auction in sliding windows of 10 s every 2 s.

    SELECT auction, count(*) AS num, window_start, window_end
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end

Keyed by ``auction``, with ``--user-config '{"eventTimeField": "dateTime"}'``. Counted as bids arrive (state
per auction: the count of each open window) and emitted by an event-time timer at each window's end, when the
watermark passes it. (A ``windowConfig`` function would keep every bid of the window: the hot auction's 10 s
hold far more than a state entry's 1 MiB.)
"""

import json

SIZE, SLIDE = 10_000, 2_000


def process(bid, context):
    key = str(bid["auction"])
    raw = context.get_state(key)
    counts = json.loads(raw) if raw else {}
    when = bid["dateTime"]
    last = when - when % SLIDE
    for start in range(last - SIZE + SLIDE, last + 1, SLIDE):
        if str(start) not in counts:
            counts[str(start)] = 0
            context.register_timer(start + SIZE)
        counts[str(start)] += 1
    context.put_state(key, json.dumps(counts).encode())


def on_timer(key, timestamp_ms, context):
    counts = json.loads(context.get_state(key))
    start = timestamp_ms - SIZE
    num = counts.pop(str(start))
    if counts:
        context.put_state(key, json.dumps(counts).encode())
    else:
        context.del_state(key)
    return {"auction": int(key), "start": start, "end": timestamp_ms, "num": num}
