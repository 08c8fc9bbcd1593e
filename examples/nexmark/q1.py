"""Nexmark q1, currency conversion: each bid's price in euros.

    SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid
"""


def process(bid, context):
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": 0.908 * bid["price"],
            "dateTime": bid["dateTime"], "extra": bid["extra"]}
