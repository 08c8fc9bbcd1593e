"""Nexmark q9, winning bids: each auction with its highest bid placed while it was open (the earliest of
equal highest bids).

    SELECT * FROM (SELECT A.*, B.*, ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC,
        B.dateTime ASC) AS rownum FROM auction A, bid B
        WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires) WHERE rownum <= 1

Input: the combined stream (``events/``), no key field: the join key (an auction's ``id``, a bid's
``auction``) is taken from each event here, so no re-keying step writes the events again. State per
auction, under its id: the auction once seen, its winning bid so far, and bids that arrived before it.
Output: the auction with its winning bid, each time the winner changes (an updating result: the last record
per auction wins).
"""

import json

AUCTION_FIELDS = ("id", "itemName", "initialBid", "reserve", "dateTime", "expires", "seller", "category")


def process(event, context):
    if event["event_type"] == 1:
        auction = event["auction"]
        key, bid = str(auction["id"]), None
    elif event["event_type"] == 2:
        record = event["bid"]
        key, bid = str(record["auction"]), [record["price"], record["dateTime"], record["bidder"]]
    else:  # a person: not in this join
        return None
    raw = context.get_state(key)
    side = json.loads(raw) if raw else {"a": None, "win": None, "pend": []}
    if bid is None:
        side["a"] = {f: auction[f] for f in AUCTION_FIELDS}
        bids, side["pend"] = side["pend"], []
    elif side["a"] is None:  # the auction is not known yet: keep the bid until it arrives
        side["pend"].append(bid)
        context.put_state(key, json.dumps(side).encode())
        return None
    else:
        bids = [bid]
    auction, old = side["a"], side["win"]
    for price, when, bidder in bids:
        best = side["win"]
        if auction["dateTime"] <= when <= auction["expires"] and (
                best is None or price > best[0] or (price == best[0] and when < best[1])):
            side["win"] = [price, when, bidder]
    if side["win"] == old and bid is not None:
        return None
    context.put_state(key, json.dumps(side).encode())
    if side["win"] is None:
        return None
    price, when, bidder = side["win"]
    return {**auction, "bidder": bidder, "price": price, "bidDateTime": when}
