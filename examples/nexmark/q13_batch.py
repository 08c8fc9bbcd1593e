"""Nexmark q13, vectorized: the side input (``userConfig.sideInput``, ``key,value`` lines) as an Arrow array
indexed by key, looked up with ``take``; bids whose key has no value are dropped."""

import pyarrow as pa
import pyarrow.compute as pc

_values = []


def side_values(context):
    if not _values:
        side = {}
        with open(context.get_user_config_value("sideInput"), encoding="utf-8") as lines:
            for line in lines:
                key, value = line.rstrip("\n").split(",", 1)
                side[int(key)] = value
        _values.append(pa.array([side.get(k) for k in range(10000)], pa.string()))
    return _values[0]


def process_batch(bids, context):
    keys = pa.array(bids["auction"].to_numpy() % 10000)
    joined = bids.select(["auction", "bidder", "price", "dateTime"]).append_column(
        "value", pc.take(side_values(context), keys))
    return joined.filter(pc.is_valid(joined["value"]))
