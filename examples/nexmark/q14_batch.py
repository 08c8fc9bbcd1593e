"""Nexmark q14, vectorized in Arrow and numpy."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def process_batch(bids, context):
    price = bids["price"].to_numpy() * 0.908
    keep = (price > 1_000_000) & (price < 50_000_000)
    bids, price = bids.filter(pa.array(keep)), price[keep]
    hour = bids["dateTime"].to_numpy() // 3_600_000 % 24
    kind = np.where((hour >= 8) & (hour <= 18), "dayTime",
                    np.where((hour <= 6) | (hour >= 20), "nightTime", "otherTime"))
    return pa.table({"auction": bids["auction"], "bidder": bids["bidder"], "price": pa.array(price),
                     "bidTimeType": pa.array(kind.astype(object), pa.string()), "dateTime": bids["dateTime"],
                     "extra": bids["extra"], "c_counts": pc.count_substring(bids["extra"], "c")})
