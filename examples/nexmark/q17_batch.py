"""Nexmark q17, vectorized: auction statistics per day, per (auction, day).

The same function as ``q17.py`` (keyed by ``auction``, the same typed state: each auction's ``days`` map): the
batch's statistics per (auction, day) by one Arrow group-by, each merged into its auction's entry for the day
(``.of(auction)``: one entry read and written per (auction, day) of the batch); each (auction, day) row output
once per batch.
"""

import datetime

import pyarrow as pa
import pyarrow.compute as pc

DAY_MS = 86_400_000


def _day(number):
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=number)).isoformat()


def process_batch(bids, context):
    price = bids["price"]
    stats = pa.table({"auction": bids["auction"], "day": pc.divide(bids["dateTime"], DAY_MS), "price": price,
                      "r1": pc.cast(pc.less(price, 10_000), pa.int64()),
                      "r2": pc.cast(pc.and_(pc.greater_equal(price, 10_000), pc.less(price, 1_000_000)), pa.int64()),
                      "r3": pc.cast(pc.greater_equal(price, 1_000_000), pa.int64())})
    grouped = stats.group_by(["auction", "day"]).aggregate(
        [([], "count_all"), ("r1", "sum"), ("r2", "sum"), ("r3", "sum"), ("price", "min"), ("price", "max"),
         ("price", "sum")]).to_pydict()
    days = context.map_state("days", str, list[int])
    names = {n: _day(n) for n in set(grouped["day"])}
    rows = []
    for auction, number, total, r1, r2, r3, low, high, amount in zip(*(grouped[c] for c in (
            "auction", "day", "count_all", "r1_sum", "r2_sum", "r3_sum", "price_min", "price_max", "price_sum"))):
        day, entries = names[number], days.of(str(auction))
        old = entries.get(day)
        s = [total, r1, r2, r3, low, high, amount] if old is None else [
            old[0] + total, old[1] + r1, old[2] + r2, old[3] + r3, min(old[4], low), max(old[5], high), old[6] + amount]
        entries.put(day, s)
        rows.append({"auction": auction, "day": day, "total_bids": s[0], "rank1_bids": s[1], "rank2_bids": s[2],
                     "rank3_bids": s[3], "min_price": s[4], "max_price": s[5], "avg_price": s[6] // s[0],
                     "sum_price": s[6]})
    return rows
