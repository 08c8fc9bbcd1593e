"""Nexmark q4, step 1 of 2: each auction's highest valid bid (one placed while the auction was open).

    SELECT MAX(B.price) AS final, A.category FROM auction A, bid B
    WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires GROUP BY A.id, A.category

Input: ``rekey.py``'s output with ``{"auction": ["id"], "bid": ["auction"]}``, keyed by ``k`` (the auction).
State per auction: its open/close times and category once seen, its highest valid bid so far, and the bids
that arrived before it. Output: each change of an auction's maximum, as the retraction and the new value
(``old`` null the first time), which ``q4_avg.py`` folds into the average per category.
"""

import json


def process(record, context):
    key = record["k"]
    raw = context.get_state(key)
    side = json.loads(raw) if raw else {"a": None, "max": None, "pend": []}
    if record["kind"] == "auction":
        side["a"] = [record["dateTime"], record["expires"], record["category"]]
        bids, side["pend"] = side["pend"], []
    elif side["a"] is None:  # the auction is not known yet: keep the bid until it arrives
        side["pend"].append([record["price"], record["dateTime"]])
        context.put_state(key, json.dumps(side).encode())
        return None
    else:
        bids = [[record["price"], record["dateTime"]]]
    opened, expires, category = side["a"]
    old = side["max"]
    for price, when in bids:
        if opened <= when <= expires and (side["max"] is None or price > side["max"]):
            side["max"] = price
    context.put_state(key, json.dumps(side).encode())
    if side["max"] == old:
        return None
    return {"auction": int(key), "category": category, "old": old, "new": side["max"]}
