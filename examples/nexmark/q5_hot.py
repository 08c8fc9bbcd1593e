"""Nexmark q5, step 2 of 2, hot items: per window, the auctions with the most bids.

    ... WHERE AuctionBids.num >= (SELECT max(num) FROM AuctionBids of the same window)

Input: ``q5_count.py``'s output, keyed by ``start`` (the window). State per window: the highest count and
its auctions. Output: the window's hot auctions after each change (an updating result).
"""

import json


def process(count, context):
    key = str(count["start"])
    raw = context.get_state(key)
    best, auctions = json.loads(raw) if raw else (0, [])
    if count["num"] < best:
        return None
    if count["num"] > best:
        best, auctions = count["num"], []
    auctions.append(count["auction"])
    context.put_state(key, json.dumps([best, auctions]).encode())
    return {"start": count["start"], "end": count["end"], "num": best, "auctions": sorted(auctions)}
