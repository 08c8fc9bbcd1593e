"""Nexmark q9, winning bids: each auction with its highest bid placed while it was open (the earliest of
equal highest bids).

    SELECT * FROM (SELECT A.*, B.*, ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC,
        B.dateTime ASC) AS rownum FROM auction A, bid B
        WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires) WHERE rownum <= 1

Input: the combined stream (``events/``), no key field: the join key (an auction's ``id``, a bid's
``auction``) is taken from each event here, so no re-keying step writes the events again. Typed state under
the auction's id (``.of(id)``): ``auction`` (the auction, once seen), ``win`` (its winning bid so far,
``[price, dateTime, bidder]``) and ``early``, the bids that arrived before it (a list, appended without reading
it). Output: the auction with its winning bid, each time the winner changes (an updating result: the last
record per auction wins).
"""

import msgspec


class Auction(msgspec.Struct):
    id: int
    itemName: str  # noqa: N815 - Nexmark's field names
    initialBid: int  # noqa: N815
    reserve: int
    dateTime: int  # noqa: N815
    expires: int
    seller: int
    category: int


FIELDS = Auction.__struct_fields__


def _row(auction, win):
    price, when, bidder = win
    return {**{f: getattr(auction, f) for f in FIELDS}, "bidder": bidder, "price": price, "bidDateTime": when}


def _wins(auction, best, bids):
    """The winner among ``best`` (None: none yet) and ``bids`` placed while ``auction`` was open."""
    for bid in bids:
        price, when = bid[0], bid[1]
        if auction.dateTime <= when <= auction.expires and (
                best is None or price > best[0] or (price == best[0] and when < best[1])):
            best = bid
    return best


def process(event, context):
    kind = event["event_type"]
    if kind == 2:
        record = event["bid"]
        key, bid = str(record["auction"]), [record["price"], record["dateTime"], record["bidder"]]
        auction = context.value_state("auction", Auction).of(key).get()
        if auction is None:  # the auction is not known yet: keep the bid until it arrives
            context.list_state("early", list[int]).of(key).append(bid)
            return None
        win = context.value_state("win", list[int]).of(key)
        old = win.get()
        best = _wins(auction, old, (bid,))
        if best is old:
            return None
        win.update(best)
        return _row(auction, best)
    if kind == 1:
        record = event["auction"]
        key, auction = str(record["id"]), Auction(**{f: record[f] for f in FIELDS})
        context.value_state("auction", Auction).of(key).update(auction)
        early = context.list_state("early", list[int]).of(key)
        bids = early.get()
        if not bids:
            return None
        early.clear()
        best = _wins(auction, None, bids)
        if best is None:
            return None
        context.value_state("win", list[int]).of(key).update(best)
        return _row(auction, best)
    return None  # a person: not in this join
