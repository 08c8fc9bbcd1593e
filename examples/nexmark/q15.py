"""Nexmark q15, bidding statistics per day: bids, distinct bidders and distinct auctions, overall and per
price rank (below 10,000; 10,000 to 1,000,000; 1,000,000 and up).

    SELECT DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS day, count(*) AS total_bids,
        count(*) FILTER (WHERE price < 10000) AS rank1_bids, ..., count(distinct bidder) AS total_bidders,
        count(distinct bidder) FILTER (WHERE price < 10000) AS rank1_bidders, ..., count(distinct auction) ...
    FROM bid GROUP BY DATE_FORMAT(dateTime, 'yyyy-MM-dd')

Run without a key field (one task owns the state); typed state under the day's key (``.of(day)``): ``counts``,
the day's twelve counts (bids, bidders, auctions, each overall and per rank), and two maps, ``bidders`` and
``auctions``, of the day's distinct members, each to the sets it is in (bit 0: overall, bit r: rank r), so a
bid reads its bidder's and auction's entries only, never the whole set. Output: the day's row after each bid
(an updating result).
"""

import datetime

DAY_MS = 86_400_000
DAYS = {}  # a day's number since the epoch -> its name (UTC)
NAMES = [f"{rank}_{what}" for what in ("bids", "bidders", "auctions") for rank in ("total", "rank1", "rank2", "rank3")]


def process(bid, context):
    number = bid["dateTime"] // DAY_MS
    day = DAYS.get(number)
    if day is None:
        day = DAYS[number] = (datetime.date(1970, 1, 1) + datetime.timedelta(days=number)).isoformat()
    price = bid["price"]
    rank = 1 if price < 10_000 else 2 if price < 1_000_000 else 3
    sets = 1 | 1 << rank  # overall and the rank's
    counts = context.value_state("counts", list[int]).of(day)
    stats = counts.get() or [0] * 12
    stats[0] += 1
    stats[rank] += 1
    for base, name, member in ((4, "bidders", bid["bidder"]), (8, "auctions", bid["auction"])):
        members = context.map_state(name, int, int).of(day)
        seen = members.get(member, 0)
        new = sets & ~seen
        if new:  # new to the day's set or its rank's: the member's entry is written, the others untouched
            members.put(member, seen | new)
            if new & 1:
                stats[base] += 1
            if new & 1 << rank:
                stats[base + rank] += 1
    counts.update(stats)
    return {"day": day, **dict(zip(NAMES, stats))}
