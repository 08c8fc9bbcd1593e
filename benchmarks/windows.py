"""Per-key tumbling one-minute event-time counts with a watermark, in one run:

- ``statekeep, per record``: a windowed function (``windowConfig`` 60 s tumbling, ``maxLagMs``), its
  ``process(records, context)`` called once per (key, window) with the window's records;
- ``statekeep, per record, aggregate``: the same windowed function in the aggregate form (``create_accumulator``,
  ``add_to_accumulator``, ``get_result``): each window keeps a count instead of its records;
- ``statekeep, process_batch``: the same counts by a ``process_batch`` function (``incr_counters`` of
  ``key|window start``, an event-time timer per open window, ``on_timer`` emitting the count);
- ``Spark groupBy(window)``: ``withWatermark`` + ``groupBy(window(t, "1 minute"), k).count()``, append mode
  (Spark's own JVM aggregation, the baseline);
- ``Spark transformWithStateInPandas``: a ``StatefulProcessor`` keeping counts per window in a MapState
  and emitting each at an event-time timer on the window's end (RocksDB state store);
- with ``--sessions``: ``statekeep`` session windows (``sessionGapMs``) against Spark's ``session_window``.

Every query reads the same JSON files (one micro-batch per file, ``maxFilesPerTrigger`` 1) with
``availableNow``/``--once`` on ``local[2]``; the windows every engine has closed (end <= the final
watermark minus one window) are checked equal. Rows: seconds and events per second; ratios against
the Spark rows. Targets: >= 5x transformWithStateInPandas, >= 0.5x Spark's groupBy(window).

    python benchmarks/windows.py [--events 1000000] [--keys 10000] [--files 10] [--sessions]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from statekeep.functions.config.service import FunctionService  # noqa: E402
from statekeep.functions.driver.session import spark_session  # noqa: E402
from statekeep.functions.driver.spark import run_registered  # noqa: E402

LENGTH, LAG = 60_000, 5_000
BASE = 1_700_000_000_000 // LENGTH * LENGTH

PER_RECORD = '''
def process(records, context):
    w = context.get_window()
    return {"k": w.key, "start": w.start, "count": len(records)}
'''

PER_RECORD_AGGREGATE = '''
def create_accumulator():
    return 0


def add_to_accumulator(count, record):
    return count + 1


def get_result(count):
    return count


def process(count, context):
    w = context.get_window()
    return {"k": w.key, "start": w.start, "count": count}
'''

BATCH = '''
import pyarrow as pa
import pyarrow.compute as pc

LENGTH = 60000


def process_batch(records, context):
    ts = records.column("ts")
    starts = pc.multiply(pc.divide(ts, LENGTH), LENGTH)
    watermark = context.get_current_watermark()
    if watermark is not None:  # late: the window has fired
        live = pc.greater(pc.add(starts, LENGTH), watermark)
        records, starts = records.filter(live), starts.filter(live)
    keys = records.column("k")
    names = pc.binary_join_element_wise(keys, pc.cast(starts, pa.string()), "|")
    context.incr_counters(names)
    for key, start in set(zip(keys.to_pylist(), starts.to_pylist())):
        context.register_timer(start + LENGTH, key=key)
    return None


def on_timer(key, ts, context):
    name = f"{key}|{ts - LENGTH}"
    count = context.get_counter(name)
    context.del_counter(name)
    return {"k": key, "start": ts - LENGTH, "count": count}
'''


def write_events(directory: Path, events: int, keys: int, files: int) -> int:
    """``events`` JSON lines over ``files`` files, event time rising with +-1.5 s of disorder (less than
    the lag: none is late); returns the largest event time."""
    directory.mkdir(parents=True)
    per = events // files
    span = files * LENGTH  # one minute of event time per file
    largest = 0
    for f in range(files):
        lines = []
        for i in range(f * per, (f + 1) * per):
            ts = BASE + i * span // events + (i * 7919) % 3000 - 1500
            largest = max(largest, ts)
            lines.append(f'{{"k":"key-{(i * 31) % keys}","ts":{ts}}}\n')
        path = directory / f"part-{f:04d}.json"
        path.write_text("".join(lines))
        os.utime(path, (1_000_000 + f, 1_000_000 + f))  # Spark's file source reads in this order
    return largest


def statekeep_run(spark: Any, inputs: Path, work: Path, code: str, window: dict[str, Any] | None,
                  name: str) -> tuple[float, dict[tuple[str, int], int]]:
    data, out = work / f"data-{name}", work / f"out-{name}"
    with FunctionService.open(f"local://{data}") as service:
        config = {"tenant": "bench", "namespace": "windows", "name": name, "inputs": [str(inputs)], "keyField": "k",
                  "output": str(out), "parallelism": 2,
                  "userConfig": {"eventTimeField": "ts", "maxLagMs": LAG,
                                 "inputOptions": {"maxFilesPerTrigger": "1"}}}
        if window is not None:
            config["windowConfig"] = window
        service.registry.create(config, code.encode())
        start = time.perf_counter()
        query = run_registered(service, f"local://{data}", "bench", "windows", name,
                               checkpoint_root=str(work / f"ck-{name}"), once=True, spark=spark)
        query.await_termination()
        elapsed = time.perf_counter() - start
        assert query.status()["error"] is None, query.status()["error"]
    counts = {}
    for path in out.glob("*.jsonl"):
        for line in path.read_text().splitlines():
            row = json.loads(line)
            counts[(row["k"], row["start"])] = row["count"]
    return elapsed, counts


def spark_source(spark: Any, inputs: Path) -> Any:
    from pyspark.sql import functions as F

    frame = (spark.readStream.schema("k string, ts long").option("maxFilesPerTrigger", 1).json(str(inputs)))
    return frame.withColumn("t", F.timestamp_millis("ts")).withWatermark("t", f"{LAG // 1000} seconds")


def spark_collect(query_frame: Any, work: Path, name: str) -> tuple[float, Any]:
    out = work / f"spark-{name}"
    start = time.perf_counter()
    query = (query_frame.writeStream.format("parquet").option("path", str(out)).outputMode("append")
             .option("checkpointLocation", str(work / f"ck-spark-{name}")).trigger(availableNow=True).start())
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    return elapsed, out


def spark_window(spark: Any, inputs: Path, work: Path) -> tuple[float, dict[tuple[str, int], int]]:
    from pyspark.sql import functions as F

    frame = (spark_source(spark, inputs).groupBy(F.window("t", "1 minute"), "k").count()
             .select("k", F.unix_millis(F.col("window.start")).alias("start"), "count"))
    elapsed, out = spark_collect(frame, work, "window")
    return elapsed, {(r.k, r.start): r["count"] for r in spark.read.parquet(str(out)).collect()}


class WindowCounts:
    """transformWithStateInPandas: counts per (key, window start) in a MapState, emitted by an
    event-time timer at the window's end (late rows, whose window the watermark passed, are dropped)."""

    @staticmethod
    def build() -> Any:
        import pandas as pd
        from pyspark.sql.streaming import StatefulProcessor

        class Processor(StatefulProcessor):
            def init(self, handle: Any) -> None:
                self.handle = handle
                self.counts = handle.getMapState("counts", "start long", "count long")

            def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
                watermark = timerValues.getCurrentWatermarkInMs()
                for frame in rows:
                    for start, n in ((frame["ts"] // LENGTH) * LENGTH).value_counts().items():
                        start = int(start)
                        if start + LENGTH <= watermark:
                            continue
                        current = self.counts.getValue((start,))
                        if current is None:
                            self.handle.registerTimer(start + LENGTH)
                        self.counts.updateValue((start,), ((current[0] if current else 0) + int(n),))
                return iter([])

            def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
                start = expiredTimerInfo.getExpiryTimeInMs() - LENGTH
                current = self.counts.getValue((start,))
                self.counts.removeKey((start,))
                yield pd.DataFrame({"k": [key[0]], "start": [start], "count": [current[0] if current else 0]})

            def close(self) -> None:
                pass

        return Processor()


def spark_tws(spark: Any, inputs: Path, work: Path) -> tuple[float, dict[tuple[str, int], int]]:
    frame = (spark_source(spark, inputs).groupBy("k")
             .transformWithStateInPandas(WindowCounts.build(), "k string, start long, count long", "Append",
                                         "EventTime"))
    elapsed, out = spark_collect(frame, work, "tws")
    return elapsed, {(r.k, r.start): r["count"] for r in spark.read.parquet(str(out)).collect()}


def spark_sessions(spark: Any, inputs: Path, work: Path, gap_ms: int) -> tuple[float, dict[tuple[str, int], int]]:
    from pyspark.sql import functions as F

    frame = (spark_source(spark, inputs).groupBy(F.session_window("t", f"{gap_ms // 1000} seconds"), "k").count()
             .select("k", F.unix_millis(F.col("session_window.start")).alias("start"), "count"))
    elapsed, out = spark_collect(frame, work, "sessions")
    return elapsed, {(r.k, r.start): r["count"] for r in spark.read.parquet(str(out)).collect()}


def closed(counts: dict[tuple[str, int], int], limit: int) -> dict[tuple[str, int], int]:
    return {k: v for k, v in counts.items() if k[1] + LENGTH <= limit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--sessions", action="store_true", help="also session windows against session_window")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="statekeep-windows-"))
    try:
        largest = write_events(work / "in", args.events, args.keys, args.files)
        spark = spark_session("local[2]", conf={
            "spark.sql.streaming.stateStore.providerClass":
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"})
        # warm every engine up (the JVM, its code generation, the Python workers) on the first file only,
        # so that no row pays for starting up because it runs first
        warm = work / "warm"
        warm.mkdir()
        shutil.copy(work / "in" / "part-0000.json", warm)
        warm_window = {"windowLengthDurationMs": LENGTH, "maxLagMs": LAG}
        statekeep_run(spark, warm, work, PER_RECORD, warm_window, "warm-rec")
        statekeep_run(spark, warm, work, PER_RECORD_AGGREGATE, warm_window, "warm-agg")
        statekeep_run(spark, warm, work, BATCH, None, "warm-batch")
        spark_window(spark, warm, work / "warm-window")
        spark_tws(spark, warm, work / "warm-tws")
        limit = largest - LAG - LENGTH  # windows every engine has closed by the end
        rows: list[tuple[str, float, dict[tuple[str, int], int]]] = []
        window = {"windowLengthDurationMs": LENGTH, "maxLagMs": LAG}
        rows.append(("statekeep, per record", *statekeep_run(spark, work / "in", work, PER_RECORD, window, "rec")))
        rows.append(("statekeep, per record, aggregate", *statekeep_run(spark, work / "in", work, PER_RECORD_AGGREGATE,
                                                                        window, "agg")))
        rows.append(("statekeep, process_batch", *statekeep_run(spark, work / "in", work, BATCH, None, "batch")))
        rows.append(("Spark groupBy(window)", *spark_window(spark, work / "in", work)))
        rows.append(("Spark transformWithStateInPandas", *spark_tws(spark, work / "in", work)))
        expected = closed(rows[3][2], limit)
        for name, _, counts in rows:
            print(f"{name}: {len(counts)} windows, {sum(counts.values())} events; closed: "
                  f"{len(closed(counts, limit))} windows, {sum(closed(counts, limit).values())} events")
        assert expected, "no closed windows to compare"
        for name, _, counts in rows:
            assert closed(counts, limit) == expected, f"{name}: windows differ from Spark's groupBy(window)"
        print(f"{args.events} events, {args.keys} keys, {args.files} micro-batches, 1-minute tumbling windows, "
              f"lag {LAG} ms; {len(expected)} closed windows equal in all {len(rows)}")
        print(f"{'engine':36} {'seconds':>8} {'events/s':>10} {'vs groupBy(window)':>19} {'vs TWS':>8}")
        jvm, tws = rows[3][1], rows[4][1]
        for name, seconds, _ in rows:
            print(f"{name:36} {seconds:8.1f} {args.events / seconds:10.0f} {jvm / seconds:18.2f}x "
                  f"{tws / seconds:7.2f}x")
        if args.sessions:
            gap = 30_000
            ours = statekeep_run(spark, work / "in", work, PER_RECORD, {"sessionGapMs": gap}, "sessions")
            theirs = spark_sessions(spark, work / "in", work, gap)
            limit = largest - gap - 2 * LENGTH
            assert {k: v for k, v in ours[1].items() if k[1] < limit} == {
                k: v for k, v in theirs[1].items() if k[1] < limit}, "sessions differ from Spark's session_window"
            print(f"{'statekeep sessions':36} {ours[0]:8.1f} {args.events / ours[0]:10.0f} "
                  f"{theirs[0] / ours[0]:18.2f}x (vs session_window, {theirs[0]:.1f} s)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
