"""Nexmark q15, vectorized: bidding statistics per day, overall and per price rank.

The same function as ``q15.py`` (the same typed state under each day's key: its ``counts`` and its ``bidders``
and ``auctions`` maps): the batch's bids counted per (day, rank) and each distinct (day, bidder) and (day,
auction) with the sets the batch puts it in found in Arrow; each member's map entry is read once and written
only if the batch adds it to a set, and each day's counts are read and written once (``get_many``,
``update_many``). Output: each day's row once per batch, after the batch's bids.
"""

import datetime

import pyarrow as pa
import pyarrow.compute as pc

NAMES = [f"{rank}_{what}" for what in ("bids", "bidders", "auctions") for rank in ("total", "rank1", "rank2", "rank3")]
DAY_MS = 86_400_000


def _day(number):
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=number)).isoformat()


def process_batch(bids, context):
    price = bids["price"]
    rank = pc.if_else(pc.less(price, 10_000), 1, pc.if_else(pc.less(price, 1_000_000), 2, 3))
    table = pa.table({"day": pc.divide(bids["dateTime"], DAY_MS), "rank": rank, "bidder": bids["bidder"],
                      "auction": bids["auction"], "sets": pc.shift_left(1, rank)})  # the rank's bit
    per_rank = table.group_by(["day", "rank"]).aggregate([([], "count_all")]).to_pydict()
    numbers = sorted(set(per_rank["day"]))
    days = [_day(n) for n in numbers]
    counts = context.value_state("counts", list[int])
    stats = {n: s or [0] * 12 for n, s in zip(numbers, counts.get_many(days))}
    for number, r, n in zip(per_rank["day"], per_rank["rank"], per_rank["count_all"]):
        stats[number][0] += n
        stats[number][r] += n
    for base, name, column in ((4, "bidders", "bidder"), (8, "auctions", "auction")):
        # per (day, member): the sets the batch puts it in (bit 0 always; a rank's bit if one of its bids has it)
        members = table.group_by(["day", column]).aggregate([("sets", "distinct")]).to_pydict()
        maps = {n: context.map_state(name, int, int).of(day) for n, day in zip(numbers, days)}
        for number, member, ranks in zip(members["day"], members[column], members["sets_distinct"]):
            entries, day_stats = maps[number], stats[number]
            seen = entries.get(member, 0)
            new = (1 | sum(ranks)) & ~seen
            if new:
                entries.put(member, seen | new)
                for bit in range(4):
                    if new & 1 << bit:
                        day_stats[base + bit] += 1
    counts.update_many(days, [stats[n] for n in numbers])
    return [{"day": day, **dict(zip(NAMES, stats[n]))} for n, day in zip(numbers, days)]
