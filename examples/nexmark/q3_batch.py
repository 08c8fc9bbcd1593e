"""Nexmark q3, vectorized: sellers in Oregon, Idaho or California and their auctions in category 10.

The same function as ``q3.py`` (input ``rekey_batch.py``'s or ``rekey.py``'s output keyed by ``k``, the same
state per person): auctions outside category 10 dropped in Arrow, the rest grouped by person in their order,
each person's state read once (``get_states``) and written once where it changed (``put_states``).
"""

import json

import pyarrow.compute as pc

STATES = {"OR", "ID", "CA"}


def process_batch(records, context):
    is_person = pc.equal(records["kind"], "person")
    if "category" in records.column_names:
        records = records.filter(pc.or_kleene(is_person, pc.equal(records["category"], 10)))
    columns = [records[c].to_pylist() if c in records.column_names else [None] * records.num_rows
               for c in ("k", "kind", "name", "city", "state", "id")]
    per_person = {}
    for key, kind, name, city, state, id_ in zip(*columns):
        per_person.setdefault(key, []).append(
            ([name, city, state] if state in STATES else False) if kind == "person" else id_)
    keys = list(per_person)
    changed, documents, rows = [], [], []
    for key, raw in zip(keys, context.get_states(keys)):
        side = json.loads(raw) if raw else {"p": None, "a": []}
        dirty = False
        for item in per_person[key]:
            if item.__class__ is not int:  # the person (False: none of their auctions can match)
                if item:
                    rows.extend({"name": item[0], "city": item[1], "state": item[2], "id": a} for a in side["a"])
                side, dirty = {"p": item, "a": []}, True
            elif side["p"] is None:  # the seller is not known yet: keep the auction until they arrive
                side["a"].append(item)
                dirty = True
            elif side["p"]:
                name, city, state = side["p"]
                rows.append({"name": name, "city": city, "state": state, "id": item})
        if dirty:
            changed.append(key)
            documents.append(json.dumps(side))
    context.put_states(changed, documents)
    return rows or None
