"""Nexmark q0, pass-through: every bid, its fields as they are (measures the cost of moving records).

    SELECT auction, bidder, price, dateTime, extra FROM bid
"""


def process(bid, context):
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": bid["price"],
            "dateTime": bid["dateTime"], "extra": bid["extra"]}
