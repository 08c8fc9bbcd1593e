"""Nexmark q18, find last bid: each bidder's latest bid on each auction.

    SELECT auction, bidder, price, channel, url, dateTime, extra FROM (SELECT *, ROW_NUMBER() OVER
        (PARTITION BY bidder, auction ORDER BY dateTime DESC) AS rank_number FROM bid) WHERE rank_number <= 1

Input: ``bid/``, no key field (one task owns the state). Typed state under the pair's key ``bidder-auction``
(``.of(pair)``): ``latest``, the time of the pair's latest bid. Output: a bid each time it becomes the pair's
latest (an updating result: the last record per pair is its latest bid; of bids at the same time, the later
one). Keyed by ``bidder`` instead, with a map of the bidder's auctions to their latest times (``map_state``: a
bid reads its auction's entry only), it gave the same result more slowly: a keyed function's records are
partitioned by key before the function, and the map's entries are read one by one, where a value's are read in
bulk (``get_many``) by ``q18_batch.py``.
"""

FIELDS = ("auction", "bidder", "price", "channel", "url", "dateTime", "extra")


def process(bid, context):
    latest = context.value_state("latest", int).of(f"{bid['bidder']}-{bid['auction']}")
    when = bid["dateTime"]
    if latest.get(when) > when:
        return None
    latest.update(when)
    return {f: bid[f] for f in FIELDS}
