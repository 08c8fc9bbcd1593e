"""Nexmark q9, vectorized: each auction with its highest bid placed while it was open (the earliest of equal
highest bids).

The same function as ``q9.py`` (input the combined stream, no key field; the same state per auction): the
batch's auctions and bids taken out in Arrow and grouped by auction in their order, each auction's state
read and written once (``get_states``, ``put_states``), and an auction's row output once per batch when its
winner changed in it.
"""

import json

import pyarrow as pa
import pyarrow.compute as pc

AUCTION_FIELDS = ("id", "itemName", "initialBid", "reserve", "dateTime", "expires", "seller", "category")


def rows_of(events, kind, index, fields):
    """The events of one kind as lists of ``fields`` (columns), in order."""
    if kind not in events.column_names:
        return [[] for _ in fields]
    chosen = events[kind].filter(pc.equal(events["event_type"], index)).combine_chunks()
    flat = pa.Table.from_struct_array(chosen) if len(chosen) else None
    return [flat[f].to_pylist() if flat is not None else [] for f in fields]


def process_batch(events, context):
    auctions = iter(zip(*rows_of(events, "auction", 1, AUCTION_FIELDS)))
    bids = iter(zip(*rows_of(events, "bid", 2, ("auction", "price", "dateTime", "bidder"))))
    per_auction = {}
    for kind in events["event_type"].to_pylist():
        if kind == 1:
            auction = dict(zip(AUCTION_FIELDS, next(auctions)))
            per_auction.setdefault(str(auction["id"]), []).append(auction)
        elif kind == 2:
            key, price, when, bidder = next(bids)
            per_auction.setdefault(str(key), []).append((price, when, bidder))
    keys = list(per_auction)
    changed, documents, rows = [], [], []
    for key, raw in zip(keys, context.get_states(keys)):
        side = json.loads(raw) if raw else {"a": None, "win": None, "pend": []}
        old, dirty = side["win"], False
        for item in per_auction[key]:
            if item.__class__ is dict:  # the auction: its waiting bids are judged now
                side["a"], bids_now, side["pend"], dirty = item, side["pend"], [], True
            elif side["a"] is None:  # the auction is not known yet: keep the bid until it arrives
                side["pend"].append(list(item))
                dirty = True
                continue
            else:
                bids_now = [item]
            auction = side["a"]
            for price, when, bidder in bids_now:
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
