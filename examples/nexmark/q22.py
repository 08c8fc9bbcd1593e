"""Nexmark q22, get URL directories: the first three path segments of each bid's URL.

    SELECT auction, bidder, price, channel, SPLIT_INDEX(url, '/', 3) AS dir1, SPLIT_INDEX(url, '/', 4) AS dir2,
        SPLIT_INDEX(url, '/', 5) AS dir3 FROM bid
"""


def process(bid, context):
    parts = bid["url"].split("/")
    dirs = [parts[i] if i < len(parts) else None for i in (3, 4, 5)]
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": bid["price"], "channel": bid["channel"],
            "dir1": dirs[0], "dir2": dirs[1], "dir3": dirs[2]}
