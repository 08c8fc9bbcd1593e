"""Nexmark q7 through ``windowConfig``: per tumbling 10 s window, the bids at the window's highest price.

    SELECT B.auction, B.price, B.bidder, B.dateTime FROM bid B JOIN (
        SELECT MAX(price) AS maxprice, window_end FROM TUMBLE(bid, dateTime, 10 s) GROUP BY window) B1
    ON B.price = B1.maxprice AND B.dateTime in the window

Run without a key field (every bid is in one window per 10 s), with ``windowConfig``
``{"windowLengthDurationMs": 10000}`` and ``--user-config '{"eventTimeField": "dateTime"}'``. The aggregate
form: a window keeps its highest price and the bids at it (``[price, [[auction, bidder, dateTime], ...]]``),
not its bids, and ``process`` outputs it once the watermark passes the window's end. The same output as
``q7.py`` (its timer version).
"""


def create_accumulator():
    return [-1, []]


def add_to_accumulator(top, bid):
    price = bid["price"]
    if price < top[0]:
        return top
    at = [bid["auction"], bid["bidder"], bid["dateTime"]]
    return [price, [at]] if price > top[0] else [price, top[1] + [at]]


def get_result(top):
    return top


def process(top, context):
    window = context.get_window()
    return {"start": window.start, "end": window.end, "price": top[0], "bids": top[1]}
