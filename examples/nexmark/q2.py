"""Nexmark q2, selection: the bids on every 123rd auction.

    SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0
"""


def process(bid, context):
    if bid["auction"] % 123 == 0:
        return {"auction": bid["auction"], "price": bid["price"]}
    return None
