"""Nexmark q7, highest bid: per tumbling 10 s window, the bids at the window's highest price (a windowed
function without a key: every bid is in one window per 10 s).

    SELECT B.auction, B.price, B.bidder, B.dateTime FROM bid B JOIN (
        SELECT MAX(price) AS maxprice, window_end FROM TUMBLE(bid, dateTime, 10 s) GROUP BY window) B1
    ON B.price = B1.maxprice AND B.dateTime in the window

Run with ``--window-length-duration-ms 10000 --user-config '{"eventTimeField": "dateTime"}'`` and no key field.
"""


def process(bids, context):
    window = context.get_window()
    top = max(b["price"] for b in bids)
    return {"start": window.start, "end": window.end, "price": top,
            "bids": [[b["auction"], b["bidder"], b["dateTime"]] for b in bids if b["price"] == top]}
