"""Nexmark q4, step 2 of 2: the average closing price per category.

    SELECT Q.category, AVG(Q.final) FROM Q GROUP BY Q.category     -- Q: q4_max.py's output

Input: ``q4_max.py``'s output, keyed by ``category``. Each record replaces one auction's maximum (``old``)
by a new one (``new``), so the sum and the count per category are enough state. Output: the category's
average after each change (an updating result: the last record per category is its value).
"""

import json


def process(change, context):
    key = str(change["category"])
    raw = context.get_state(key)
    total, count = json.loads(raw) if raw else (0, 0)
    total += change["new"] - (change["old"] or 0)
    count += change["old"] is None
    context.put_state(key, json.dumps([total, count]).encode())
    return {"category": change["category"], "avg": total / count, "sum": total, "count": count}
