"""Nexmark q9, vectorized: each auction with its highest bid placed while it was open (the earliest of equal
highest bids).

The same function as ``q9.py`` (input the combined stream, no key field; the same typed state under each
auction's id): the batch's auctions and bids taken out in Arrow and grouped by auction in their order, every
auction's ``auction`` and ``win`` read at once (``get_many``) and written once where they changed
(``update_many``), the bids of auctions not seen yet appended to their ``early`` lists, and an auction's row output
once per batch when its winner changed in it.
"""

import msgspec
import pyarrow as pa
import pyarrow.compute as pc


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


def rows_of(events, kind, index, fields):
    """The events of one kind as lists of ``fields`` (columns), in order."""
    if kind not in events.column_names:
        return [[] for _ in fields]
    chosen = events[kind].filter(pc.equal(events["event_type"], index)).combine_chunks()
    flat = pa.Table.from_struct_array(chosen) if len(chosen) else None
    return [flat[f].to_pylist() if flat is not None else [] for f in fields]


def process_batch(events, context):
    auctions = iter(zip(*rows_of(events, "auction", 1, FIELDS)))
    bids = iter(zip(*rows_of(events, "bid", 2, ("auction", "price", "dateTime", "bidder"))))
    per_auction = {}
    for kind in events["event_type"].to_pylist():
        if kind == 1:
            auction = Auction(*next(auctions))
            per_auction.setdefault(str(auction.id), []).append(auction)
        elif kind == 2:
            key, price, when, bidder = next(bids)
            per_auction.setdefault(str(key), []).append([price, when, bidder])
    keys = list(per_auction)
    known, wins = context.value_state("auction", Auction), context.value_state("win", list[int])
    new_keys, new_auctions, changed, winners, rows = [], [], [], [], []
    for key, auction, old in zip(keys, known.get_many(keys), wins.get_many(keys)):
        best, waiting = old, []
        for item in per_auction[key]:
            if item.__class__ is Auction:  # the auction: the bids that came before it are judged now
                auction = item
                new_keys.append(key)
                new_auctions.append(item)
                early = context.list_state("early", list[int]).of(key)
                waiting = early.get() + waiting
                early.clear()
                best = _wins(auction, best, waiting)
                waiting = []
            elif auction is None:  # the auction is not known yet: keep the bid until it arrives
                waiting.append(item)
            else:
                best = _wins(auction, best, (item,))
        if waiting:
            context.list_state("early", list[int]).of(key).extend(waiting)
        if best is not old:
            changed.append(key)
            winners.append(best)
            price, when, bidder = best
            rows.append({**{f: getattr(auction, f) for f in FIELDS}, "bidder": bidder, "price": price,
                         "bidDateTime": when})
    known.update_many(new_keys, new_auctions)
    wins.update_many(changed, winners)
    return rows or None


def _wins(auction, best, bids):
    """The winner among ``best`` (None: none yet) and ``bids`` placed while ``auction`` was open."""
    for bid in bids:
        price, when = bid[0], bid[1]
        if auction.dateTime <= when <= auction.expires and (
                best is None or price > best[0] or (price == best[0] and when < best[1])):
            best = bid
    return best
