"""``statekeep-spark-python``: the Python interpreter for Spark to start its Python processes with
(``PYSPARK_PYTHON``; :func:`statekeep.functions.driver.session.spark_session` makes it the default).

Spark puts its own copies of PySpark and py4j first on a Python process's ``PYTHONPATH``:
``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-*-src.zip``. A module imported from a zip archive without
bytecode is compiled from source at every import, so each Python process Spark starts (its worker daemon, the
process behind each streaming query's Python data source, such as a function's clock or a topic input, and its
planners) spends about 0.6 s more importing PySpark than it would from the installed package (0.9 s against
0.3 s here). Where ``SPARK_HOME`` is the installed PySpark package itself (a ``pip install pyspark``), those
zips are the same code as the package, so this launcher takes them off ``PYTHONPATH`` and runs this
interpreter with the same arguments; every other entry, and the zips of a Spark installed elsewhere, stay.

Spark's Python worker daemon (``-m pyspark.daemon``) runs through :func:`daemon`: PySpark's own daemon, except
that a forked worker whose socket the JVM has already closed exits quietly. When a SparkContext stops (every
``statekeep functions localrun --once`` at its end), Spark closes its idle workers' sockets; such a worker reads
the end of its input, tries to send back an error nobody reads, and PySpark's daemon (which kills a worker whose
final flush fails, ``spark.python.daemon.killWorkerOnFlushFailure``) printed that ``BrokenPipeError``'s traceback
on the console, where Spark copies its daemon's stderr.
"""

from __future__ import annotations

import os
import socket
import sys
from importlib.machinery import PathFinder


def without_own_zips(pythonpath: str, search: list[str] | None = None) -> str:
    """``pythonpath`` without the installed PySpark package's own zips, ``<package>/python/lib/pyspark.zip`` and
    ``<package>/python/lib/py4j-*.zip``, where ``<package>`` is the PySpark found on ``search`` (default
    ``sys.path``) leaving out ``pythonpath``'s zips. Unchanged unless both PySpark and py4j are installed there."""
    entries = pythonpath.split(os.pathsep) if pythonpath else []
    zips = {e for e in entries if e.endswith(".zip")}
    elsewhere = [p for p in (sys.path if search is None else search) if p not in zips]
    pyspark, py4j = PathFinder.find_spec("pyspark", elsewhere), PathFinder.find_spec("py4j", elsewhere)
    if pyspark is None or pyspark.origin is None or py4j is None:
        return pythonpath
    lib = os.path.join(os.path.dirname(pyspark.origin), "python", "lib")

    def own(entry: str) -> bool:
        directory, name = os.path.split(entry)
        return (os.path.realpath(directory) == os.path.realpath(lib)
                and (name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith(".zip"))))

    return os.pathsep.join(e for e in entries if not own(e))


def spark_python() -> str:
    """This launcher's path if it is installed beside this interpreter (as pip installs console scripts),
    else the interpreter itself."""
    launcher = os.path.join(os.path.dirname(sys.executable), "statekeep-spark-python")
    return launcher if os.access(launcher, os.X_OK) else sys.executable


#: what a function's Spark task imports, imported once by the worker daemon before it forks any worker, so each
#: worker starts with them (about 0.8 s of imports a worker here, paid at every new worker's first task). None of
#: them starts a thread, or imports pyarrow or pandas, at import (which PySpark avoids before a fork:
#: ``pyspark.daemon`` imports its worker module after it; tests/test_functions_spark.py checks it).
PRELOAD = ("pyspark.worker", "statekeep.functions.executor.task", "statekeep.functions.driver.plan")

#: how Spark starts its Python worker daemon (``spark.python.daemon.module``'s default), and what runs instead
DAEMON_ARGS = ("-m", "pyspark.daemon")
DAEMON_CODE = "from statekeep.functions.driver.sparkpython import daemon; daemon()"


def python_args(args: list[str]) -> list[str]:
    """The interpreter's arguments for the ones Spark passed: the same, but PySpark's daemon is run through
    :func:`daemon`. Spark's own arguments stay on the command line after the code (``-c CODE -m pyspark.daemon
    pyspark.worker``), so the process still shows what it is to ``ps`` and to tools that find Spark's workers by
    their command line; :func:`daemon` takes them off ``sys.argv`` again."""
    if tuple(args[:2]) == DAEMON_ARGS:
        return ["-c", DAEMON_CODE, *args]
    return list(args)


def daemon() -> None:
    """PySpark's worker daemon (``pyspark.daemon.manager``), with each forked worker's run wrapped so that a
    ``BrokenPipeError`` or ``ConnectionResetError`` raised by it (its socket closed by the JVM: the worker was
    stopped, and no one reads what it still had to send) ends that worker quietly, as a worker exiting with a
    non-zero code, instead of with a traceback on stderr. Every other exception is PySpark's to report."""
    import importlib

    import pyspark.daemon as pyspark_daemon

    if tuple(sys.argv[1:3]) == DAEMON_ARGS:  # as python -m pyspark.daemon sees them: sys.argv[1] is the worker module
        del sys.argv[1:3]
    if sys.argv[1:2] in ([], ["pyspark.worker"]):  # the function tasks' worker (not a data source's planner)
        for name in PRELOAD:
            try:
                importlib.import_module(name)
            except ImportError:
                break  # an install without them: each worker imports what it needs, as PySpark's own does
    run_worker = pyspark_daemon.worker

    def worker(sock: socket.socket, authenticated: bool) -> int:
        try:
            return int(run_worker(sock, authenticated))
        except (BrokenPipeError, ConnectionResetError):
            return 1  # the daemon's child then waits for the socket's close (already done) and exits

    pyspark_daemon.worker = worker  # manager() looks its worker function up in the module when it forks
    pyspark_daemon.manager()


def main() -> None:
    """Run this interpreter with this process's arguments (:func:`python_args`), the PySpark package's own zips
    off ``PYTHONPATH``."""
    if "PYTHONPATH" in os.environ:
        os.environ["PYTHONPATH"] = without_own_zips(os.environ["PYTHONPATH"])
    os.execv(sys.executable, [sys.executable, *python_args(sys.argv[1:])])
