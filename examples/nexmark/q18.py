"""Nexmark q18, find last bid: each bidder's latest bid on each auction.

    SELECT auction, bidder, price, channel, url, dateTime, extra FROM (SELECT *, ROW_NUMBER() OVER
        (PARTITION BY bidder, auction ORDER BY dateTime DESC) AS rank_number FROM bid) WHERE rank_number <= 1

Keyed by ``bidder``; typed state of the bidder: ``latest``, a map from an auction to the time of the bidder's
latest bid on it, so a bid reads and writes its auction's entry only (not the bidder's other auctions), and the
pairs need no composite key or re-keying step. Output: a bid each time it becomes the pair's latest (an
updating result: the last record per pair is its latest bid; of bids at the same time, the later one).
"""

FIELDS = ("auction", "bidder", "price", "channel", "url", "dateTime", "extra")


def process(bid, context):
    latest = context.map_state("latest", int, int)
    auction, when = bid["auction"], bid["dateTime"]
    if latest.get(auction, when) > when:
        return None
    latest.put(auction, when)
    return {f: bid[f] for f in FIELDS}
