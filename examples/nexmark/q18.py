"""Nexmark q18, find last bid: each bidder's latest bid on each auction.

    SELECT auction, bidder, price, channel, url, dateTime, extra FROM (SELECT *, ROW_NUMBER() OVER
        (PARTITION BY bidder, auction ORDER BY dateTime DESC) AS rank_number FROM bid) WHERE rank_number <= 1

Input: ``bid/``, no key field. State per (bidder, auction) pair, under the key ``bidder-auction``: the time
of its latest bid. Output: a bid each time it becomes the pair's latest (an updating result: the last
record per pair is its latest bid; of bids at the same time, the later one).
"""


def process(bid, context):
    key = f"{bid['bidder']}-{bid['auction']}"
    latest = context.get_state(key)
    if latest is not None and int(latest) > bid["dateTime"]:
        return None
    context.put_state(key, str(bid["dateTime"]))
    return {f: bid[f] for f in ("auction", "bidder", "price", "channel", "url", "dateTime", "extra")}
