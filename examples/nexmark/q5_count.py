"""Nexmark q5, step 1 of 2: bids per auction in sliding windows of 10 s every 2 s (a windowed function).

    SELECT auction, count(*) AS num, window_start, window_end
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end

Run with ``--key-field auction --window-length-duration-ms 10000 --sliding-interval-duration-ms 2000
--user-config '{"eventTimeField": "dateTime"}'``: called once per (auction, window) when the watermark passes
the window's end.
"""


def process(bids, context):
    window = context.get_window()
    return {"auction": int(window.key), "start": window.start, "end": window.end, "num": len(bids)}
