"""Nexmark q13, bounded side input join: each bid with the side input's value for ``auction mod 10000``.

    SELECT B.auction, B.bidder, B.price, B.dateTime, S.value
    FROM bid B JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S ON mod(B.auction, 10000) = S.key

The side input is a CSV file of ``key,value`` lines named by ``userConfig.sideInput``, read once per
Python worker.
"""

_side = {}


def side_input(context):
    if not _side:
        with open(context.get_user_config_value("sideInput"), encoding="utf-8") as lines:
            for line in lines:
                key, value = line.rstrip("\n").split(",", 1)
                _side[int(key)] = value
    return _side


def process(bid, context):
    value = side_input(context).get(bid["auction"] % 10000)
    if value is None:
        return None
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": bid["price"],
            "dateTime": bid["dateTime"], "value": value}
