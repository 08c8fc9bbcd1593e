"""Nexmark q17, auction statistics per day: per (auction, day) bids per price rank and min/max/avg/sum price.

    SELECT auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS day, count(*) AS total_bids,
        count(*) FILTER (WHERE price < 10000) AS rank1_bids, ..., min(price) AS min_price,
        max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
    FROM bid GROUP BY auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd')

Keyed by ``auction``; state per auction: its statistics per day. ``avg_price`` is integer division, as
Flink's AVG of a BIGINT. Output: the (auction, day) row after each bid (an updating result).
"""

import datetime
import json


def process(bid, context):
    key = str(bid["auction"])
    day = datetime.datetime.fromtimestamp(bid["dateTime"] / 1000, datetime.timezone.utc).strftime("%Y-%m-%d")
    raw = context.get_state(key)
    days = json.loads(raw) if raw else {}
    price = bid["price"]
    total, r1, r2, r3, low, high, amount = days.get(day) or (0, 0, 0, 0, price, price, 0)
    stats = [total + 1, r1 + (price < 10_000), r2 + (10_000 <= price < 1_000_000), r3 + (price >= 1_000_000),
             min(low, price), max(high, price), amount + price]
    days[day] = stats
    context.put_state(key, json.dumps(days).encode())
    return {"auction": bid["auction"], "day": day, "total_bids": stats[0], "rank1_bids": stats[1],
            "rank2_bids": stats[2], "rank3_bids": stats[3], "min_price": stats[4], "max_price": stats[5],
            "avg_price": stats[6] // stats[0], "sum_price": stats[6]}
