"""Nexmark q3, vectorized: sellers in Oregon, Idaho or California and their auctions in category 10.

The same function as ``q3.py`` (input the combined stream, no key field; the same typed state under each
person's id): the batch's persons and category-10 auctions taken out in Arrow and grouped by person in their
order, every person's ``person`` read at once (``get_many``) and the new ones written at once (``update_many``),
the auctions of sellers not seen yet appended to their ``waiting`` lists.
"""

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

STATES = {"OR", "ID", "CA"}


class Person(msgspec.Struct):
    name: str
    city: str
    state: str


def process_batch(events, context):
    kind = events["event_type"]
    people = auctions = None
    if "person" in events.column_names:
        chosen = events["person"].filter(pc.equal(kind, 0)).combine_chunks()
        people = pa.Table.from_struct_array(chosen) if len(chosen) else None
    if "auction" in events.column_names:
        mask = pc.and_(pc.equal(kind, 1), pc.equal(pc.struct_field(events["auction"], "category"), 10))
        chosen = events["auction"].filter(mask).combine_chunks()
        auctions = pa.Table.from_struct_array(chosen) if len(chosen) else None
        kind = kind.filter(pc.or_kleene(pc.not_equal(kind, 1), mask))  # the event types of what is kept, in order
    persons = iter(zip(*(people[f].to_pylist() for f in ("id", "name", "city", "state")))) if people else iter(())
    sold = iter(zip(auctions["seller"].to_pylist(), auctions["id"].to_pylist())) if auctions else iter(())
    per_person = {}
    for k in kind.to_pylist():
        if k == 0:
            id_, name, city, state = next(persons)
            per_person.setdefault(str(id_), []).append(Person(name, city, state))
        elif k == 1:
            seller, id_ = next(sold)
            per_person.setdefault(str(seller), []).append(id_)
    keys = list(per_person)
    known = context.value_state("person", Person)
    new_keys, new_people, rows = [], [], []
    for key, person in zip(keys, known.get_many(keys)):
        waiting = []
        for item in per_person[key]:
            if item.__class__ is Person:  # the person: the auctions that came before them are matched now
                person = item
                new_keys.append(key)
                new_people.append(item)
                stored = context.list_state("waiting", int).of(key)
                waiting = stored.get() + waiting
                stored.clear()
                if person.state in STATES:
                    rows.extend({"name": person.name, "city": person.city, "state": person.state, "id": a}
                                for a in waiting)
                waiting = []
            elif person is None:  # the seller is not known yet: keep the auction until they arrive
                waiting.append(item)
            elif person.state in STATES:
                rows.append({"name": person.name, "city": person.city, "state": person.state, "id": item})
        if waiting:
            context.list_state("waiting", int).of(key).extend(waiting)
    known.update_many(new_keys, new_people)
    return rows or None
