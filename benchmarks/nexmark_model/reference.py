"""Nexmark queries computed independently in plain Python over the generated events, and each query's
output reduced to the form the reference gives, so the two can be compared with ``==``.

``expected(query, events, side)`` takes the combined stream (``generator.events``) in emission order and the
q13 side input (``{key: value}``) and returns the query's result; ``result(query, outputs)`` takes the output
records of a run of the query (in the order they were written; a record may be a list of rows) and returns the
same form. Forms: an append-only query is a ``Counter`` of row tuples; an updating one (q4, q5, q9, q12, q15,
q17, q18) is a dict from its key to its final value; a windowed one only holds the windows the final
watermark (the largest event time of the window step's input, lag 0) has closed, as a streaming engine emits
them. Floats are rounded to 6 decimals (JSON writers differ in the last digits).
"""

from __future__ import annotations

import datetime
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

Row = dict[str, Any]
HOT_CHANNELS = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
CHANNEL_ID = re.compile(r"(&|^)channel_id=([^&]*)")
TEN_S = 10_000


def _kind(events: Iterable[Row], kind: str) -> list[Row]:
    index = ("person", "auction", "bid").index(kind)
    return [e[kind] for e in events if e["event_type"] == index]


def _day(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d")


def _r(x: float) -> float:
    return round(x, 6)


def _rows(outputs: Iterable[Any]) -> list[Row]:
    rows: list[Row] = []
    for out in outputs:
        rows.extend(out if isinstance(out, list) else [out])
    return rows


# ---- the reference, one function per query ----

def _q0(ev: list[Row], side: Mapping[int, str]) -> Any:
    return Counter((b["auction"], b["bidder"], b["price"], b["dateTime"], b["extra"]) for b in _kind(ev, "bid"))


def _q1(ev: list[Row], side: Mapping[int, str]) -> Any:
    return Counter((b["auction"], b["bidder"], _r(0.908 * b["price"]), b["dateTime"], b["extra"])
                   for b in _kind(ev, "bid"))


def _q2(ev: list[Row], side: Mapping[int, str]) -> Any:
    return Counter((b["auction"], b["price"]) for b in _kind(ev, "bid") if b["auction"] % 123 == 0)


def _q3(ev: list[Row], side: Mapping[int, str]) -> Any:
    people = {p["id"]: p for p in _kind(ev, "person") if p["state"] in ("OR", "ID", "CA")}
    return Counter((people[a["seller"]]["name"], people[a["seller"]]["city"], people[a["seller"]]["state"], a["id"])
                   for a in _kind(ev, "auction") if a["category"] == 10 and a["seller"] in people)


def _q4(ev: list[Row], side: Mapping[int, str]) -> Any:
    auctions = {a["id"]: a for a in _kind(ev, "auction")}
    final: dict[int, int] = {}
    for b in _kind(ev, "bid"):
        a = auctions.get(b["auction"])
        if a is not None and a["dateTime"] <= b["dateTime"] <= a["expires"]:
            final[a["id"]] = max(final.get(a["id"], b["price"]), b["price"])
    per_category: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for auction, price in final.items():
        per_category[auctions[auction]["category"]][0] += price
        per_category[auctions[auction]["category"]][1] += 1
    return {c: tuple(v) for c, v in per_category.items()}


def _sliding_starts(t: int, length: int, slide: int) -> range:
    last = t - t % slide
    return range(last - length + slide, last + 1, slide)


def _q5(ev: list[Row], side: Mapping[int, str]) -> Any:
    bids = _kind(ev, "bid")
    if not bids:
        return {}
    watermark = max(b["dateTime"] for b in bids)
    counts: Counter = Counter()
    for b in bids:
        for start in _sliding_starts(b["dateTime"], TEN_S, 2000):
            if start + TEN_S <= watermark:
                counts[(start, b["auction"])] += 1
    best: dict[int, tuple[int, list[int]]] = {}
    for (start, auction), n in counts.items():
        num, auctions = best.get(start, (0, []))
        if n > num:
            best[start] = (n, [auction])
        elif n == num:
            auctions.append(auction)
    return {s: (n, tuple(sorted(a))) for s, (n, a) in best.items()}


def _q7(ev: list[Row], side: Mapping[int, str]) -> Any:
    bids = _kind(ev, "bid")
    if not bids:
        return {}
    watermark = max(b["dateTime"] for b in bids)
    windows: dict[int, list[Row]] = defaultdict(list)
    for b in bids:
        start = b["dateTime"] - b["dateTime"] % TEN_S
        if start + TEN_S <= watermark:
            windows[start].append(b)
    out = {}
    for start, members in windows.items():
        top = max(b["price"] for b in members)
        out[start] = (top, tuple(sorted((b["auction"], b["bidder"], b["dateTime"]) for b in members
                                        if b["price"] == top)))
    return out


def _q8(ev: list[Row], side: Mapping[int, str]) -> Any:
    people, auctions = _kind(ev, "person"), _kind(ev, "auction")
    if not people and not auctions:
        return Counter()
    watermark = max(r["dateTime"] for r in people + auctions)
    sellers = {(a["seller"], a["dateTime"] - a["dateTime"] % TEN_S) for a in auctions}
    return Counter((p["id"], p["name"], p["dateTime"] - p["dateTime"] % TEN_S) for p in people
                   if (p["id"], p["dateTime"] - p["dateTime"] % TEN_S) in sellers
                   and p["dateTime"] - p["dateTime"] % TEN_S + TEN_S <= watermark)


def _q9(ev: list[Row], side: Mapping[int, str]) -> Any:
    auctions = {a["id"]: a for a in _kind(ev, "auction")}
    win: dict[int, tuple[int, int, int]] = {}
    for b in _kind(ev, "bid"):
        a = auctions.get(b["auction"])
        if a is None or not a["dateTime"] <= b["dateTime"] <= a["expires"]:
            continue
        best = win.get(a["id"])
        if best is None or b["price"] > best[0] or (b["price"] == best[0] and b["dateTime"] < best[1]):
            win[a["id"]] = (b["price"], b["dateTime"], b["bidder"])
    return win


def _q11(ev: list[Row], side: Mapping[int, str]) -> Any:
    bids = _kind(ev, "bid")
    if not bids:
        return Counter()
    watermark = max(b["dateTime"] for b in bids)
    times: dict[int, list[int]] = defaultdict(list)
    for b in bids:
        times[b["bidder"]].append(b["dateTime"])
    out: Counter = Counter()
    for bidder, stamps in times.items():
        stamps.sort()
        start, last, count = stamps[0], stamps[0], 0
        for t in stamps:
            if t >= last + TEN_S:  # a gap of 10 s or more closes the session
                out[(bidder, count, start, last + TEN_S)] += 1
                start, count = t, 0
            last, count = t, count + 1
        if last + TEN_S <= watermark:
            out[(bidder, count, start, last + TEN_S)] += 1
    return out


def _q12(ev: list[Row], side: Mapping[int, str]) -> Any:
    return dict(Counter(b["bidder"] for b in _kind(ev, "bid")))


def _q13(ev: list[Row], side: Mapping[int, str]) -> Any:
    return Counter((b["auction"], b["bidder"], b["price"], b["dateTime"], side[b["auction"] % 10000])
                   for b in _kind(ev, "bid") if b["auction"] % 10000 in side)


def _time_type(hour: int) -> str:
    return "dayTime" if 8 <= hour <= 18 else "nightTime" if hour <= 6 or hour >= 20 else "otherTime"


def _q14(ev: list[Row], side: Mapping[int, str]) -> Any:
    return Counter((b["auction"], b["bidder"], _r(0.908 * b["price"]), _time_type(b["dateTime"] // 3_600_000 % 24),
                    b["dateTime"], b["extra"], b["extra"].count("c"))
                   for b in _kind(ev, "bid") if 1_000_000 < 0.908 * b["price"] < 50_000_000)


def _rank(price: int) -> int:
    return 1 if price < 10_000 else 2 if price < 1_000_000 else 3


def _q15(ev: list[Row], side: Mapping[int, str]) -> Any:
    bids: dict[str, list[Row]] = defaultdict(list)
    for b in _kind(ev, "bid"):
        bids[_day(b["dateTime"])].append(b)
    out = {}
    for day, members in bids.items():
        groups = [members] + [[b for b in members if _rank(b["price"]) == r] for r in (1, 2, 3)]
        out[day] = (tuple(len(g) for g in groups) + tuple(len({b["bidder"] for b in g}) for g in groups)
                    + tuple(len({b["auction"] for b in g}) for g in groups))
    return out


def _q17(ev: list[Row], side: Mapping[int, str]) -> Any:
    groups: dict[tuple[int, str], list[int]] = defaultdict(list)
    for b in _kind(ev, "bid"):
        groups[(b["auction"], _day(b["dateTime"]))].append(b["price"])
    return {k: (len(p), sum(x < 10_000 for x in p), sum(10_000 <= x < 1_000_000 for x in p),
                sum(x >= 1_000_000 for x in p), min(p), max(p), sum(p) // len(p), sum(p)) for k, p in groups.items()}


def _q18(ev: list[Row], side: Mapping[int, str]) -> Any:
    latest: dict[tuple[int, int], int] = {}
    for b in _kind(ev, "bid"):
        key = (b["bidder"], b["auction"])
        latest[key] = max(latest.get(key, b["dateTime"]), b["dateTime"])
    return latest


def _q21(ev: list[Row], side: Mapping[int, str]) -> Any:
    out: Counter = Counter()
    for b in _kind(ev, "bid"):
        found = CHANNEL_ID.search(b["url"])
        channel_id = HOT_CHANNELS.get(b["channel"].lower()) or (found.group(2) if found else None)
        if channel_id is not None:
            out[(b["auction"], b["bidder"], b["price"], b["channel"], channel_id)] += 1
    return out


def _q22(ev: list[Row], side: Mapping[int, str]) -> Any:
    return Counter((b["auction"], b["bidder"], b["price"], b["channel"], *b["url"].split("/")[3:6])
                   for b in _kind(ev, "bid"))


REFERENCE: dict[str, Callable[[list[Row], Mapping[int, str]], Any]] = {
    name.removeprefix("_"): fn for name, fn in globals().items() if re.fullmatch(r"_q\d+", name)}


def expected(query: str, events: list[Row], side: Mapping[int, str] | None = None) -> Any:
    """The reference result of ``query`` (``"q0"`` ... ``"q22"``) over ``events`` (KeyError: no such query)."""
    return REFERENCE[query](events, side or {})


# ---- a run's outputs in the reference's form ----

def _last(rows: list[Row], key: Callable[[Row], Any], value: Callable[[Row], Any]) -> dict[Any, Any]:
    return {key(r): value(r) for r in rows}  # in output order: the last record per key wins


def _tuples(*fields: str) -> Callable[[list[Row]], Any]:
    return lambda rows: Counter(tuple(_r(r[f]) if isinstance(r[f], float) else r[f] for f in fields) for r in rows)


def _q12_result(rows: list[Row]) -> Any:
    per_window = _last(rows, lambda r: (r["bidder"], r["start"]), lambda r: r["bid_count"])
    totals: Counter = Counter()
    for (bidder, _), count in per_window.items():
        totals[bidder] += count
    return dict(totals)


RESULT: dict[str, Callable[[list[Row]], Any]] = {
    "q0": _tuples("auction", "bidder", "price", "dateTime", "extra"),
    "q1": _tuples("auction", "bidder", "price", "dateTime", "extra"),
    "q2": _tuples("auction", "price"),
    "q3": _tuples("name", "city", "state", "id"),
    "q4": lambda rows: _last(rows, lambda r: r["category"], lambda r: (r["sum"], r["count"])),
    "q5": lambda rows: _last(rows, lambda r: r["start"], lambda r: (r["num"], tuple(sorted(r["auctions"])))),
    "q7": lambda rows: _last(rows, lambda r: r["start"],
                             lambda r: (r["price"], tuple(sorted(tuple(b) for b in r["bids"])))),
    "q8": _tuples("id", "name", "start"),
    "q9": lambda rows: _last(rows, lambda r: r["id"], lambda r: (r["price"], r["bidDateTime"], r["bidder"])),
    "q11": _tuples("bidder", "bid_count", "start", "end"),
    "q12": _q12_result,
    "q13": _tuples("auction", "bidder", "price", "dateTime", "value"),
    "q14": _tuples("auction", "bidder", "price", "bidTimeType", "dateTime", "extra", "c_counts"),
    "q15": lambda rows: _last(rows, lambda r: r["day"], lambda r: tuple(
        r[f"{rank}_{what}"] for what in ("bids", "bidders", "auctions") for rank in ("total", "rank1", "rank2",
                                                                                   "rank3"))),
    "q17": lambda rows: _last(rows, lambda r: (r["auction"], r["day"]), lambda r: tuple(
        r[f] for f in ("total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "min_price", "max_price",
                       "avg_price", "sum_price"))),
    "q18": lambda rows: _last(rows, lambda r: (r["bidder"], r["auction"]), lambda r: r["dateTime"]),
    "q21": _tuples("auction", "bidder", "price", "channel", "channel_id"),
    "q22": _tuples("auction", "bidder", "price", "channel", "dir1", "dir2", "dir3"),
}


def result(query: str, outputs: Iterable[Any]) -> Any:
    """``query``'s output records (in write order; a list is several rows) in the reference's form."""
    return RESULT[query](_rows(outputs))


def side_input(keys: int = 10_000) -> dict[int, str]:
    """q13's side input: a value for every other key below ``keys`` (so the join also drops bids)."""
    return {k: f"value-{k * 7919 % 10007}" for k in range(0, keys, 2)}
