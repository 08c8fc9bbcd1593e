"""Nexmark q11, user sessions: bids per bidder per session (a session ends after 10 s without a bid).

    SELECT B.bidder, count(*) AS bid_count, SESSION_START(...), SESSION_END(...)
    FROM bid B GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)

Keyed by ``bidder``, with ``--user-config '{"eventTimeField": "dateTime"}'``; each bidder's bids arrive in
event-time order (the generator's streams are in order). State per bidder: the open session's start, last
bid and count; an event-time timer at last bid + 10 s closes it (moved at each bid), and a bid 10 s or more
after the last closes it at once. (A ``--session-gap-ms`` windowed function would keep every bid of the
session: the hot bidder's session never closes, and outgrows a state entry's 1 MiB.)
"""

import json

GAP = 10_000


def _session(key, start, last, count):
    return {"bidder": int(key), "bid_count": count, "start": start, "end": last + GAP}


def process(bid, context):
    key, when = str(bid["bidder"]), bid["dateTime"]
    raw = context.get_state(key)
    closed = None
    if raw is None:
        start, count = when, 1
    else:
        start, last, count = json.loads(raw)
        context.delete_timer(last + GAP)
        if when < last + GAP:
            count += 1
        else:  # the gap passed: the session is over even if the watermark has not reached its end yet
            closed = _session(key, start, last, count)
            start, count = when, 1
    context.put_state(key, json.dumps([start, when, count]).encode())
    context.register_timer(when + GAP)
    return closed


def on_timer(key, timestamp_ms, context):
    start, last, count = json.loads(context.get_state(key))
    context.del_state(key)
    return _session(key, start, last, count)
