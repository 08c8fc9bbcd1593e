"""Nexmark q0, vectorized: the partition's bids projected in Arrow."""


def process_batch(bids, context):
    return bids.select(["auction", "bidder", "price", "dateTime", "extra"])
