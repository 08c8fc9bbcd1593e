"""Nexmark q15, vectorized: bidding statistics per day, overall and per price rank.

The same function as ``q15.py`` (the same counters): the batch's bids counted per (day, rank) and its
distinct (day, rank, bidder) and (day, rank, auction) found in Arrow; one ``get_counters`` per set says
which members are new to it, and one ``incr_counters`` adds the bids, the sets' new members and marks those.
Output: each day's row once per batch, after the batch's bids.
"""

import datetime

import pyarrow as pa
import pyarrow.compute as pc

RANKS = ("total", "rank1", "rank2", "rank3")
DAY_MS = 86_400_000


def _day(number):
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=number)).isoformat()


def process_batch(bids, context):
    price = bids["price"]
    rank = pc.if_else(pc.less(price, 10_000), "rank1", pc.if_else(pc.less(price, 1_000_000), "rank2", "rank3"))
    number = pc.divide(bids["dateTime"], DAY_MS)  # the UTC day, as whole days since the epoch
    days = {n: _day(n) for n in pc.unique(number).to_pylist()}
    day = pc.take(pa.array(list(days.values()), pa.string()),
                  pc.index_in(number, value_set=pa.array(list(days), pa.int64())))
    both = pa.table({"day": pa.chunked_array([day, day]), "rank": pa.chunked_array(
        [pa.chunked_array([pa.array(["total"] * len(bids), pa.string())]), rank]),
        "bidder": pa.chunked_array([bids["bidder"], bids["bidder"]]),
        "auction": pa.chunked_array([bids["auction"], bids["auction"]])})
    prefix = pc.binary_join_element_wise(both["day"], both["rank"], "/")
    counts = pa.table({"prefix": prefix}).group_by("prefix").aggregate([([], "count_all")])
    keys, amounts = [], []
    for p, n in zip(counts["prefix"].to_pylist(), counts["count_all"].to_pylist()):
        keys.append(f"{p}_bids")
        amounts.append(n)
    for what in ("bidder", "auction"):
        members = pa.table({"prefix": prefix, "member": pc.cast(both[what], pa.string())}).group_by(
            ["prefix", "member"]).aggregate([([], "count_all")])
        names = pc.binary_join_element_wise(members["prefix"], f"_{what}/", members["member"], "")
        fresh = pc.equal(pa.array(context.get_counters(names), pa.int64()), 0)  # new to its set
        new_sets = pa.table({"prefix": members["prefix"].filter(fresh)}).group_by("prefix").aggregate(
            [([], "count_all")])
        keys.extend(f"{p}_{what}s" for p in new_sets["prefix"].to_pylist())
        amounts.extend(new_sets["count_all"].to_pylist())
        joined = names.filter(fresh).to_pylist()  # marked once: a member already in its set is not written
        keys.extend(joined)
        amounts.extend([1] * len(joined))
    context.incr_counters(keys, amounts)
    rows = []
    for name in days.values():
        names = [f"{name}/{r}_{w}" for r in RANKS for w in ("bids", "bidders", "auctions")]
        rows.append({"day": name, **dict(zip((n.split("/", 1)[1] for n in names), context.get_counters(names)))})
    return rows
