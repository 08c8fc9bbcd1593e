"""Nexmark q8, vectorized: people who opened an auction within the same tumbling 10 s window in which they
registered.

The same function as ``q8.py`` (input ``rekey_batch.py``'s or ``rekey.py``'s output keyed by ``k``, with
``--user-config '{"eventTimeField": "dateTime"}'``; the same state, timers and ``on_timer``): the batch's
records grouped by person, each person's state read and written once (``get_states``, ``put_states``), a
timer at the end of each window new to a person.
"""

import json

SIZE = 10_000


def process_batch(records, context):
    per_person = {}
    for key, kind, when, name in zip(*(records[c].to_pylist() for c in ("k", "kind", "dateTime", "name"))):
        per_person.setdefault(key, []).append((str(when - when % SIZE), name if kind == "person" else None))
    keys = list(per_person)
    documents = []
    for key, raw in zip(keys, context.get_states(keys)):
        windows = json.loads(raw) if raw else {}
        for start, name in per_person[key]:
            window = windows.get(start)
            if window is None:
                window = windows[start] = [None, False]
                context.register_timer(int(start) + SIZE, key=key)
            if name is None:
                window[1] = True
            else:
                window[0] = name
        documents.append(json.dumps(windows))
    context.put_states(keys, documents)


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
