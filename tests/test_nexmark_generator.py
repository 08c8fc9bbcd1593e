"""The Nexmark generator (benchmarks/nexmark_model/generator.py) against the reference model of ``nexmark/nexmark``:
kind proportions 1:3:46 in every aligned block of 50 events, ids dense from 1000, event times from the rate,
hot auction/bidder/seller shares (expected values worked out here from the model, per event, from what the
stream itself has created so far), references bounded by the model's id leads (and none ahead of the stream
without leads), prices, auction lengths, channels and URLs, record sizes, bounded out-of-order groups,
determinism, and the JSON-lines files. Pure Python, no Spark.

``benchmarks`` is not an installed package: this module puts the repository root on ``sys.path`` (only if it is
missing) and imports ``benchmarks.nexmark_model`` as a namespace package."""

from __future__ import annotations

import collections
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.nexmark_model import generator as nx  # noqa: E402

EVENTS = 100_000
CONFIG = nx.NexmarkConfig(seed=7, num_events=EVENTS)
HOT_CHANNEL_NAMES = {"Google", "Facebook", "Baidu", "Apple"}
URL = re.compile(r"https://www\.nexmark\.com/[a-z_]{3,4}/[a-z_]{3,4}/[a-z_]{3,4}/item\.htm\?query=1"
                 r"(&channel_id=\d+)?")


@pytest.fixture(scope="module")
def stream() -> list[dict]:
    return list(nx.events(CONFIG))


def _walk(stream: list[dict]):
    """(event, newest person id, newest auction id) for each event of an in-order stream, the newest ids being
    those the stream has created so far, this event included."""
    newest_person = newest_auction = None
    for record in stream:
        if record["event_type"] == nx.PERSON:
            newest_person = record["person"]["id"]
        elif record["event_type"] == nx.AUCTION:
            newest_auction = record["auction"]["id"]
        yield record, newest_person, newest_auction


def _event_time(record: dict) -> int:
    return record[nx.KIND_NAMES[record["event_type"]]]["dateTime"]


def _within(observed: float, expected: float, variance: float, sigmas: float = 5.0) -> bool:
    return abs(observed - expected) <= sigmas * math.sqrt(variance) + 1


def test_every_block_of_fifty_is_one_person_three_auctions_forty_six_bids(stream):
    kinds = [record["event_type"] for record in stream]
    for start in range(0, EVENTS, 50):
        assert kinds[start:start + 50] == [nx.PERSON] + [nx.AUCTION] * 3 + [nx.BID] * 46, start
    for record in stream:
        present = [kind for kind in nx.KIND_NAMES if record[kind] is not None]
        assert present == [nx.KIND_NAMES[record["event_type"]]]


def test_person_and_auction_ids_are_dense_from_the_first_ids(stream):
    people = [r["person"]["id"] for r in stream if r["event_type"] == nx.PERSON]
    auctions = [r["auction"]["id"] for r in stream if r["event_type"] == nx.AUCTION]
    assert people == list(range(nx.FIRST_PERSON_ID, nx.FIRST_PERSON_ID + EVENTS // 50))
    assert auctions == list(range(nx.FIRST_AUCTION_ID, nx.FIRST_AUCTION_ID + 3 * EVENTS // 50))
    categories = collections.Counter(r["auction"]["category"] for r in stream if r["event_type"] == nx.AUCTION)
    assert set(categories) == set(range(nx.FIRST_CATEGORY_ID, nx.FIRST_CATEGORY_ID + 5))


def test_event_times_follow_the_inter_event_delay(stream):
    # 10,000 events per second: 100 us apart, so event k is at base + k // 10 ms
    assert [_event_time(r) for r in stream] == [CONFIG.base_time_ms + k // 10 for k in range(EVENTS)]
    slower = nx.NexmarkConfig(num_events=2000, first_event_rate=3)  # 333333.33 us apart
    times = [_event_time(r) for r in nx.events(slower)]
    assert times == [slower.base_time_ms + int(k * (1e6 / 3)) // 1000 for k in range(2000)]
    assert times[3] - times[0] == 1000


def test_hot_auction_bidder_and_seller_shares_match_the_model(stream):
    """Per bid, P(hot auction) = (1 - 1/2) + (1/2) * 1/window, where window counts the ids the random pick draws
    from (the newest auction, up to 100 before it, 10 ahead), all of which include the hot one; P(hot bidder)
    = 3/4 + (1/4) / (active + 10) likewise, and P(hot seller) per auction the same with the seller ratio."""
    hot_auctions = hot_bidders = hot_sellers = 0
    expected = collections.Counter()
    variance = collections.Counter()
    bids = auctions = 0

    def expect(name: str, ratio: int, window: int) -> None:
        p = (1 - 1 / ratio) + (1 / ratio) / window
        expected[name] += p
        variance[name] += p * (1 - p)

    for record, person, auction in _walk(stream):
        person_base0 = person - nx.FIRST_PERSON_ID
        active = min(person_base0 + 1, CONFIG.num_active_people) + CONFIG.person_id_lead
        if record["event_type"] == nx.BID:
            bids += 1
            bid = record["bid"]
            auction_base0 = auction - nx.FIRST_AUCTION_ID
            window = auction_base0 - max(auction_base0 - CONFIG.num_in_flight_auctions, 0) + 1
            expect("auction", CONFIG.hot_auction_ratio, window + CONFIG.auction_id_lead)
            expect("bidder", CONFIG.hot_bidders_ratio, active)
            hot_auctions += bid["auction"] == nx.FIRST_AUCTION_ID + auction_base0 // 100 * 100
            hot_bidders += bid["bidder"] == nx.FIRST_PERSON_ID + person_base0 // 100 * 100 + 1
        elif record["event_type"] == nx.AUCTION:
            auctions += 1
            expect("seller", CONFIG.hot_sellers_ratio, active)
            hot_sellers += record["auction"]["seller"] == nx.FIRST_PERSON_ID + person_base0 // 100 * 100
    assert _within(hot_auctions, expected["auction"], variance["auction"]), (hot_auctions, expected)
    assert _within(hot_bidders, expected["bidder"], variance["bidder"]), (hot_bidders, expected)
    assert _within(hot_sellers, expected["seller"], variance["seller"]), (hot_sellers, expected)
    # the headline shares: 1 - 1/ratio, plus the small chance of a random pick landing on the hot id
    assert abs(hot_auctions / bids - 0.5) < 0.015
    assert abs(hot_bidders / bids - 0.75) < 0.015
    assert abs(hot_sellers / auctions - 0.75) < 0.03


def test_references_reach_at_most_the_id_lead_ahead_of_the_stream(stream):
    """At the defaults the model lets a reference name an id up to 10 past the newest one (the reference's
    PERSON_ID_LEAD and AUCTION_ID_LEAD); how often that happens is checked against the model too."""
    ahead = collections.Counter()
    expected = collections.Counter()
    for record, person, auction in _walk(stream):
        active = min(person - nx.FIRST_PERSON_ID + 1, CONFIG.num_active_people)
        random_ahead = CONFIG.person_id_lead / (active + CONFIG.person_id_lead)
        if record["event_type"] == nx.BID:
            bid = record["bid"]
            assert nx.FIRST_AUCTION_ID <= bid["auction"] <= auction + CONFIG.auction_id_lead
            assert nx.FIRST_PERSON_ID <= bid["bidder"] <= person + CONFIG.person_id_lead
            ahead["auction"] += bid["auction"] > auction
            ahead["bidder"] += bid["bidder"] > person
            auction_base0 = auction - nx.FIRST_AUCTION_ID
            window = auction_base0 - max(auction_base0 - CONFIG.num_in_flight_auctions, 0) + 1
            expected["auction"] += 0.5 * CONFIG.auction_id_lead / (window + CONFIG.auction_id_lead)
            # the hot bidder is the second person of the newest block of 100: not there yet right after the first
            hot_ahead = (person - nx.FIRST_PERSON_ID) % 100 == 0
            expected["bidder"] += 0.75 * hot_ahead + 0.25 * random_ahead
        elif record["event_type"] == nx.AUCTION:
            seller = record["auction"]["seller"]
            assert nx.FIRST_PERSON_ID <= seller <= person + CONFIG.person_id_lead
            ahead["seller"] += seller > person
            expected["seller"] += 0.25 * random_ahead
    for name in ("auction", "bidder", "seller"):
        assert _within(ahead[name], expected[name], expected[name]), (name, ahead, expected)
    assert 0.03 < ahead["auction"] / (EVENTS * 46 / 50) < 0.06


def test_without_id_leads_every_reference_exists_when_made():
    config = nx.NexmarkConfig(seed=3, num_events=30_000, person_id_lead=0, auction_id_lead=0)
    hot_bidders_ahead = 0
    for record, person, auction in _walk(list(nx.events(config))):
        if record["event_type"] == nx.BID:
            bid = record["bid"]
            assert nx.FIRST_AUCTION_ID <= bid["auction"] <= auction
            if bid["bidder"] > person:
                # the model's one exception: the hot bidder (second of the newest block of 100) right after the
                # block's first person was made
                assert bid["bidder"] == person + 1 and (person - nx.FIRST_PERSON_ID) % 100 == 0
                hot_bidders_ahead += 1
            assert bid["bidder"] >= nx.FIRST_PERSON_ID
        elif record["event_type"] == nx.AUCTION:
            assert nx.FIRST_PERSON_ID <= record["auction"]["seller"] <= person
    assert hot_bidders_ahead > 0


def test_prices_reserves_and_auction_lengths(stream):
    prices = [r["bid"]["price"] for r in stream if r["event_type"] == nx.BID]
    assert 100 <= min(prices) and max(prices) <= 100_000_000
    # log-uniform over six decades: each decade holds a sixth
    decades = collections.Counter(min(int(math.log10(p / 100)), 5) for p in prices)
    for decade in range(6):
        assert abs(decades[decade] / len(prices) - 1 / 6) < 0.01, decades
    auctions = [r["auction"] for r in stream if r["event_type"] == nx.AUCTION]
    lengths = []
    for a in auctions:
        assert 100 <= a["initialBid"] <= 100_000_000
        assert a["initialBid"] + 100 <= a["reserve"] <= a["initialBid"] + 100_000_000
        lengths.append(a["expires"] - a["dateTime"])
    # 1 + uniform[0, 2h): h = the time to make 100 more auctions, 1666 events = 166 or 167 ms at 10,000/s
    assert min(lengths) >= 1 and max(lengths) <= 334
    assert abs(sum(lengths) / len(lengths) - 167) < 5


def _reversed_bits(value: int) -> int:
    bits = int(format(value, "032b")[::-1], 2)
    return abs(bits - 2**32 if bits >= 2**31 else bits)


def test_channels_and_urls(stream):
    bids = [r["bid"] for r in stream if r["event_type"] == nx.BID]
    hot = [b for b in bids if b["channel"] in HOT_CHANNEL_NAMES]
    assert abs(len(hot) / len(bids) - 0.5) < 0.01
    url_of: dict[str, str] = {}
    for b in bids:
        assert URL.fullmatch(b["url"]), b["url"]
        assert url_of.setdefault(b["channel"], b["url"]) == b["url"]  # one URL per channel
        if b["channel"] not in HOT_CHANNEL_NAMES:
            number = int(b["channel"].removeprefix("channel-"))
            assert 0 <= number < 10_000
            if "&channel_id=" in b["url"]:
                assert b["url"].endswith(f"&channel_id={_reversed_bits(number)}")
    assert set(url_of) >= HOT_CHANNEL_NAMES and len(set(url_of[c] for c in HOT_CHANNEL_NAMES)) == 4
    cold = [c for c in url_of if c not in HOT_CHANNEL_NAMES]
    with_id = sum("&channel_id=" in url_of[c] for c in cold)
    assert abs(with_id / len(cold) - 0.9) < 0.02


def test_record_fields_and_average_sizes(stream):
    sizes = collections.defaultdict(list)
    for record in stream:
        kind = nx.KIND_NAMES[record["event_type"]]
        r = record[kind]
        if kind == "person":
            first, last = r["name"].split(" ")
            assert first in nx.FIRST_NAMES and last in nx.LAST_NAMES
            assert r["city"] in nx.US_CITIES and r["state"] in nx.US_STATES
            assert re.fullmatch(r"\d{4} \d{4} \d{4} \d{4}", r["creditCard"])
            user, domain = r["emailAddress"].removesuffix(".com").split("@")
            assert re.fullmatch(r"[a-z ]{0,6}", user) and re.fullmatch(r"[a-z ]{0,4}", domain)
            assert user == user.strip() and domain == domain.strip()
            strings = [r["name"], r["emailAddress"], r["creditCard"], r["city"], r["state"]]
            sizes[kind].append(8 + sum(map(len, strings)) + len(r["extra"]))
        elif kind == "auction":
            assert re.fullmatch(r"[a-z ]{0,19}", r["itemName"]) and re.fullmatch(r"[a-z ]{0,99}", r["description"])
            sizes[kind].append(8 + len(r["itemName"]) + len(r["description"]) + 40 + len(r["extra"]))
        else:
            sizes[kind].append(32 + len(r["extra"]))
        assert re.fullmatch(r"[a-z]*", r["extra"])
    averages = {"person": CONFIG.avg_person_byte_size, "auction": CONFIG.avg_auction_byte_size,
                "bid": CONFIG.avg_bid_byte_size}
    for kind, average in averages.items():
        assert abs(sum(sizes[kind]) / len(sizes[kind]) - average) < 0.03 * average, kind


def test_out_of_order_groups_are_bounded_and_hold_the_same_events():
    size = 100  # the shuffle is g*G + (n*953) % G: 953 = 53 (mod 100), a real permutation (7, for one, divides 952)
    config = nx.NexmarkConfig(seed=5, num_events=size * 56, out_of_order_group_size=size)
    shuffled = list(nx.events(config))
    in_order = list(nx.events(nx.NexmarkConfig(seed=5, num_events=size * 56)))
    assert sorted(map(json.dumps, shuffled)) == sorted(map(json.dumps, in_order))
    times = [_event_time(r) for r in shuffled]
    groups = [times[start:start + size] for start in range(0, len(times), size)]
    for before, after in zip(groups, groups[1:]):
        assert max(before) <= min(after)
    assert any(later < earlier for earlier, later in zip(times, times[1:]))  # some disorder within groups
    later_minimum = math.inf
    for number in reversed(range(len(times))):
        later_minimum = min(later_minimum, times[number])
        assert nx.watermark_ms(config, number) <= later_minimum
    kinds = collections.Counter(r["event_type"] for r in shuffled)
    assert kinds == {nx.PERSON: 112, nx.AUCTION: 336, nx.BID: 5152}
    with pytest.raises(ValueError):
        nx.NexmarkConfig(out_of_order_group_size=953 * 2)


def test_same_seed_same_events_other_seed_other_choices(stream):
    again = list(nx.events(CONFIG, 0, 5000))
    assert again == stream[:5000]
    assert list(nx.events(CONFIG, 60_000, 61_000)) == stream[60_000:61_000]
    for number in (0, 1, 3, 4, 49, 50, 77_777, EVENTS - 1):
        assert nx.event(CONFIG, number) == stream[number]
    other = list(nx.events(nx.NexmarkConfig(seed=8, num_events=5000)))
    assert other != again
    # ids, kinds and times come from the event number alone; the random choices from the seed
    assert [(r["event_type"], _event_time(r)) for r in other] == [(r["event_type"], _event_time(r)) for r in again]
    assert [r["person"]["id"] for r in other if r["person"]] == [r["person"]["id"] for r in again if r["person"]]
    different = sum(a["bid"] != b["bid"] for a, b in zip(other, again) if a["bid"] is not None)
    assert different > 0.99 * 5000 * 46 / 50


def test_write_jsonl_round_trips(tmp_path):
    config = nx.NexmarkConfig(seed=11, num_events=2500)
    expected = list(nx.events(config))
    paths = nx.write_jsonl(config, tmp_path / "out", 1000, per_stream=True)
    assert [p.relative_to(tmp_path / "out").as_posix() for p in paths] == [
        f"{kind}/part-{index:06d}.jsonl" for index in range(3) for kind in ("events", "person", "auction", "bid")]
    assert not list((tmp_path / "out").rglob(".*"))  # no temporary files left
    assert list(nx.read_jsonl(tmp_path / "out")) == expected
    events_files = sorted((tmp_path / "out" / "events").iterdir())
    assert [len(p.read_text().splitlines()) for p in events_files] == [1000, 1000, 500]
    for kind in nx.KIND_NAMES:
        assert list(nx.read_jsonl(tmp_path / "out", kind)) == [r[kind] for r in expected if r[kind] is not None]
    combined_only = nx.write_jsonl(config, tmp_path / "combined", 2500)
    assert [p.name for p in combined_only] == ["part-000000.jsonl"]
    assert sorted(p.name for p in (tmp_path / "combined").iterdir()) == ["events"]


def test_command_line_writes_the_files(tmp_path):
    script = ROOT / "benchmarks" / "nexmark_model" / "generator.py"
    done = subprocess.run([sys.executable, str(script), "--events", "600", "--out", str(tmp_path), "--seed", "4",
                           "--per-file", "250"], capture_output=True, text=True, timeout=60, check=True)
    assert "600 events in 3 files" in done.stdout
    assert list(nx.read_jsonl(tmp_path)) == list(nx.events(nx.NexmarkConfig(seed=4, num_events=600)))
