"""Nexmark q11 through ``windowConfig``: bids per bidder per session (a session ends after 10 s without a bid).

    SELECT B.bidder, count(*) AS bid_count, SESSION_START(...), SESSION_END(...)
    FROM bid B GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)

Keyed by ``bidder``, with ``windowConfig`` ``{"sessionGapMs": 10000}`` and ``--user-config '{"eventTimeField":
"dateTime"}'``. The aggregate form: a session keeps its count, not its bids (the hot bidder's session never
closes), two sessions a late bid bridges are merged (``merge_accumulators``), and ``process`` outputs the
session once the watermark passes its end (its last bid + 10 s). The same output as ``q11.py`` (its timer
version).
"""


def create_accumulator():
    return 0


def add_to_accumulator(count, bid):
    return count + 1


def merge_accumulators(a, b):
    return a + b


def get_result(count):
    return count


def process(bid_count, context):
    window = context.get_window()
    return {"bidder": int(window.key), "bid_count": bid_count, "start": window.start, "end": window.end}
