"""A deterministic Nexmark event generator, after the reference model of the ``nexmark/nexmark`` suite
(nexmark-flink's ``generator`` package and ``NexmarkConfiguration``); standard library only.

The stream
----------
Event number ``n`` (0, 1, 2, ... in emission order) is one event, a plain dict in the reference's combined-stream
shape (the ``datagen`` table of ``ddl_gen.sql``, which ``ddl_views.sql`` splits into three views)::

    {"event_type": 0, "person": {...}, "auction": None, "bid": None}     # 0 person, 1 auction, 2 bid

whose sub-records carry the reference's field names, in its order:

- person: ``id, name, emailAddress, creditCard, city, state, dateTime, extra``
- auction: ``id, itemName, description, initialBid, reserve, dateTime, expires, seller, category, extra``
- bid: ``auction, bidder, price, channel, url, dateTime, extra``

Times (``dateTime``, ``expires``) are epoch milliseconds (ints), prices are cents (ints).

The model (every number below is a ``NexmarkConfig`` field whose default is the reference's default)
-----------------------------------------------------------------------------------------------------
- Order and time. Event number ``n`` is first moved within its out-of-order group of
  ``out_of_order_group_size`` numbers (``g*G + (n*953) % G`` for ``n`` in group ``g``; 1, the default, keeps
  order; so do sizes dividing 952, like 7, 8 or 17, since then 953 = 1 modulo the size), giving its
  position ``p``. Its event id is ``first_event_id + p`` and its time
  ``base_time_ms + int(p * 1e6 / first_event_rate) // 1000``: 10 events per millisecond at 10,000 per second.
  Every event at or after number ``n`` has a time at or after ``watermark_ms(config, n)``. When
  ``num_events`` is not a multiple of the group size, the last group is shuffled as a full one (as in the
  reference): a few of its positions fall past the end and as many below it are never made.
- Kinds. The event id modulo 50 (``person_proportion + auction_proportion + bid_proportion``, 1 + 3 + 46)
  decides the kind: the first residue is a person, the next 3 auctions, the other 46 bids. So every aligned
  block of 50 event ids holds exactly 1 person, 3 auctions and 46 bids (every block of 50 events in emission
  order, with the defaults).
- Ids. Person ids count up from 1000 (``FIRST_PERSON_ID``), auction ids from 1000 (``FIRST_AUCTION_ID``),
  one per person or auction event, with no gaps; categories are 10..14 (``FIRST_CATEGORY_ID`` + 5).
- Sellers. An auction's seller is, with probability ``1 - 1/hot_sellers_ratio`` (3/4), the hot seller: the
  first person of the newest block of 100 person ids; otherwise a person drawn uniformly from the newest
  ``num_active_people`` (1000) plus ``person_id_lead`` (10) ids not created yet.
- Bids. A bid's auction is, with probability ``1 - 1/hot_auction_ratio`` (1/2), the hot auction: the first of
  the newest block of 100 auction ids; otherwise drawn uniformly from the newest ``num_in_flight_auctions + 1``
  (101) plus ``auction_id_lead`` (10) ids not created yet. Its bidder is, with probability
  ``1 - 1/hot_bidders_ratio`` (3/4), the hot bidder: the second person of the newest block of 100 (so hot
  bidders and hot sellers differ); otherwise an active person, drawn as for sellers.
- Forward references, as in the reference: the leads above, and a hot bidder created only after its block's
  first person, let a bid or an auction name an id created a little later in the stream (over the first
  100,000 events at the defaults: 4.5% of bids' auctions, 1.4% of bidders, 0.7% of sellers). Set both leads
  to 0 and every seller and every bid's auction exists when named; a hot bidder can still be the person right
  after the newest one.
- Prices: ``round(100 * 10**(6u))`` for ``u`` uniform in [0, 1): log-uniform from 1 to 1,000,000 dollars.
  An auction's ``initialBid`` is a price and its ``reserve`` is ``initialBid`` plus another price.
- Auctions last ``1 + uniform[0, 2h)`` milliseconds, ``h`` being the time the stream takes to make
  ``num_in_flight_auctions`` more auctions (about 167 ms at 10,000 events per second), so about that many
  auctions are open at a time. ``expires = dateTime + length``.
- Channels: half the bids come from one of four hot channels (Google, Facebook, Baidu, Apple), each with one
  fixed URL; the rest from ``channel-K``, ``K`` uniform in [0, 10000), whose URL is fixed per ``K`` and, nine
  times in ten, ends in ``&channel_id=`` and ``K``'s 32 bits reversed. A URL looks like
  ``https://www.nexmark.com/ab_c/de/fgh/item.htm?query=1``.
- Names, emails, credit cards, cities and states follow the reference's lists and shapes; ``itemName`` and
  ``description`` are lowercase words of up to 19 and 99 characters.
- ``extra`` is lowercase filler sized so that a record's idealized size (8 bytes per number plus its strings'
  lengths) averages ``avg_person_byte_size``/``avg_auction_byte_size``/``avg_bid_byte_size`` (200/500/100).

Determinism. Each event's random choices come from its own ``random.Random`` seeded by (``seed``, event id),
as Beam's original Nexmark seeds one per event id: the stream depends only on the config, one event can be
made alone (``event(config, n)``) and ranges of a stream can be made apart (``events(config, start, stop)``).
Ids, kinds and times depend only on the event number, never on the seed.

Where this differs from the reference (on purpose)
--------------------------------------------------
- The numbers are Python's, not ``java.util.Random``'s: the same model, not the same bytes. (nexmark-flink
  today draws from one unseeded Random, so its own streams differ from run to run.)
- A bidder's id is its base-0 id plus ``FIRST_PERSON_ID`` once; the reference's BidGenerator adds the offset
  twice (nexmark issue #30), which points every bid 1000 ids past the persons it means.
- Times start at a fixed ``base_time_ms`` (2015-07-15T00:00:00Z, Beam Nexmark's base time), not the wall
  clock; the first event id is 0, not the Flink source's 1 (with 1, person 1000 is never made, yet the model
  names it as the hot seller until person 1100 exists).
- One generator timeline at a constant rate (the reference's defaults: first rate = next rate); no rate
  shapes, extended-bid mode or wall-clock pacing.
- The hot channels' URLs and the per-channel URLs come from the seed, not from an unseeded Random.
- ``extra`` is uniform over a-z (the reference's modulus of a signed int lets a few other characters in).

Files (``write_jsonl``)
-----------------------
``DIR/events/part-NNNNNN.jsonl``: the combined stream, one JSON object per line, file ``i`` holding event
numbers ``[i*K, (i+1)*K)`` for ``K = events_per_file``: one micro-batch per file. With ``per_stream=True``
also ``DIR/person/``, ``DIR/auction/`` and ``DIR/bid/``, whose file ``i`` holds the bare sub-records of that
kind from the same event numbers (possibly none: the file is written anyway, so file ``i`` of every set is
the same batch). Each file is written under a name starting with ``.`` (which Spark's file source and
readers of ``*.jsonl`` skip) and renamed into place when complete, so a file appears whole; files appear in
index order. Existing files of the same names are replaced.

Command line::

    python benchmarks/nexmark_model/generator.py --events N --out DIR [--seed S] [--per-file K] [--per-stream]
                                            [--rate EVENTS_PER_SECOND] [--out-of-order G]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5
HOT_BLOCK = 100  # hot sellers, bidders and auctions are picked from the newest block of this many ids
OUT_OF_ORDER_MULTIPLIER = 953  # the reference's shuffle within an out-of-order group (prime)
BEAM_BASE_TIME_MS = 1_436_918_400_000  # 2015-07-15T00:00:00Z

PERSON, AUCTION, BID = 0, 1, 2
KIND_NAMES = ("person", "auction", "bid")

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = ("Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent",
             "Cheyenne")
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter")
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris")
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
NUM_CHANNELS = 10_000
HOT_CHANNEL_RATIO = 2

_MIN_STRING_LENGTH = 3
_LETTERS = b"abcdefghijklmnopqrstuvwxyz"


def _byte_table(symbols: bytes, copies: int) -> tuple[bytes, bytes, float]:
    """A ``bytes.translate`` table sending the first ``len(symbols) * copies`` byte values evenly onto
    ``symbols`` and the bytes to delete (the rest), so random bytes become uniformly drawn symbols."""
    kept = len(symbols) * copies
    table = bytes(symbols[i % len(symbols)] for i in range(kept)) + bytes(256 - kept)
    return table, bytes(range(kept, 256)), kept / 256


_PLAIN = _byte_table(_LETTERS, 9)                  # a-z uniformly
_WORDS = _byte_table(_LETTERS * 6 + b" " * 13, 1)  # a space 1 time in 13, otherwise a-z uniformly
_URL_WORDS = _byte_table(_LETTERS * 6 + b"_" * 13, 1)


@dataclasses.dataclass(frozen=True)
class NexmarkConfig:
    """What to generate; defaults are the reference's ``NexmarkConfiguration`` defaults where it has one.

    ``num_events`` events (event numbers ``0 .. num_events-1``) from ``seed`` (an int >= 0) at
    ``first_event_rate`` events per second of event time from ``base_time_ms``. See the module docstring for
    what each field does to the stream. Not the reference's: ``num_events`` (its 0 means endless; here a count),
    ``base_time_ms`` and ``first_event_id`` (see the deviations), ``person_id_lead``/``auction_id_lead`` (its
    constants PERSON_ID_LEAD and AUCTION_ID_LEAD) and ``seed``."""

    seed: int = 0
    num_events: int = 100_000
    first_event_rate: int = 10_000
    base_time_ms: int = BEAM_BASE_TIME_MS
    first_event_id: int = 0
    out_of_order_group_size: int = 1
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    person_id_lead: int = 10
    auction_id_lead: int = 10

    def __post_init__(self) -> None:
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, not {self.seed}")
        if self.num_events < 0 or self.first_event_id < 0:
            raise ValueError("num_events and first_event_id must be >= 0")
        positive = ("first_event_rate", "out_of_order_group_size", "person_proportion", "auction_proportion",
                    "bid_proportion", "hot_auction_ratio", "hot_sellers_ratio", "hot_bidders_ratio",
                    "num_in_flight_auctions", "num_active_people")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, not {getattr(self, name)}")
        if self.person_id_lead < 0 or self.auction_id_lead < 0:
            raise ValueError("person_id_lead and auction_id_lead must be >= 0")
        if self.out_of_order_group_size % OUT_OF_ORDER_MULTIPLIER == 0:
            # the shuffle g*G + (n*953) % G is a permutation of each group only when 953 does not divide G
            raise ValueError(f"out_of_order_group_size must not be a multiple of {OUT_OF_ORDER_MULTIPLIER}")

    @property
    def total_proportion(self) -> int:
        """Events per block of the kind cycle: 50 by default."""
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    @property
    def inter_event_delay_us(self) -> float:
        """Event time between consecutive positions, in microseconds (100.0 at 10,000 events per second)."""
        return 1_000_000.0 / self.first_event_rate


# ---- the model's arithmetic: positions, times, kinds and ids (no randomness) ----

def position(config: NexmarkConfig, number: int) -> int:
    """Event number ``number``'s position after the out-of-order shuffle of its group (``number`` when the
    group size is 1). Positions of a full group are its numbers, in another order."""
    size = config.out_of_order_group_size
    return (number // size) * size + (number * OUT_OF_ORDER_MULTIPLIER) % size


def timestamp_ms(config: NexmarkConfig, pos: int) -> int:
    """The event time, in epoch milliseconds, of position ``pos``; non-decreasing in ``pos``."""
    return config.base_time_ms + int(pos * config.inter_event_delay_us) // 1000


def watermark_ms(config: NexmarkConfig, number: int) -> int:
    """A time no later than that of event number ``number`` or of any event after it: the time of the first
    position of its out-of-order group."""
    size = config.out_of_order_group_size
    return timestamp_ms(config, (number // size) * size)


def event_kind(config: NexmarkConfig, event_id: int) -> int:
    """``PERSON`` (0), ``AUCTION`` (1) or ``BID`` (2): what event id ``event_id`` is."""
    offset = event_id % config.total_proportion
    if offset < config.person_proportion:
        return PERSON
    if offset < config.person_proportion + config.auction_proportion:
        return AUCTION
    return BID


def last_person_base0(config: NexmarkConfig, event_id: int) -> int:
    """The base-0 id of the newest person at event id ``event_id`` (its own id if it is a person)."""
    block, offset = divmod(event_id, config.total_proportion)
    return block * config.person_proportion + min(offset, config.person_proportion - 1)


def last_auction_base0(config: NexmarkConfig, event_id: int) -> int:
    """The base-0 id of the newest auction at event id ``event_id`` (its own id if it is an auction); -1
    before the first auction."""
    block, offset = divmod(event_id, config.total_proportion)
    if offset < config.person_proportion:
        return block * config.auction_proportion - 1
    return block * config.auction_proportion + min(offset - config.person_proportion, config.auction_proportion - 1)


# ---- random parts ----

def _random_bytes(rng: random.Random, n: int, alphabet: tuple[bytes, bytes, float]) -> str:
    table, delete, kept = alphabet
    out = b""
    while len(out) < n:
        missing = n - len(out)
        out += rng.randbytes(int(missing / kept) + 8).translate(table, delete)
    return out[:n].decode("ascii")


def _next_string(rng: random.Random, max_length: int, alphabet: tuple[bytes, bytes, float] = _WORDS) -> str:
    """Between 3 and ``max_length - 1`` characters, a 1-in-13 separator among a-z, stripped of end spaces."""
    length = _MIN_STRING_LENGTH + rng.randrange(max_length - _MIN_STRING_LENGTH)
    return _random_bytes(rng, length, alphabet).strip(" ")


def _next_extra(rng: random.Random, current_size: int, average_size: int) -> str:
    """Filler making ``current_size`` plus its length ``average_size`` on average (within +-20%)."""
    if current_size > average_size:
        return ""
    wanted = average_size - current_size
    delta = math.floor(wanted * 0.2 + 0.5)
    size = wanted - delta + (rng.randrange(2 * delta) if delta else 0)
    return _random_bytes(rng, size, _PLAIN)


def _next_price(rng: random.Random) -> int:
    return math.floor(10.0 ** (rng.random() * 6.0) * 100.0 + 0.5)


def _random_person_base0(config: NexmarkConfig, rng: random.Random, event_id: int) -> int:
    people = last_person_base0(config, event_id) + 1
    active = min(people, config.num_active_people)
    return people - active + rng.randrange(active + config.person_id_lead)


def _random_auction_base0(config: NexmarkConfig, rng: random.Random, event_id: int) -> int:
    newest = last_auction_base0(config, event_id)
    oldest = max(newest - config.num_in_flight_auctions, 0)
    return oldest + rng.randrange(newest - oldest + 1 + config.auction_id_lead)


def _url(rng: random.Random) -> str:
    parts = [_next_string(rng, 5, _URL_WORDS) for _ in range(3)]
    return "https://www.nexmark.com/" + "/".join(parts) + "/item.htm?query=1"


def _reverse32(value: int) -> int:
    """``abs`` of Java's ``Integer.reverse``: the 32 bits of ``value`` in reverse order, as a signed int."""
    reversed_bits = int(f"{value & 0xFFFFFFFF:032b}"[::-1], 2)
    return abs(reversed_bits - (1 << 32) if reversed_bits >= 1 << 31 else reversed_bits)


def _seed_key(seed: int, stream: int, n: int) -> int:
    """One integer seed per (config seed, kind of draw, event id or channel): distinct for distinct triples."""
    return (seed << 66) | (stream << 64) | n


@functools.lru_cache(maxsize=16)
def _hot_urls(seed: int) -> tuple[str, ...]:
    rng = random.Random(_seed_key(seed, 1, 0))
    return tuple(_url(rng) for _ in HOT_CHANNELS)


@functools.lru_cache(maxsize=4 * NUM_CHANNELS)
def _channel_url(seed: int, channel: int) -> str:
    rng = random.Random(_seed_key(seed, 2, channel))
    url = _url(rng)
    if rng.randrange(10) > 0:
        url += f"&channel_id={_reverse32(channel)}"
    return url


def _person(config: NexmarkConfig, rng: random.Random, event_id: int, when: int) -> dict[str, Any]:
    name = f"{rng.choice(FIRST_NAMES)} {rng.choice(LAST_NAMES)}"
    email = f"{_next_string(rng, 7)}@{_next_string(rng, 5)}.com"
    credit_card = " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4))
    city = rng.choice(US_CITIES)
    state = rng.choice(US_STATES)
    size = 8 + len(name) + len(email) + len(credit_card) + len(city) + len(state)
    return {
        "id": FIRST_PERSON_ID + last_person_base0(config, event_id),
        "name": name,
        "emailAddress": email,
        "creditCard": credit_card,
        "city": city,
        "state": state,
        "dateTime": when,
        "extra": _next_extra(rng, size, config.avg_person_byte_size),
    }


def _auction(config: NexmarkConfig, rng: random.Random, event_id: int, pos: int, when: int) -> dict[str, Any]:
    if rng.randrange(config.hot_sellers_ratio) > 0:
        seller = (last_person_base0(config, event_id) // HOT_BLOCK) * HOT_BLOCK
    else:
        seller = _random_person_base0(config, rng, event_id)
    category = FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES)
    initial_bid = _next_price(rng)
    # an auction lasts on average as long as the stream takes to make num_in_flight_auctions more of them
    events_ahead = config.num_in_flight_auctions * config.total_proportion // config.auction_proportion
    horizon = timestamp_ms(config, pos + events_ahead) - when
    expires = when + 1 + rng.randrange(max(horizon * 2, 1))
    item_name = _next_string(rng, 20)
    description = _next_string(rng, 100)
    reserve = initial_bid + _next_price(rng)
    size = 8 + len(item_name) + len(description) + 8 * 5
    return {
        "id": FIRST_AUCTION_ID + last_auction_base0(config, event_id),
        "itemName": item_name,
        "description": description,
        "initialBid": initial_bid,
        "reserve": reserve,
        "dateTime": when,
        "expires": expires,
        "seller": FIRST_PERSON_ID + seller,
        "category": category,
        "extra": _next_extra(rng, size, config.avg_auction_byte_size),
    }


def _bid(config: NexmarkConfig, rng: random.Random, event_id: int, when: int) -> dict[str, Any]:
    if rng.randrange(config.hot_auction_ratio) > 0:
        auction = (last_auction_base0(config, event_id) // HOT_BLOCK) * HOT_BLOCK
    else:
        auction = _random_auction_base0(config, rng, event_id)
    if rng.randrange(config.hot_bidders_ratio) > 0:
        bidder = (last_person_base0(config, event_id) // HOT_BLOCK) * HOT_BLOCK + 1
    else:
        bidder = _random_person_base0(config, rng, event_id)
    price = _next_price(rng)
    if rng.randrange(HOT_CHANNEL_RATIO) > 0:
        hot = rng.randrange(len(HOT_CHANNELS))
        channel, url = HOT_CHANNELS[hot], _hot_urls(config.seed)[hot]
    else:
        number = rng.randrange(NUM_CHANNELS)
        channel, url = f"channel-{number}", _channel_url(config.seed, number)
    return {
        "auction": FIRST_AUCTION_ID + auction,
        "bidder": FIRST_PERSON_ID + bidder,
        "price": price,
        "channel": channel,
        "url": url,
        "dateTime": when,
        "extra": _next_extra(rng, 8 * 4, config.avg_bid_byte_size),
    }


def _make(config: NexmarkConfig, rng: random.Random, number: int) -> dict[str, Any]:
    pos = position(config, number)
    event_id = config.first_event_id + pos
    when = timestamp_ms(config, pos)
    rng.seed(_seed_key(config.seed, 0, event_id))
    kind = event_kind(config, event_id)
    if kind == BID:
        return {"event_type": BID, "person": None, "auction": None, "bid": _bid(config, rng, event_id, when)}
    if kind == AUCTION:
        auction = _auction(config, rng, event_id, pos, when)
        return {"event_type": AUCTION, "person": None, "auction": auction, "bid": None}
    return {"event_type": PERSON, "person": _person(config, rng, event_id, when), "auction": None, "bid": None}


def event(config: NexmarkConfig, number: int) -> dict[str, Any]:
    """Event number ``number`` of ``config``'s stream (a fresh dict), made alone: equal to the ``number``-th
    item of ``events(config)``. ``number`` may be past ``num_events``."""
    if number < 0:
        raise ValueError(f"event numbers start at 0, not {number}")
    return _make(config, random.Random(0), number)


def events(config: NexmarkConfig, start: int = 0, stop: int | None = None) -> Iterator[dict[str, Any]]:
    """Event numbers ``start`` (default 0) up to ``stop`` (default ``config.num_events``), in emission order,
    each a fresh dict in the combined-stream shape of the module docstring. Ranges concatenate: ``events(c, 0,
    k)`` then ``events(c, k)`` is ``events(c)``."""
    stop = config.num_events if stop is None else stop
    if start < 0 or stop < start:
        raise ValueError(f"need 0 <= start <= stop, not start={start} stop={stop}")
    rng = random.Random()
    for number in range(start, stop):
        yield _make(config, rng, number)


def _write_whole(path: Path, lines: list[str]) -> None:
    """Write ``lines`` to a hidden temporary name beside ``path``, then rename it into place."""
    temporary = path.with_name(f".{path.name}.tmp")
    with open(temporary, "w", encoding="utf-8") as out:
        out.writelines(lines)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)


def write_jsonl(config: NexmarkConfig, directory: str | os.PathLike[str], events_per_file: int = 10_000, *,
                per_stream: bool = False) -> list[Path]:
    """Write ``config``'s stream as JSON-lines files under ``directory`` (created if missing), in the layout of
    the module docstring: ``events/part-NNNNNN.jsonl``, ``events_per_file`` events each, and with
    ``per_stream`` the ``person/``, ``auction/`` and ``bid/`` sets of the same batches. Each file appears whole
    (temporary name, then rename). Returns the paths written, in the order they appeared."""
    if events_per_file < 1:
        raise ValueError(f"events_per_file must be >= 1, not {events_per_file}")
    root = Path(directory)
    kinds = ("events",) + (KIND_NAMES if per_stream else ())
    for kind in kinds:
        (root / kind).mkdir(parents=True, exist_ok=True)
    encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
    written: list[Path] = []
    for index, start in enumerate(range(0, config.num_events, events_per_file)):
        stop = min(start + events_per_file, config.num_events)
        lines: dict[str, list[str]] = {kind: [] for kind in kinds}
        for record in events(config, start, stop):
            lines["events"].append(encode(record) + "\n")
            if per_stream:
                kind = KIND_NAMES[record["event_type"]]
                lines[kind].append(encode(record[kind]) + "\n")
        for kind in kinds:
            path = root / kind / f"part-{index:06d}.jsonl"
            _write_whole(path, lines[kind])
            written.append(path)
    return written


def read_jsonl(directory: str | os.PathLike[str], kind: str = "events") -> Iterator[dict[str, Any]]:
    """The records of one file set written by ``write_jsonl`` (``events``, ``person``, ``auction`` or ``bid``),
    files in index order, lines in file order."""
    for path in sorted(Path(directory, kind).glob("part-*.jsonl")):
        with open(path, encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)


def main(argv: list[str] | None = None) -> int:
    """The command line: write ``--events`` events to ``--out`` and print what was written."""
    parser = argparse.ArgumentParser(description="Write a deterministic Nexmark event stream as JSON-lines files.")
    parser.add_argument("--events", type=int, required=True, help="number of events")
    parser.add_argument("--out", required=True, help="output directory (events/ and, with --per-stream, "
                                                     "person/ auction/ bid/ under it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-file", type=int, default=10_000, help="events per file (one micro-batch each)")
    parser.add_argument("--per-stream", action="store_true", help="also write one file set per kind")
    parser.add_argument("--rate", type=int, default=NexmarkConfig.first_event_rate,
                        help="events per second of event time (reference default 10000)")
    parser.add_argument("--out-of-order", type=int, default=1, help="out-of-order group size (1: in order)")
    args = parser.parse_args(argv)
    config = NexmarkConfig(seed=args.seed, num_events=args.events, first_event_rate=args.rate,
                           out_of_order_group_size=args.out_of_order)
    began = time.perf_counter()
    paths = write_jsonl(config, args.out, args.per_file, per_stream=args.per_stream)
    seconds = time.perf_counter() - began
    rate = args.events / seconds if seconds > 0 else float("inf")
    print(f"{args.events} events in {len(paths)} files under {args.out} in {seconds:.1f} s ({rate:,.0f} events/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
