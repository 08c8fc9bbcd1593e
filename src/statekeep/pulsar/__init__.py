"""Topics on a real Apache Pulsar broker (not statekeep's file topics): a Spark streaming source whose offsets
are Pulsar message ids (:mod:`statekeep.pulsar.source`) and an effectively-once sink (:mod:`statekeep.pulsar.sink`),
one data source, ``statekeep-pulsar``::

    from statekeep.pulsar import register
    register(spark)
    spark.readStream.format("statekeep-pulsar").option("serviceUrl", "pulsar://HOST:6650") \\
        .option("adminUrl", "http://HOST:8080").option("topic", "persistent://public/default/t").load()

Needs the ``pulsar`` extra (``pulsar-client``) and PySpark (the ``spark`` extra).
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``statekeep-pulsar`` data source with ``spark`` (a SparkSession)."""
    from statekeep.pulsar.datasource import StatekeepPulsarSource

    spark.dataSource.register(StatekeepPulsarSource)
