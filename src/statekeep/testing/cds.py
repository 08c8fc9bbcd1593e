"""Class-data sharing archives for the Spark JVMs a test run starts (drivers, a cluster's daemons and executors).

A JVM given an archive maps the classes an earlier JVM loaded instead of reading, parsing and verifying them
again. Measured here: a local driver's start with a small job took 17 s of CPU (C1 only), and 8-9 s with the
archive. The archive is made once per machine (:func:`make_spark_archive`, run by ``scripts/test`` as
``python -m statekeep.testing.cds``) by a driver that runs a function once and dumps what it loaded at its exit
(``-XX:ArchiveClassesAtExit``), and kept in the jar cache (:func:`statekeep.jars.cache_dir`) under a key of the
JVM, PySpark's jars and the Kafka connector's. The JVM checks an archive against its classpath when it starts and
runs without it where they differ: a stale or missing archive costs speed, never a result.

    options = java_options()   # "-XX:SharedArchiveFile=... -Xlog:cds=off ..." or "" without an archive
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: the options every test JVM gets: C1 only (test queries are short; C2's compiler threads cost the two cores
#: more than its code gives back)
C1 = "-XX:TieredStopAtLevel=1"

#: the driver's job while its classes are archived: a function registered and run once, on a JSON input, through
#: the plan every statekeep query has (a shuffle, mapInArrow, a noop sink), then a batch groupBy
_WORKLOAD = """
import json, os, sys, tempfile
from statekeep.functions.config.service import FunctionService
from statekeep.functions.driver.session import spark_session
from statekeep.functions.driver.spark import run_registered

work = tempfile.mkdtemp(prefix="statekeep-cds-")
os.makedirs(f"{work}/in")
with open(f"{work}/in/part-0.jsonl", "w") as f:
    f.write("".join(json.dumps({"word": f"w{i % 7}"}) + "\\n" for i in range(100)))
spark = spark_session("local[2,4]")
url = f"local://{work}/store"
code = b"def process(input, context):\\n    context.incr_counter(input['word'], 1)\\n    return input\\n"
with FunctionService.open(url) as service:
    service.registry.create({"tenant": "public", "namespace": "default", "name": "cds", "inputs": [f"{work}/in"],
                             "keyField": "word", "parallelism": 2, "output": f"{work}/out"}, code)
    run_registered(service, url, "public", "default", "cds", checkpoint_root=f"{work}/ckpt", once=True,
                   spark=spark).await_termination()
spark.range(100).selectExpr("id % 3 as k").groupBy("k").count().collect()
spark.stop()
"""


def _spark_key() -> str | None:
    """A key of what the archive depends on (the JVM, PySpark's jars, the Kafka connector's jars), or None
    without PySpark or Java."""
    try:
        import pyspark
    except ImportError:
        return None
    found = shutil.which("java")
    if found is None:
        return None
    java = Path(found).resolve()  # the JDK's own directory names its version; no JVM started to ask it
    from statekeep.functions.driver.session import kafka_connector_jars

    jars = Path(pyspark.__file__).parent / "jars"
    listed = sorted((p.name, p.stat().st_size) for p in jars.glob("*.jar"))
    text = repr((str(java), java.stat().st_mtime_ns, str(jars), listed, kafka_connector_jars(), pyspark.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _spark_path() -> Path | None:
    from statekeep import jars

    key = _spark_key()
    return None if key is None else jars.cache_dir() / "cds" / f"spark-{key}.jsa"


def spark_archive() -> Path | None:
    """The Spark archive for this machine's JVM and jars, if it was made."""
    path = _spark_path()
    return path if path is not None and path.exists() else None


def java_options(archive: Path | None = None) -> str:
    """The JVM options that map ``archive`` (default :func:`spark_archive`), with the JVM's notes about it off
    (they go to stdout, which some tests read); "" without one."""
    archive = archive or spark_archive()
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xlog:cds+dynamic=off" if archive else ""


def make_spark_archive(timeout: float = 600) -> Path | None:
    """The Spark archive, made now if there is none (a driver running ``_WORKLOAD``, about 20 s); None without
    PySpark or Java. A failed dump leaves no archive and raises :class:`RuntimeError` with the driver's output.
    Two runs at once each write a file of their own and rename it into place: the last one wins."""
    path = _spark_path()
    if path is None or path.exists():
        return path
    from statekeep.functions.driver.sparkpython import spark_python

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=path.parent)) / path.name
    options = f"{C1} -XX:ArchiveClassesAtExit={partial}"
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--driver-java-options '{options}' pyspark-shell",
           "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", spark_python()), "SPARK_LOCAL_IP": "127.0.0.1"}
    try:
        done = subprocess.run([sys.executable, "-c", _WORKLOAD], env=env, capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0 or not partial.exists():
            raise RuntimeError(f"making the Spark class-data archive failed ({done.returncode}):\n"
                               f"{done.stdout[-2000:]}{done.stderr[-3000:]}")
        partial.rename(path)
    finally:
        partial.unlink(missing_ok=True)
        partial.parent.rmdir()
    return path


if __name__ == "__main__":
    made = make_spark_archive()
    print(f"statekeep: Spark class-data archive: {made or 'none (no PySpark or Java here)'}")
