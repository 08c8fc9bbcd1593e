"""Nexmark q11, vectorized: bids per bidder per session (a session ends after 10 s without a bid).

The same function as ``q11.py`` (keyed by ``bidder``, the same state, timer and ``on_timer``): the batch's
bids grouped by bidder in their order, each bidder's state read and written once (``get_states``,
``put_states``), its sessions closed by a gap inside the batch output at once, and its timer moved once, to
its last bid + 10 s.
"""

import json

GAP = 10_000


def _session(key, start, last, count):
    return {"bidder": int(key), "bid_count": count, "start": start, "end": last + GAP}


def process_batch(bids, context):
    per_bidder = {}
    for bidder, when in zip(bids["bidder"].to_pylist(), bids["dateTime"].to_pylist()):
        per_bidder.setdefault(str(bidder), []).append(when)
    keys = list(per_bidder)
    documents, closed = [], []
    for key, raw in zip(keys, context.get_states(keys)):
        times = per_bidder[key]
        if raw is None:
            start, last, count = times[0], times[0], 0
        else:
            start, last, count = json.loads(raw)
            context.delete_timer(last + GAP, key=key)
        for when in times:
            if when >= last + GAP:  # the gap passed: the session is over even if the watermark has not reached it
                closed.append(_session(key, start, last, count))
                start, count = when, 0
            last, count = when, count + 1
        documents.append(json.dumps([start, last, count]))
        context.register_timer(last + GAP, key=key)
    context.put_states(keys, documents)
    return closed or None


def on_timer(key, timestamp_ms, context):
    start, last, count = json.loads(context.get_state(key))
    context.del_state(key)
    return _session(key, start, last, count)
