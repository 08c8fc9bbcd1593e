"""Word count, vectorized: one call per partition of each micro-batch instead of one per record.

    statekeep functions localrun --name wcb --py examples/wordcount/wordcount_batch.py \\
        --inputs examples/wordcount/input --key-field word --once --data-dir ./data

``records`` is a pyarrow.Table of the partition's records (one column per JSON field). The counting
happens in Arrow (C++); one bulk call adds each distinct word's count to its counter, with the same
exactly-once guarantee as the per-record ``wordcount.py``. The output: each distinct word of the
batch with its count after the batch.
"""

import pyarrow as pa
import pyarrow.compute as pc


def process_batch(records, context):
    if "word" not in records.column_names:
        return None
    counts = pc.value_counts(records["word"].drop_null())  # distinct words and how often each occurs
    words = counts.field("values")
    context.incr_counters(words, counts.field("counts"))
    return pa.table({"word": words, "count": pa.array(context.get_counters(words), pa.int64())})
