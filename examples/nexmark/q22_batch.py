"""Nexmark q22, vectorized: the URL split in Arrow."""

import pyarrow.compute as pc


def process_batch(bids, context):
    parts = pc.split_pattern(bids["url"], "/")
    out = bids.select(["auction", "bidder", "price", "channel"])
    for name, index in (("dir1", 3), ("dir2", 4), ("dir3", 5)):
        out = out.append_column(name, pc.list_element(parts, index))
    return out
