"""Per-user page views per minute of event time (a windowed function, Pulsar's windowConfig in Python).

    statekeep functions localrun --name views --py examples/windows/per_minute.py \
        --inputs examples/windows/input --key-field user --window-length-duration-ms 60000 \
        --max-lag-ms 5000 --user-config '{"eventTimeField": "ts"}' --output ./out-views --once --data-dir ./data

``process`` is called once per (user, minute), when the watermark (the largest event time seen minus
5 s) passes the minute's end, with that minute's records; what it returns is the window's output.
"""


def process(records, context):
    window = context.get_window()
    pages = sorted({r["page"] for r in records})
    return {"user": window.key, "minute": window.start, "views": len(records), "pages": pages}
