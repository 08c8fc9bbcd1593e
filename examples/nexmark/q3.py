"""Nexmark q3, local item suggestion: sellers in Oregon, Idaho or California and their auctions in
category 10, an unbounded inner join of two streams.

    SELECT P.name, P.city, P.state, A.id FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
    WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')

Input: the combined stream (``events/``), no key field: the join key (a person's ``id``, an auction's
``seller``) is taken from each event here, so no re-keying step writes the events again. Typed state under the
person's id (``.of(id)``), whichever side arrives first: ``person`` (what the output needs, once the person is
known) and ``waiting``, the category-10 auctions that arrived before their seller (a list, appended without
reading it). Output: a seller's waiting auctions as one JSON array record when the seller arrives, then each
of their category-10 auctions as it arrives.
"""

import msgspec

STATES = {"OR", "ID", "CA"}


class Person(msgspec.Struct):
    name: str
    city: str
    state: str


def process(event, context):
    kind = event["event_type"]
    if kind == 1:
        auction = event["auction"]
        if auction["category"] != 10:
            return None
        key = str(auction["seller"])
        person = context.value_state("person", Person).of(key).get()
        if person is None:  # the seller is not known yet: keep the auction until they arrive
            context.list_state("waiting", int).of(key).append(auction["id"])
            return None
        if person.state not in STATES:
            return None
        return {"name": person.name, "city": person.city, "state": person.state, "id": auction["id"]}
    if kind == 0:
        record = event["person"]
        key, person = str(record["id"]), Person(record["name"], record["city"], record["state"])
        context.value_state("person", Person).of(key).update(person)
        waiting = context.list_state("waiting", int).of(key)
        ids = waiting.get()
        if not ids:
            return None
        waiting.clear()
        if person.state not in STATES:
            return None
        return [{"name": person.name, "city": person.city, "state": person.state, "id": a} for a in ids]
    return None  # a bid: not in this join
