"""Timers and TTL: alert when a user has sent nothing for five minutes of event time; keep each user's
last page for a day only (``--state-ttl 86400``).

    statekeep functions localrun --name idle --py examples/windows/idle_alert.py \
        --inputs examples/windows/input --key-field user --user-config '{"eventTimeField": "ts"}' \
        --state-ttl 86400 --output ./out-idle --once --data-dir ./data
    statekeep functions timers --name idle --data-dir ./data      # the timers still pending
"""

IDLE_MS = 5 * 60 * 1000


def process(record, context):
    deadline = record["ts"] + IDLE_MS
    for timestamp, domain in context.list_timers():  # one pending alert per user: move it later
        if domain == "event" and timestamp < deadline:
            context.delete_timer(timestamp)
    context.register_timer(deadline)  # fires when the watermark reaches it
    context.put_state(record["user"], record["page"])  # expires a day after this write


def on_timer(user, timestamp_ms, context):
    last = context.get_state(user)
    return {"user": user, "idle_since": timestamp_ms - IDLE_MS, "last_page": last.decode() if last else None}
