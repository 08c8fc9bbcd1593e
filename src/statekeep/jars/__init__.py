"""Java jars from Maven Central, resolved once into a cache outside the repository: the Kafka broker the tests
start, Spark's Kafka connector for ``spark.jars``, Kafka Streams, a Pulsar standalone (broker, bookie and functions
worker: bundle "pulsar", resolved on demand: ``statekeep jars install pulsar``).

    jars.install()                      # resolve the default bundles ("kafka", "spark-kafka") with mvn, once
    jars.path("kafka")                  # CACHE/kafka-4.4.0-<pom hash>/, a directory of jars
    jars.classpath("kafka")             # those jars joined with ":" (a java -cp)
    jars.spark_jars()                   # the connector's jar paths, for spark.jars

A bundle is a pom shipped in this package (a ``dependencies`` list, groupId ``statekeep``) resolved by
``mvn dependency:copy-dependencies`` into ``$STATEKEEP_JARS`` (default ``~/.cache/statekeep/jars``), in a
directory named after the bundle, its version and a hash of its pom: a changed pom is a new directory. It is
resolved into a temporary directory, then renamed into place, so a bundle directory is always complete; an
installed one is never resolved again. Only :func:`install` runs Maven (it needs ``mvn`` and ``java``);
the tests never do (``scripts/kafka-jars`` installs before them). This module imports nothing heavy.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from statekeep.errors import InvalidArgumentError, MissingDependencyError

#: the Kafka broker, clients and Streams version of the "kafka" and "kafka-streams" bundles
KAFKA_VERSION = "4.4.0"
#: the Pulsar version of the "pulsar" bundle (its broker, functions worker and the API the state provider implements)
PULSAR_VERSION = "4.2.4"
#: every bundle's name
BUNDLES = ("kafka", "spark-kafka", "kafka-streams", "pulsar")
#: what :func:`install` resolves when no bundle is named (what the tests need)
DEFAULT_BUNDLES = ("kafka", "spark-kafka")
#: the environment variable naming the cache directory
ENV = "STATEKEEP_JARS"
#: the command that installs the default bundles, named by every error about a missing one
INSTALL_COMMAND = "statekeep jars install"


def connector_version(pyspark_version: str | None = None) -> str:
    """The version of Spark's Kafka connector (``spark-sql-kafka-0-10_2.13``) for ``pyspark_version``
    (default: the installed pyspark's): the same version, except for 4.3.x, which Maven Central does not
    serve (tried with ``mvn -U``): 4.2.0 is the newest connector there, and the one used with PySpark 4.3
    (tried with 4.3.0 here: a streaming read with headers and timestamps, ``read_committed`` over committed
    and aborted transactions, a streaming count into a Kafka sink, batch writes and reads all worked)."""
    version = pyspark_version or _installed_pyspark()
    return "4.2.0" if version.startswith("4.3.") else version


def _installed_pyspark() -> str:
    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError as e:
        raise MissingDependencyError("Spark's Kafka connector is chosen for the installed PySpark, and none is "
                                     "installed: pip install 'statekeep[spark]'") from e


@dataclass(frozen=True)
class Bundle:
    """A set of jars: ``pom`` (a file of this package) resolved with ``statekeep.version=version``, only
    the artifacts ``include`` names when it names any (else the pom's whole runtime scope)."""

    name: str
    version: str
    pom: str
    include: tuple[str, ...] = ()

    @property
    def pom_text(self) -> str:
        return resources.files("statekeep.jars").joinpath(self.pom).read_text(encoding="utf-8")

    @property
    def key(self) -> str:
        """``NAME-VERSION-HASH``: the bundle's directory name (HASH: of the pom and the includes)."""
        digest = hashlib.sha256("\n".join((self.pom_text, *self.include)).encode()).hexdigest()[:10]
        return f"{self.name}-{self.version}-{digest}"


def bundle(name: str) -> Bundle:
    """The bundle ``name`` ("kafka", "spark-kafka", "kafka-streams", "pulsar"); InvalidArgumentError for another."""
    if name == "kafka":
        return Bundle("kafka", KAFKA_VERSION, "kafka.pom")
    if name == "spark-kafka":
        # the connector and what PySpark's jars/ lacks; scala, slf4j, lz4, snappy, zstd, hadoop-client are there
        return Bundle("spark-kafka", connector_version(), "spark-kafka.pom",
                      ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients",
                       "commons-pool2"))
    if name == "kafka-streams":
        return Bundle("kafka-streams", KAFKA_VERSION, "kafka-streams.pom")
    if name == "pulsar":
        return Bundle("pulsar", PULSAR_VERSION, "pulsar.pom")
    raise InvalidArgumentError(f"no jar bundle {name!r}: the bundles are {', '.join(BUNDLES)}")


def cache_dir() -> Path:
    """``$STATEKEEP_JARS``, else ``~/.cache/statekeep/jars``."""
    configured = os.environ.get(ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "statekeep" / "jars"


def _install_hint(name: str) -> str:
    return f"{INSTALL_COMMAND}{'' if name in DEFAULT_BUNDLES else ' ' + name} (or scripts/kafka-jars in a clone)"


def path(name: str) -> Path:
    """The directory of bundle ``name``'s jars; MissingDependencyError naming the command that installs it
    when it is not installed."""
    where = cache_dir() / bundle(name).key
    if not where.is_dir():
        raise MissingDependencyError(f"the {name!r} jars are not installed (no {where}): run {_install_hint(name)}")
    return where


def jar_paths(name: str) -> list[Path]:
    """Every jar of bundle ``name`` (sorted by file name); MissingDependencyError as :func:`path`."""
    return sorted(path(name).glob("*.jar"))


def classpath(name: str) -> str:
    """Bundle ``name``'s jars joined with ``os.pathsep``, for ``java -cp``."""
    return os.pathsep.join(str(p) for p in jar_paths(name))


def spark_jars() -> list[str]:
    """The jar paths of Spark's Kafka connector for the installed PySpark (bundle "spark-kafka"), for
    ``spark.jars`` (set before the session's JVM starts); MissingDependencyError as :func:`path`."""
    return [str(p) for p in jar_paths("spark-kafka")]


def install(bundles: Iterable[str] = DEFAULT_BUNDLES, quiet: bool = True) -> dict[str, Path]:
    """Resolve each of ``bundles`` that is not installed yet with Maven and return every one's directory
    (an installed bundle costs nothing). ``quiet``: Maven's output only when it fails (else it goes to
    stderr as it runs). Raises MissingDependencyError when ``mvn`` or ``java`` is missing or Maven fails (its
    output's end in the message); a bundle that failed leaves nothing behind, those resolved before it stay."""
    chosen = [bundle(name) for name in bundles]  # every name checked before anything is resolved
    found: dict[str, Path] = {}
    for one in chosen:
        where = cache_dir() / one.key
        if not where.is_dir():
            _resolve(one, where, quiet)
        found[one.name] = where
    return found


def _tools() -> str:
    for command, package in (("java", "default-jdk-headless"), ("mvn", "maven")):
        if shutil.which(command) is None:
            raise MissingDependencyError(f"resolving jars needs {command!r}: apt-get install {package}")
    mvn = shutil.which("mvn")
    assert mvn is not None
    return mvn


def _resolve(one: Bundle, where: Path, quiet: bool) -> None:
    mvn = _tools()
    where.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{one.key}.", dir=where.parent))  # beside it: rename is atomic
    try:
        (staging / "pom.xml").write_text(one.pom_text, encoding="utf-8")
        command = [mvn, "-B", "-Dstyle.color=never", "-f", str(staging / "pom.xml"),
                   "dependency:copy-dependencies", f"-DoutputDirectory={staging}", "-DincludeScope=runtime",
                   f"-Dstatekeep.version={one.version}"]
        if one.include:
            command.append(f"-DincludeArtifactIds={','.join(one.include)}")
        if quiet:
            command.insert(1, "-q")
        done = subprocess.run(command, cwd=staging, stdout=subprocess.PIPE if quiet else sys.stderr,
                              stderr=subprocess.STDOUT, text=True)
        jars = list(staging.glob("*.jar"))
        if done.returncode != 0 or not jars:
            tail = "\n".join((done.stdout or "").strip().splitlines()[-15:])
            raise MissingDependencyError(f"mvn could not resolve the {one.name!r} jars ({one.key}), exit "
                                         f"{done.returncode}" + (f":\n{tail}" if tail else ""))
        staging.chmod(0o755)  # mkdtemp's 0700 would keep the jars from other users of a shared cache
        try:
            staging.rename(where)
        except OSError:
            if not where.is_dir():  # not another installer that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
