"""Nexmark, step one of the joins q4 and q8: the combined event stream re-keyed.

Reads the combined stream (``{"event_type": 0|1|2, "person": ..., "auction": ..., "bid": ...}``) and
returns each event of a kind named in ``userConfig.keys`` as its flat record plus ``kind`` and ``k``, the
join key: the named fields' values joined by ``-``. The next function runs with ``--key-field k``, so both
sides of a join reach the same task and the same state key. Stateless.

    userConfig: {"keys": {"person": ["id"], "auction": ["seller"]}}       # q8: person.id = auction.seller
"""

KINDS = ("person", "auction", "bid")


def process(event, context):
    kind = KINDS[event["event_type"]]
    fields = context.get_user_config_value("keys").get(kind)
    if not fields:
        return None
    record = event[kind]
    return {"k": "-".join(str(record[f]) for f in fields), "kind": kind, **record}
