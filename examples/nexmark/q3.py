"""Nexmark q3, local item suggestion: sellers in Oregon, Idaho or California and their auctions in
category 10, an unbounded inner join of two streams.

    SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
    WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')

Input: ``rekey.py``'s output with ``{"person": ["id"], "auction": ["seller"]}``, keyed by ``k`` (the person).
Both sides are kept in state under the join key, whichever arrives first: the person once known (only
what the output needs, or ``false`` if no auction of theirs can match), and the category-10 auctions
waiting for a seller not seen yet.
"""

import json

STATES = {"OR", "ID", "CA"}


def process(record, context):
    key = record["k"]
    raw = context.get_state(key)
    side = json.loads(raw) if raw else {"p": None, "a": []}
    if record["kind"] == "person":
        person = [record["name"], record["city"], record["state"]] if record["state"] in STATES else False
        out = [{"name": person[0], "city": person[1], "state": person[2], "id": a} for a in side["a"]] if person else []
        context.put_state(key, json.dumps({"p": person, "a": []}).encode())
        return out or None
    if record["category"] != 10 or side["p"] is False:
        return None
    if side["p"] is None:  # the seller is not known yet: keep the auction until they arrive
        side["a"].append(record["id"])
        context.put_state(key, json.dumps(side).encode())
        return None
    name, city, state = side["p"]
    return {"name": name, "city": city, "state": state, "id": record["id"]}
