"""Topics on a real Apache Pulsar broker (not statekeep's file topics): a Spark streaming source whose offsets
are Pulsar message ids and an effectively-once sink, one data source, ``statekeep-pulsar``::

    from statekeep.pulsar import register
    register(spark)
    spark.readStream.format("statekeep-pulsar").option("serviceUrl", "pulsar://HOST:6650") \\
        .option("adminUrl", "http://HOST:8080").option("topic", "persistent://public/default/t").load()

Needs the ``pulsar`` extra (``pulsar-client``) and PySpark (the ``spark`` extra). The code lives with the function
runner's, which reads and writes the same topics (``pulsar://`` names): the reader in
:mod:`statekeep.functions.driver.pulsar_source`, the writer in :mod:`statekeep.functions.driver.pulsar_sink`, the
client and its effectively-once send in :mod:`statekeep.functions.messaging.pulsarclient`. A session made by
:func:`statekeep.spark.spark_session` has the source registered already.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the ``statekeep-pulsar`` data source with ``spark`` (a SparkSession)."""
    from statekeep.functions.driver.pulsar_source import StatekeepPulsarSource

    spark.dataSource.register(StatekeepPulsarSource)
