"""Nexmark q15, bidding statistics per day: bids, distinct bidders and distinct auctions, overall and per
price rank (below 10,000; 10,000 to 1,000,000; 1,000,000 and up).

    SELECT DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS day, count(*) AS total_bids,
        count(*) FILTER (WHERE price < 10000) AS rank1_bids, ..., count(distinct bidder) AS total_bidders,
        count(distinct bidder) FILTER (WHERE price < 10000) AS rank1_bidders, ..., count(distinct auction) ...
    FROM bid GROUP BY DATE_FORMAT(dateTime, 'yyyy-MM-dd')

Run without a key field (one task owns the state). Counters per day count bids; a counter per (day, set,
member), 1 once the member is in the set, says whether a bidder or auction is new to that set. Output: the
day's row after each bid (an updating result).
"""

import datetime

RANKS = ("total", "rank1", "rank2", "rank3")


def rank_of(price):
    return "rank1" if price < 10_000 else "rank2" if price < 1_000_000 else "rank3"


def process(bid, context):
    day = datetime.datetime.fromtimestamp(bid["dateTime"] / 1000, datetime.timezone.utc).strftime("%Y-%m-%d")
    row = {"day": day}
    for rank in ("total", rank_of(bid["price"])):
        context.incr_counter(f"{day}/{rank}_bids", 1)
        for what in ("bidder", "auction"):
            member = f"{day}/{rank}_{what}/{bid[what]}"
            if context.get_counter(member) == 0:  # new to the set: mark it (written once, not per bid)
                context.incr_counter(member, 1)
                context.incr_counter(f"{day}/{rank}_{what}s", 1)
    for rank in RANKS:
        for what in ("bids", "bidders", "auctions"):
            row[f"{rank}_{what}"] = context.get_counter(f"{day}/{rank}_{what}")
    return row
