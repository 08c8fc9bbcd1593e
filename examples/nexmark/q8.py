"""Nexmark q8, monitor new users: people who opened an auction within the same tumbling 10 s window in which
they registered (a windowed join).

    SELECT P.id, P.name, P.starttime FROM (persons per 10 s window) P
    JOIN (sellers per 10 s window) A ON P.id = A.seller AND P.starttime = A.starttime

Input: ``rekey.py``'s output with ``{"person": ["id"], "auction": ["seller"]}``; run with ``--key-field k
--window-length-duration-ms 10000 --user-config '{"eventTimeField": "dateTime"}'``: each (person, window)
holds that person's registration and auctions of the window, so the join is one look at the window.
"""


def process(records, context):
    people = [r for r in records if r["kind"] == "person"]
    if people and any(r["kind"] == "auction" for r in records):
        return {"id": people[0]["id"], "name": people[0]["name"], "start": context.get_window().start}
    return None
