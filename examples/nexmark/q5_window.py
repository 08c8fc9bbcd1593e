"""Nexmark q5, step 1 of 2, through ``windowConfig``: bids per auction in sliding windows of 10 s every 2 s.

    SELECT auction, count(*) AS num, window_start, window_end
    FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
    GROUP BY auction, window_start, window_end

Keyed by ``auction``, with ``windowConfig`` ``{"windowLengthDurationMs": 10000, "slidingIntervalDurationMs":
2000}`` and ``--user-config '{"eventTimeField": "dateTime"}'``. The aggregate form: each window keeps a count
(``add_to_accumulator``), not its bids, and ``process`` is called once per (auction, window) when the watermark
passes the window's end. The same output as ``q5_count.py`` (its timer version), read by ``q5_hot.py``.
"""


def create_accumulator():
    return 0


def add_to_accumulator(count, bid):
    return count + 1


def get_result(count):
    return count


def process(num, context):
    window = context.get_window()
    return {"auction": int(window.key), "start": window.start, "end": window.end, "num": num}
