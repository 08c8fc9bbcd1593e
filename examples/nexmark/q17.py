"""Nexmark q17, auction statistics per day: per (auction, day) bids per price rank and min/max/avg/sum price.

    SELECT auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS day, count(*) AS total_bids,
        count(*) FILTER (WHERE price < 10000) AS rank1_bids, ..., min(price) AS min_price,
        max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
    FROM bid GROUP BY auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd')

Keyed by ``auction``; typed state of the auction: ``days``, a map from a day to its statistics
(``[total, rank1, rank2, rank3, min, max, sum]``), so a bid reads and writes its day's entry only. ``avg_price``
is integer division, as Flink's AVG of a BIGINT. Output: the (auction, day) row after each bid (an updating
result).
"""

import datetime

DAY_MS = 86_400_000
DAYS = {}  # a day's number since the epoch -> its name (UTC)


def process(bid, context):
    number = bid["dateTime"] // DAY_MS
    day = DAYS.get(number)
    if day is None:
        day = DAYS[number] = (datetime.date(1970, 1, 1) + datetime.timedelta(days=number)).isoformat()
    days = context.map_state("days", str, list[int])
    price = bid["price"]
    stats = days.get(day)
    if stats is None:
        stats = [0, 0, 0, 0, price, price, 0]
    stats[0] += 1
    stats[1 if price < 10_000 else 2 if price < 1_000_000 else 3] += 1
    if price < stats[4]:
        stats[4] = price
    if price > stats[5]:
        stats[5] = price
    stats[6] += price
    days.put(day, stats)
    return {"auction": bid["auction"], "day": day, "total_bids": stats[0], "rank1_bids": stats[1],
            "rank2_bids": stats[2], "rank3_bids": stats[3], "min_price": stats[4], "max_price": stats[5],
            "avg_price": stats[6] // stats[0], "sum_price": stats[6]}
