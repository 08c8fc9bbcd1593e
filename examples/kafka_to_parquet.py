"""statekeep in your own Spark query: clicks from a Kafka topic, a per-user count kept by statekeep, Parquet out.

    python examples/kafka_to_parquet.py --bootstrap-servers HOST:9092 --topic clicks \\
        --out /data/clicks --checkpoint /data/clicks-ck [--store local:///data/statekeep]

Each Kafka message is a click: its key the user, its value JSON ``{"page": ...}``. The function counts each user's
clicks in statekeep's state (exactly once, readable with ``statekeep functions querystate --name clicks --key U``
and over REST while the query runs) and gives one row per click. Spark's Kafka source is a separate package:
``statekeep jars install`` resolves it from Maven Central, and the Spark session statekeep creates
(``spark_session``) has it on its classpath (or run this with ``spark-submit --packages
org.apache.spark:spark-sql-kafka-0-10_2.13:<your Spark version>``). The source starts at the latest offsets: the
clicks produced after the query started. statekeep's tests run this file as it is against a real Kafka broker
(tests/test_kafka_functions.py). For exactly-once output into Kafka instead of Parquet, write to
``format("statekeep-kafka")`` (docs/guides/kafka.md).
"""

from __future__ import annotations

import argparse
import json

from statekeep.spark import apply_function

OUTPUT = "user string, page string, clicks long, at long"


def count_clicks(value, context):
    """One click: ``value`` is the message's payload (a str, through the default serde), the user its key."""
    user = context.get_message_key()
    clicks = context.incr_counter(user, 1)
    return {"user": user, "page": json.loads(value)["page"], "clicks": clicks, "at": context.get_message_eventtime()}


def pipeline(events, store: str):
    """Kafka's rows (``key``, ``value``, ``timestamp``, ...) in, one row per click out: any sink takes it."""
    return apply_function(events, count_clicks, name="public/default/clicks", key="key", store=store,
                          output_schema=OUTPUT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True, help="the Parquet directory")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument("--store", default="local://./.statekeep-data", help="statekeep's store URL")
    args = parser.parse_args()

    from statekeep.functions.driver.session import spark_session

    spark = spark_session(app_name="clicks")
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap_servers)
              .option("subscribe", args.topic).option("includeHeaders", "true").load())
    query = (pipeline(events, args.store).writeStream.format("parquet").option("path", args.out)
             .option("checkpointLocation", args.checkpoint).start())
    query.awaitTermination()


if __name__ == "__main__":
    main()
