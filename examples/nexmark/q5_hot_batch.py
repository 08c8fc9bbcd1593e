"""Nexmark q5, step 2 of 2, vectorized: per window, the auctions with the most bids.

The same function as ``q5_hot.py`` (same state per window), reading and writing each window's state once per
batch (``get_states``, ``put_states``); a window's row is output once per batch, after the batch's counts.
"""

import json


def process_batch(counts, context):
    per_window = {}
    for start, end, num, auction in zip(*(counts[c].to_pylist() for c in ("start", "end", "num", "auction"))):
        per_window.setdefault(str(start), [end, []])[1].append((num, auction))
    keys = list(per_window)
    changed, documents, rows = [], [], []
    for key, raw in zip(keys, context.get_states(keys)):
        best, auctions = json.loads(raw) if raw else (0, [])
        end, seen = per_window[key]
        grew = False
        for num, auction in seen:
            if num < best:
                continue
            if num > best:
                best, auctions = num, []
            auctions.append(auction)
            grew = True
        if grew:
            changed.append(key)
            documents.append(json.dumps([best, auctions]))
            rows.append({"start": int(key), "end": end, "num": best, "auctions": sorted(auctions)})
    context.put_states(changed, documents)
    return rows or None
