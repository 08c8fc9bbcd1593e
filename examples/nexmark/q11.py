"""Nexmark q11, user sessions: bids per bidder per session (a session ends after 10 s without a bid).

    SELECT B.bidder, count(*) AS bid_count, SESSION_START(...), SESSION_END(...)
    FROM bid B GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)

Run with ``--key-field bidder --session-gap-ms 10000 --user-config '{"eventTimeField": "dateTime"}'``.
"""


def process(bids, context):
    window = context.get_window()
    return {"bidder": int(window.key), "bid_count": len(bids), "start": window.start, "end": window.end}
