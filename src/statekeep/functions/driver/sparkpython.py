"""``statekeep-spark-python``: the Python interpreter for Spark to start its Python processes with
(``PYSPARK_PYTHON``; :func:`statekeep.functions.driver.spark.spark_session` makes it the default).

Spark puts its own copies of PySpark and py4j first on a Python process's ``PYTHONPATH``:
``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-*-src.zip``. A module imported from a zip archive without
bytecode is compiled from source at every import, so each Python process Spark starts (its worker daemon, the
process behind each streaming query's Python data source, such as a function's clock or a topic input, and its
planners) spends about 0.6 s more importing PySpark than it would from the installed package (0.9 s against
0.3 s here). Where ``SPARK_HOME`` is the installed PySpark package itself (a ``pip install pyspark``), those
zips are the same code as the package, so this launcher takes them off ``PYTHONPATH`` and runs this
interpreter with the same arguments; every other entry, and the zips of a Spark installed elsewhere, stay.
"""

from __future__ import annotations

import os
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


def main() -> None:
    """Run this interpreter with this process's arguments, the PySpark package's own zips off ``PYTHONPATH``."""
    if "PYTHONPATH" in os.environ:
        os.environ["PYTHONPATH"] = without_own_zips(os.environ["PYTHONPATH"])
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
