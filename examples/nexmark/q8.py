"""Nexmark q8, monitor new users: people who opened an auction within the same tumbling 10 s window in which
they registered (a windowed join).

    SELECT P.id, P.name, P.starttime FROM (persons per 10 s window) P
    JOIN (sellers per 10 s window) A ON P.id = A.seller AND P.starttime = A.starttime

Input: ``rekey.py``'s output with ``{"person": ["id"], "auction": ["seller"]}``, keyed by ``k`` (the person),
with ``--user-config '{"eventTimeField": "dateTime"}'``. State per person: per open window, their name if
they registered in it and whether they sold in it; an event-time timer at the window's end emits the match.
"""

import json

SIZE = 10_000


def process(record, context):
    key = record["k"]
    start = record["dateTime"] - record["dateTime"] % SIZE
    raw = context.get_state(key)
    windows = json.loads(raw) if raw else {}
    window = windows.get(str(start))
    if window is None:
        window = windows[str(start)] = [None, False]
        context.register_timer(start + SIZE)
    if record["kind"] == "person":
        window[0] = record["name"]
    else:
        window[1] = True
    context.put_state(key, json.dumps(windows).encode())


def on_timer(key, timestamp_ms, context):
    windows = json.loads(context.get_state(key))
    start = timestamp_ms - SIZE
    name, sold = windows.pop(str(start))
    if windows:
        context.put_state(key, json.dumps(windows).encode())
    else:
        context.del_state(key)
    if name is not None and sold:
        return {"id": int(key), "name": name, "start": start}
    return None
