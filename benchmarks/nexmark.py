"""Nexmark on statekeep against Spark SQL Structured Streaming, in one run on ``local[2]``.

For each query (``--queries``, default all 18 of examples/nexmark/), the same generated events
(benchmarks/nexmark_model/generator.py, ``--events`` of them, ``--per-file`` per micro-batch) go through:

- ``record local``: the statekeep functions, per record, state on ``local://`` (the embedded default);
- ``record state-dir``: the same with partition-owned state (``--state-dir``, a local directory);
- ``batch local``: the ``process_batch`` variant, where there is one;
- ``window local``: the ``windowConfig`` variant (windows in the aggregate form instead of timers), where there is
  one (q5, q7, q11), per record;
- ``operator local``: the per-record functions through the DataFrame operator (``statekeep.spark.apply_function``)
  on streaming DataFrames of the same files, each step's rows to Spark's text file sink, read by the next step;
- ``spark sql``: the query's reference SQL adapted to Spark (``window``, ``session_window``,
  ``withWatermark``, chained windowed aggregations in append mode, update mode for updating aggregates),
  run with ``availableNow`` from the same files.

Every row starts with the query's name and says ``exact yes`` or ``exact no``: its output against the
plain-Python reference (benchmarks/nexmark_model/reference.py) on the same events; a Spark SQL row says
``exact n/a`` and ``cannot run`` with the AnalysisException Spark raised when it refused to start the query.
Throughput is the input events over the run's seconds (all steps of a multi-step query added); per core is
that over 2; the ratio is against Spark SQL's row; Flink 1.13's published per-core figure (the nexmark
suite's README: 3 x 8 cores, RocksDB, exactly-once checkpoints) is printed beside it as an anchor, not a
same-run baseline.

    python benchmarks/nexmark.py [--queries q0,q5,...] [--events 200000] [--per-file 10000]
"""

from __future__ import annotations

import argparse
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from nexmark_model import generator, pipelines, reference  # noqa: E402

CORES = 2
STATELESS = ("q0", "q1", "q2", "q14", "q21", "q22")
#: Flink 1.13 events/s per core, nexmark's README (3 x 8 cores, RocksDB, exactly-once); None: not given
FLINK = {"q0": 155.0e3, "q4": 34.3e3, "q5": 22.1e3, "q7": 12.3e3, "q8": 146.1e3, "q9": 14.2e3, "q11": 39.7e3,
         "q12": 75.7e3, "q15": 72.4e3, "q17": 116.8e3, "q18": 53.7e3}


class SparkRefuses(Exception):
    """Spark streaming refused the query when it started (its AnalysisException): the table says so."""


# ---- Spark SQL Structured Streaming versions ----

def _spark_query(spark: Any, query: str, data: Path, side: Path) -> tuple[Any, str]:
    """``query`` as a streaming DataFrame and its output mode."""
    from pyspark.sql import functions as F

    def stream(kind: str) -> Any:
        schema = spark.read.json(str(data / kind / "part-000000.jsonl")).schema
        return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(data / kind))
                .withColumn("ts", F.timestamp_millis("dateTime")))

    def combined() -> Any:
        schema = spark.read.json(str(data / "events" / "part-000000.jsonl")).schema
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(data / "events"))

    bid = stream("bid")
    price = F.col("price") * F.lit(0.908)
    day = F.date_from_unix_date(F.floor(F.col("dateTime") / 86_400_000).cast("int")).cast("string")  # UTC, as text
    if query == "q0":
        return bid.select("auction", "bidder", "price", "dateTime", "extra"), "append"
    if query == "q1":
        return bid.select("auction", "bidder", price.alias("price"), "dateTime", "extra"), "append"
    if query == "q2":
        return bid.where(F.col("auction") % 123 == 0).select("auction", "price"), "append"
    if query == "q3":
        people = stream("person").where(F.col("state").isin("OR", "ID", "CA")).select(
            F.col("id").alias("pid"), "name", "city", "state")
        auctions = stream("auction").where(F.col("category") == 10).select("id", "seller")
        return people.join(auctions, F.col("pid") == F.col("seller")).select("name", "city", "state", "id"), "append"
    if query == "q4":
        # the reference SQL as written: a stream-stream join, the max per auction, the average per category
        auctions = stream("auction").select("id", "category", F.col("dateTime").alias("start"), "expires")
        return (auctions.join(bid, (F.col("id") == F.col("auction")) & F.col("dateTime").between(
            F.col("start"), F.col("expires"))).groupBy("id", "category").agg(F.max("price").alias("final"))
            .groupBy("category").agg(F.sum("final").alias("sum"), F.count("*").alias("count"))), "update"
    if query == "q5":
        # two chained windowed aggregations in append mode (Spark 3.4+): the count per (window, auction),
        # then per window (its window_time) the auctions with the highest count
        counts = (bid.withWatermark("ts", "0 seconds").groupBy(F.window("ts", "10 seconds", "2 seconds"), "auction")
                  .count())
        best = counts.groupBy(F.window_time("window").alias("wt")).agg(
            F.max("count").alias("num"), F.collect_list(F.struct("count", "auction")).alias("all"))
        hot = F.transform(F.filter("all", lambda c: c["count"] == F.col("num")), lambda c: c["auction"])
        return best.select((F.unix_millis("wt") + 1 - 10_000).alias("start"), "num", hot.alias("auctions")), "append"
    if query == "q8":
        # one source (persons and auctions of the combined stream), so one watermark over both; each side's
        # windowed GROUP BY emits when its window closes, and the two are joined on (id, window)
        events = combined().where(F.col("event_type") != 2)
        events = events.withColumn("ts", F.timestamp_millis(F.coalesce("person.dateTime", "auction.dateTime")))
        events = events.withWatermark("ts", "0 seconds")
        people = (events.where(F.col("event_type") == 0)
                  .groupBy(F.col("person.id").alias("id"), F.col("person.name").alias("name"),
                           F.window("ts", "10 seconds").alias("pw")).count())
        sellers = (events.where(F.col("event_type") == 1)
                   .groupBy(F.col("auction.seller").alias("seller"), F.window("ts", "10 seconds").alias("aw")).count())
        return people.join(sellers, (F.col("id") == F.col("seller")) & (F.col("pw") == F.col("aw"))).select(
            "id", "name", F.unix_millis("pw.start").alias("start")), "append"
    if query == "q9":
        # ROW_NUMBER has no streaming form, and a stream-stream join feeds no aggregation in update mode; so the
        # join is a GROUP BY auction id over auctions and bids together, the bids kept in a list, and the
        # winner is the highest (price, earliest time) among the bids placed while the auction was open
        events = combined().where(F.col("event_type") != 0)
        per_auction = events.groupBy(F.coalesce("auction.id", "bid.auction").alias("id")).agg(
            F.max("auction.dateTime").alias("opened"), F.max("auction.expires").alias("expires"),
            F.collect_list(F.struct(F.col("bid.price").alias("price"), (-F.col("bid.dateTime")).alias("late"),
                                    F.col("bid.bidder").alias("bidder"))).alias("bids"))
        open_bids = F.filter("bids", lambda b: (-b["late"] >= F.col("opened")) & (-b["late"] <= F.col("expires")))
        won = per_auction.select("id", F.array_max(open_bids).alias("win")).where(F.col("win").isNotNull())
        return won.select("id", "win.price", (-F.col("win.late")).alias("bidDateTime"), "win.bidder"), "update"
    if query == "q15":
        # COUNT(DISTINCT) has no streaming form: the size of collect_set (which skips nulls) counts the same
        p = F.col("price")
        ranks = {"total": F.lit(True), "rank1": p < 10_000, "rank2": (p >= 10_000) & (p < 1_000_000),
                 "rank3": p >= 1_000_000}
        aggs = [F.count(F.when(cond, 1)).alias(f"{rank}_bids") for rank, cond in ranks.items()]
        aggs += [F.size(F.collect_set(F.when(cond, F.col(what)))).alias(f"{rank}_{what}s")
                 for what in ("bidder", "auction") for rank, cond in ranks.items()]
        return bid.groupBy(day.alias("day")).agg(*aggs), "update"
    if query == "q7":
        windows = (bid.withWatermark("ts", "0 seconds").groupBy(F.window("ts", "10 seconds"))
                   .agg(F.max("price").alias("price"),
                        F.collect_list(F.struct("price", "auction", "bidder", "dateTime")).alias("all")))
        top = F.filter("all", lambda b: b["price"] == F.col("price"))
        return windows.select(F.unix_millis(F.col("window.start")).alias("start"), "price", F.transform(
            top, lambda b: F.array(b["auction"], b["bidder"], b["dateTime"])).alias("bids")), "append"
    if query == "q11":
        sessions = (bid.withWatermark("ts", "0 seconds").groupBy("bidder", F.session_window("ts", "10 seconds"))
                    .agg(F.count("*").alias("bid_count")))
        return sessions.select("bidder", "bid_count", F.unix_millis("session_window.start").alias("start"),
                               F.unix_millis("session_window.end").alias("end")), "append"
    if query == "q12":
        counts = bid.groupBy("bidder", F.window(F.current_timestamp(), "10 seconds")).agg(
            F.count("*").alias("bid_count"))
        return counts.select("bidder", "bid_count", F.unix_millis("window.start").alias("start")), "update"
    if query == "q13":
        values = spark.read.csv(str(side), schema="key long, value string")
        return bid.join(F.broadcast(values), F.col("auction") % 10000 == F.col("key")).select(
            "auction", "bidder", "price", "dateTime", "value"), "append"
    if query == "q14":
        hour = F.hour("ts")
        kind = (F.when((hour >= 8) & (hour <= 18), "dayTime").when((hour <= 6) | (hour >= 20), "nightTime")
                .otherwise("otherTime"))
        return bid.where((price > 1_000_000) & (price < 50_000_000)).select(
            "auction", "bidder", price.alias("price"), kind.alias("bidTimeType"), "dateTime", "extra",
            (F.length("extra") - F.length(F.replace("extra", F.lit("c"), F.lit("")))).alias("c_counts")), "append"
    if query == "q17":
        p = F.col("price")
        stats = bid.groupBy("auction", day.alias("day")).agg(
            F.count("*").alias("total_bids"), F.count(F.when(p < 10_000, 1)).alias("rank1_bids"),
            F.count(F.when((p >= 10_000) & (p < 1_000_000), 1)).alias("rank2_bids"),
            F.count(F.when(p >= 1_000_000, 1)).alias("rank3_bids"), F.min(p).alias("min_price"),
            F.max(p).alias("max_price"), F.sum(p).alias("sum_price"))
        return stats.withColumn("avg_price", F.floor(F.col("sum_price") / F.col("total_bids"))), "update"
    if query == "q18":
        return bid.groupBy("bidder", "auction").agg(F.max("dateTime").alias("dateTime")), "update"
    if query == "q21":
        hot = F.lower("channel")
        found = F.regexp_extract("url", "(&|^)channel_id=([^&]*)", 2)
        channel_id = (F.when(hot == "apple", "0").when(hot == "google", "1").when(hot == "facebook", "2")
                      .when(hot == "baidu", "3").otherwise(found))
        return bid.where(hot.isin("apple", "google", "facebook", "baidu") | F.col("url").rlike(
            "(&|^)channel_id=")).select("auction", "bidder", "price", "channel", channel_id.alias("channel_id")), \
            "append"
    if query == "q22":
        parts = F.split("url", "/")
        return bid.select("auction", "bidder", "price", "channel", parts[3].alias("dir1"), parts[4].alias("dir2"),
                          parts[5].alias("dir3")), "append"
    raise KeyError(query)


def run_spark(spark: Any, query: str, data: Path, work: Path, side: Path) -> tuple[float, list[Any]]:
    """Run the Spark SQL version to the end of its input; its seconds and output rows (in batch order)."""
    import json

    frame, mode = _spark_query(spark, query, data, side)
    out = work / "spark-out"

    def write(batch: Any, batch_id: int) -> None:
        batch.write.mode("overwrite").json(str(out / f"batch-{batch_id:08d}"))

    from pyspark.errors import AnalysisException

    began = time.perf_counter()
    try:
        running = (frame.writeStream.outputMode(mode).foreachBatch(write)
                   .option("checkpointLocation", str(work / "spark-checkpoint")).trigger(availableNow=True).start())
    except AnalysisException as error:  # Spark's checks of what streaming supports run at start
        raise SparkRefuses(f"AnalysisException: {str(error).splitlines()[0][:200]}") from None
    running.awaitTermination()
    seconds = time.perf_counter() - began
    rows = [json.loads(line) for part in sorted(out.glob("batch-*/part-*"))
            for line in part.read_text().splitlines() if line]
    return seconds, rows


# ---- the table ----

def _fmt(rate: float) -> str:
    return f"{rate / 1000:,.1f}k"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", default=",".join(pipelines.QUERIES))
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--per-file", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warm-events", type=int, default=20_000,
                        help="events of the warm-up runs (q0 and q17, each engine) before any measured one")
    args = parser.parse_args(argv)
    queries = [q.strip() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in queries if q not in pipelines.PIPELINES]
    if unknown:
        parser.error(f"unknown queries {unknown}; known: {','.join(pipelines.QUERIES)}")

    from statekeep.functions.driver.session import spark_session

    root = Path(tempfile.mkdtemp(prefix="nexmark-"))
    try:
        config = generator.NexmarkConfig(seed=args.seed, num_events=args.events)
        began = time.perf_counter()
        generator.write_jsonl(config, root / "data", args.per_file, per_stream=True)
        events = list(generator.events(config))
        side_values = reference.side_input()
        side = root / "data" / "side.csv"
        side.write_text("".join(f"{k},{v}\n" for k, v in side_values.items()))
        print(f"# {args.events} events ({args.per_file} per micro-batch) generated in "
              f"{time.perf_counter() - began:.1f} s; local[{CORES}]")
        spark = spark_session(f"local[{CORES}]", conf={"spark.sql.session.timeZone": "UTC"})
        # warm-up: a stateless and a stateful query of each engine and statekeep variant, so the first query
        # measured does not pay for the JVM's first compilations (after 2,000 events of q0 only, Spark SQL's q15 took
        # 13.7 s measured first in one run, 8.3 s measured second in another), nor the first process_batch run for
        # its Python workers' first imports (pyarrow's compute imports pandas, 0.3-0.4 s a worker)
        warm = root / "warm"
        generator.write_jsonl(generator.NexmarkConfig(seed=1, num_events=args.warm_events), warm / "data",
                              max(1, args.warm_events // 2), per_stream=True)
        for query in ("q0", "q17"):
            for batch in (False, True):
                pipelines.run(spark, query, warm / "data", warm / f"sk-{query}-{batch}", batch=batch)
            run_spark(spark, query, warm / "data", warm / f"spark-{query}", side)

        print(f"{'query':<6}{'variant':<18}{'exact':<10}{'seconds':>9}{'events/s':>11}{'per core':>10}"
              f"{'vs Spark':>9}{'Flink/core':>11}  note")
        ratios: dict[str, list[tuple[float, float]]] = {}
        operator_rates: dict[str, dict[str, float]] = {}
        best: dict[str, tuple[float, str]] = {}  # query -> its best exact variant's ratio to Spark SQL, and name
        for query in queries:
            expected = reference.expected(query, events, side_values)
            runs: list[tuple[str, Callable[[Path], tuple[float, list[Any]]]]] = []
            runs.append(("spark sql", lambda w, q=query: run_spark(spark, q, root / "data", w, side)))
            runs.append(("record local", lambda w, q=query: pipelines.run(
                spark, q, root / "data", w, side_input=side)))
            runs.append(("record state-dir", lambda w, q=query: pipelines.run(
                spark, q, root / "data", w, state_dir=True, side_input=side)))
            runs.append(("operator local", lambda w, q=query: pipelines.run_operator(
                spark, q, root / "data", w, side_input=side)))
            if pipelines.PIPELINES[query].batch:
                runs.append(("batch local", lambda w, q=query: pipelines.run(
                    spark, q, root / "data", w, batch=True, side_input=side)))
            if pipelines.PIPELINES[query].windowed:
                runs.append(("window local", lambda w, q=query: pipelines.run(
                    spark, q, root / "data", w, windowed=True, side_input=side)))
            spark_rate: float | None = None
            flink = FLINK.get(query)
            for variant, run in runs:
                work = root / f"{query}-{variant.replace(' ', '-')}"
                work.mkdir()
                note = ""
                try:
                    seconds, outputs = run(work)
                    exact = reference.result(query, outputs) == expected
                except SparkRefuses as error:  # not a result, so neither exact nor not
                    print(f"{query:<6}{variant:<18}{'exact n/a':<10}{'-':>9}{'-':>11}{'-':>10}{'-':>9}"
                          f"{_fmt(flink) if flink else '-':>11}  cannot run: {error}", flush=True)
                    continue
                except Exception as error:  # a failing run is a row saying so, not the end of the table
                    seconds, exact, note = math.nan, False, f"failed: {type(error).__name__}: {str(error)[:120]}"
                rate = args.events / seconds if seconds == seconds else math.nan
                if exact and variant in ("operator local", "record local"):
                    operator_rates.setdefault(query, {})[variant] = rate
                if variant == "spark sql":
                    spark_rate = rate if exact else None
                    note = note or ("adapted: " + ADAPTED[query] if query in ADAPTED else "")
                else:
                    ratios.setdefault(variant, [])
                vs = rate / spark_rate if spark_rate and rate == rate else None
                if vs is not None and variant != "spark sql":
                    ratios[variant].append((vs, 1.0 if query in STATELESS else 0.0))
                    if exact:
                        best[query] = max(best.get(query, (0.0, "")), (vs, variant))
                print(f"{query:<6}{variant:<18}{'exact yes' if exact else 'exact no':<10}{seconds:>9.1f}"
                      f"{_fmt(rate):>11}{_fmt(rate / CORES):>10}{f'{vs:.2f}x' if vs else '-':>9}"
                      f"{_fmt(flink) if flink else '-':>11}  {note}", flush=True)
                shutil.rmtree(work, ignore_errors=True)
        for query, rates in operator_rates.items():
            if "operator local" in rates and "record local" in rates:
                print(f"# {query}: operator local vs record local (the runner): "
                      f"{rates['operator local'] / rates['record local']:.2f}x")
        for variant, values in ratios.items():
            for label, stateless in (("stateful", 0.0), ("stateless", 1.0)):
                chosen = [v for v, s in values if s == stateless]
                if chosen:
                    mean = math.exp(sum(math.log(v) for v in chosen) / len(chosen))
                    print(f"# geometric mean vs Spark SQL, {variant}, {label} queries Spark runs: {mean:.2f}x "
                          f"over {len(chosen)}")
        stateful_best = {q: b for q, b in best.items() if q not in STATELESS}
        if stateful_best:
            print("# best variant vs Spark SQL, stateful queries: " + ", ".join(
                f"{q} {vs:.2f}x ({variant})" for q, (vs, variant) in stateful_best.items()))
            mean = math.exp(sum(math.log(vs) for vs, _ in stateful_best.values()) / len(stateful_best))
            print(f"# geometric mean vs Spark SQL, best variant, stateful queries Spark runs: {mean:.2f}x "
                  f"over {len(stateful_best)}")
        spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


ADAPTED = {
    "q5": "chained windowed aggregations (append), the hot auctions by collect_list instead of a join back",
    "q8": "one source for both sides (one watermark), windowed GROUP BYs joined in append mode",
    "q9": "GROUP BY auction over auctions and bids (collect_list) instead of the join and ROW_NUMBER, update mode",
    "q15": "size(collect_set) for COUNT(DISTINCT), update mode",
    "q7": "collect_list of the window's bids, filtered to the max price",
    "q12": "window(current_timestamp()), update mode",
    "q17": "update mode",
    "q18": "max(dateTime) per (bidder, auction), update mode",
    "q21": "rlike for REGEXP_EXTRACT is not null",
}

if __name__ == "__main__":
    sys.exit(main())
