"""The SparkSession statekeep's functions run in: :func:`spark_session` and the settings it adds
(:func:`latency_conf`, :data:`CHECKPOINT_MANAGER`)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from statekeep.functions.driver.sparkpython import spark_python

if TYPE_CHECKING:  # PySpark is optional: imported where used
    from pyspark.sql import SparkSession


def latency_conf(pyspark_version: str) -> dict[str, str]:
    """The Spark settings :func:`spark_session` adds to a session it creates to cut a micro-batch's latency
    (measured with benchmarks/latency.py): Python workers reached over a unix domain socket (PySpark 4.1 and
    later, where the platform has them: about 40 ms less per task than a TCP connection), and a micro-batch's
    new files listed on the driver instead of by a Spark job of their own, up to 1024 files (Spark's default
    threshold is 32, which a batch at 100 messages/s passes). An idle query looks for new input every 50 ms,
    not Spark's 10 ms: with the default trigger (as soon as possible) 10 ms cost a core's half per idle function."""
    conf = {"spark.sql.sources.parallelPartitionDiscovery.threshold": "1024",
            "spark.sql.streaming.pollingDelay": "50ms"}
    major, minor = (int(p) for p in re.findall(r"\d+", pyspark_version)[:2])
    if hasattr(socket, "AF_UNIX") and (major, minor) >= (4, 1):
        conf["spark.python.unix.domain.socket.enabled"] = "true"
    return conf


#: Spark's checkpoint manager on Hadoop's FileSystem API: it writes a query's logs (offsets, commits, a file
#: source's) without the ``chmod`` and ``readlink`` processes the default FileContext one forks for each log file
#: where Hadoop has no native library, as in PySpark's package (about 25 ms a log file, 3 a micro-batch, here).
#: Its rename checks before it renames: two drivers writing one checkpoint could race, which the function's
#: run lock already excludes.
CHECKPOINT_MANAGER = ("spark.sql.streaming.checkpointFileManagerClass",
                      "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")


def kafka_connector_jars() -> list[str]:
    """The jars of Spark's Kafka connector as ``statekeep jars install`` resolved them (``[]`` if it did not)."""
    from statekeep import jars
    from statekeep.errors import MissingDependencyError

    try:
        return jars.spark_jars()
    except MissingDependencyError:
        return []


def spark_session(master: str = "local[*,4]", app_name: str = "statekeep", shuffle_partitions: int = 2,
                  conf: Mapping[str, str] | None = None) -> SparkSession:
    """A SparkSession set up for statekeep (shared: Spark allows one per driver process).
    The default master retries a failed task up to 4 times (``local[*,4]``), so a killed Python
    worker costs a retry, not the query. A session this call creates also gets :func:`latency_conf`,
    :data:`CHECKPOINT_MANAGER` (where its Spark has that class), and writes local files (its checkpoints) without
    Hadoop's ``.crc`` side files, which Spark does not need (a file with one is still verified when read).
    ``conf``: more Spark settings (e.g. ``spark.cores.max`` when several drivers share a cluster),
    applied last, so they win over statekeep's own (``spark.python.unix.domain.socket.enabled=false``
    turns the socket off); they take effect only if this call creates the session."""
    os.environ.setdefault("PYSPARK_PYTHON", spark_python())  # see statekeep.functions.driver.sparkpython
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    try:
        from pyspark.sql import SparkSession
    except ImportError as e:
        from statekeep.errors import MissingDependencyError

        raise MissingDependencyError("running functions needs PySpark: pip install 'statekeep[spark]'") from e
    from pyspark import SparkContext, __version__

    settings = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": str(shuffle_partitions), "spark.sql.streaming.schemaInference": "true",
                "spark.sql.execution.arrow.maxRecordsPerBatch": "20000"}
    creating = SparkContext._active_spark_context is None
    if creating:  # the latency settings, unless in conf
        settings.update(latency_conf(__version__))
        connector = kafka_connector_jars()
        if connector:  # Spark's Kafka source and sink, where `statekeep jars install` resolved them
            given = (conf or {}).get("spark.jars")
            settings["spark.jars"] = ",".join([*connector, *([given] if given else [])])
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**settings, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    key, manager = CHECKPOINT_MANAGER
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session's gateway
    if creating and key not in (conf or {}) and jvm.org.apache.spark.util.Utils.classIsLoadable(manager):
        spark.conf.set(key, manager)
    if creating:  # no .crc side file per local file written (each checkpoint log file's: about 5 ms a micro-batch)
        jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration()).setWriteChecksum(False)
    spark.sparkContext.setLogLevel("ERROR")
    from statekeep.functions.driver.sources import register_sources

    register_sources(spark)
    return spark


#: Spark's log in a file of its own (log4j2's properties): warnings and errors, with their stack traces
_FILE_LOG = """rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


@contextlib.contextmanager
def stderr_into(path: str) -> Iterator[None]:
    """While the block runs, this process's standard error (file descriptor 2) is the file ``path`` (appended): a
    process started meanwhile keeps it as its own. Started in it, Spark's JVM writes its start (module warnings,
    log4j's banner) and anything else on its standard error (its Python workers' too, in local mode) to the file,
    not to the console. Python's ``sys.stderr`` is back on the console after the block."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def log_to_file(spark: SparkSession, path: str) -> None:
    """From now on, ``spark``'s driver-side log (its executors' too, in local mode: task failures with their
    Python tracebacks, a stopping session's listener errors) goes to the file ``path``, appended, instead of
    the console: a command line then shows one line per error and names the file."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    config = os.path.abspath(path) + ".log4j2.properties"
    with open(config, "w") as f:
        f.write(_FILE_LOG.format(path=os.path.abspath(path).replace("\\", "/")))
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a live session's gateway
    jvm.org.apache.logging.log4j.LogManager.getContext(False).setConfigLocation(jvm.java.io.File(config).toURI())

