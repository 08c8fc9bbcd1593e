"""Nexmark q14, calculation: converted prices in a band, the time of day of each bid and a character count.

    SELECT auction, bidder, 0.908 * price AS price,
        CASE WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18 THEN 'dayTime'
             WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime' ELSE 'otherTime' END AS bidTimeType,
        dateTime, extra, count_char(extra, 'c') AS c_counts
    FROM bid WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000

Hours are UTC hours of ``dateTime``.
"""


def time_type(hour):
    if 8 <= hour <= 18:
        return "dayTime"
    if hour <= 6 or hour >= 20:
        return "nightTime"
    return "otherTime"


def process(bid, context):
    price = 0.908 * bid["price"]
    if not 1_000_000 < price < 50_000_000:
        return None
    return {"auction": bid["auction"], "bidder": bid["bidder"], "price": price,
            "bidTimeType": time_type(bid["dateTime"] // 3_600_000 % 24), "dateTime": bid["dateTime"],
            "extra": bid["extra"], "c_counts": bid["extra"].count("c")}
