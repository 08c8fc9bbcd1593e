"""Nexmark q21, vectorized: the regular expression and the hot-channel lookup in Arrow."""

import pyarrow as pa
import pyarrow.compute as pc

HOT = ["apple", "google", "facebook", "baidu"]


def process_batch(bids, context):
    lower = pc.utf8_lower(bids["channel"])
    hot = pc.index_in(lower, value_set=pa.array(HOT))  # 0..3, or null
    found = pc.extract_regex(bids["url"], r"(?:&|^)channel_id=(?P<id>[^&]*)").combine_chunks()
    param = pc.if_else(pc.is_valid(found), found.field("id"), pa.scalar(None, pa.string()))
    channel_id = pc.coalesce(pc.cast(hot, pa.string()), param)
    out = bids.select(["auction", "bidder", "price", "channel"]).append_column("channel_id", channel_id)
    return out.filter(pc.is_valid(out["channel_id"]))
