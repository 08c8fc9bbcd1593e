"""Nexmark q9, vectorized: each auction with its highest bid placed while it was open (the earliest of equal
highest bids).

The same function as ``q9.py`` (input ``rekey_batch.py``'s or ``rekey.py``'s output keyed by ``k``, the same
state per auction): the batch's records grouped by auction in their order, each auction's state read and
written once (``get_states``, ``put_states``), and an auction's row output once per batch when its winner
changed in it.
"""

import json

import pyarrow.compute as pc

AUCTION_FIELDS = ("id", "itemName", "initialBid", "reserve", "dateTime", "expires", "seller", "category")


def process_batch(records, context):
    is_auction = pc.equal(records["kind"], "auction")
    auctions = iter(records.filter(is_auction).select(list(AUCTION_FIELDS)).to_pylist()
                    if pc.any(is_auction).as_py() else [])
    per_auction = {}
    for key, kind, price, when, bidder in zip(*(records[c].to_pylist() if c in records.column_names
                                               else [None] * records.num_rows
                                               for c in ("k", "kind", "price", "dateTime", "bidder"))):
        per_auction.setdefault(key, []).append(next(auctions) if kind == "auction" else (price, when, bidder))
    keys = list(per_auction)
    changed, documents, rows = [], [], []
    for key, raw in zip(keys, context.get_states(keys)):
        side = json.loads(raw) if raw else {"a": None, "win": None, "pend": []}
        old, dirty = side["win"], False
        for item in per_auction[key]:
            if item.__class__ is dict:  # the auction: its waiting bids are judged now
                side["a"], bids, side["pend"], dirty = item, side["pend"], [], True
            elif side["a"] is None:  # the auction is not known yet: keep the bid until it arrives
                side["pend"].append(list(item))
                dirty = True
                continue
            else:
                bids = [item]
            auction = side["a"]
            for price, when, bidder in bids:
                best = side["win"]
                if auction["dateTime"] <= when <= auction["expires"] and (
                        best is None or price > best[0] or (price == best[0] and when < best[1])):
                    side["win"] = [price, when, bidder]
        if side["win"] != old:
            price, when, bidder = side["win"]
            rows.append({**side["a"], "bidder": bidder, "price": price, "bidDateTime": when})
        elif not dirty:
            continue
        changed.append(key)
        documents.append(json.dumps(side))
    context.put_states(changed, documents)
    return rows or None
