"""Nexmark q21, add channel id: the hot channels' ids, else the ``channel_id`` parameter of the URL.

    SELECT auction, bidder, price, channel, CASE WHEN lower(channel) = 'apple' THEN '0'
        WHEN lower(channel) = 'google' THEN '1' WHEN lower(channel) = 'facebook' THEN '2'
        WHEN lower(channel) = 'baidu' THEN '3' ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END
        AS channel_id FROM bid
    WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) is not null or
        lower(channel) in ('apple', 'google', 'facebook', 'baidu')
"""

import re

HOT = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
CHANNEL_ID = re.compile(r"(&|^)channel_id=([^&]*)")


def process(bid, context):
    channel_id = HOT.get(bid["channel"].lower())
    if channel_id is None:
        found = CHANNEL_ID.search(bid["url"])
        if found is None:
            return None
        channel_id = found.group(2)
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": bid["price"], "channel": bid["channel"],
            "channel_id": channel_id}
