"""statekeep.jars: bundles of jars from Maven Central in a cache outside the repository.

Nothing here resolves anything (the tests download nothing): a cache with no bundle says which command
installs it; an installed bundle is returned without Maven; Maven or Java missing, or Maven failing, is a
MissingDependencyError and leaves no bundle behind; the installed Spark connector bundle holds nothing
PySpark's own jars/ holds (two versions of one jar on a classpath is a gamble on which loads first).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import missing, need

from statekeep import jars
from statekeep.cli import main
from statekeep.errors import InvalidArgumentError, MissingDependencyError


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(jars.ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _tool_dir(tmp_path: Path, **scripts: str) -> Path:
    """A directory of executables named after ``scripts``' keys (shell scripts), to be the whole PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_a_bundle_not_installed_names_the_command_that_installs_it(cache, capsys):
    with pytest.raises(MissingDependencyError, match="statekeep jars install") as e:
        jars.path("kafka")
    assert str(cache) in str(e.value)
    with pytest.raises(MissingDependencyError, match="statekeep jars install kafka-streams"):
        jars.classpath("kafka-streams")
    with pytest.raises(MissingDependencyError):
        jars.spark_jars()
    assert main(["jars", "path", "kafka"]) == 1
    assert "statekeep jars install" in capsys.readouterr().err
    assert not cache.exists()  # looking installs nothing


def test_an_unknown_bundle_is_refused_before_anything_is_resolved(cache, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path)))  # no mvn: had it started, the error would say so
    with pytest.raises(InvalidArgumentError, match="no jar bundle 'kafak'.*kafka, spark-kafka, kafka-streams, pulsar"):
        jars.install(["kafka", "kafak"])
    with pytest.raises(InvalidArgumentError):
        jars.path("kafak")
    assert main(["jars", "install", "kafak"]) == 2
    assert "no jar bundle 'kafak'" in capsys.readouterr().err
    assert not cache.exists()


def test_an_installed_bundle_is_not_resolved_again(cache, tmp_path, monkeypatch, capsys):
    key = jars.bundle("kafka").key
    (cache / key).mkdir(parents=True)
    for name in ("b.jar", "a.jar", "pom.xml"):
        (cache / key / name).write_text("")
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path)))  # neither mvn nor java: install must not need them
    assert jars.install(["kafka"]) == {"kafka": cache / key}
    assert jars.classpath("kafka") == f"{cache / key / 'a.jar'}:{cache / key / 'b.jar'}"
    assert main(["jars", "install", "kafka"]) == 0
    assert capsys.readouterr().out == f"kafka {cache / key}\n"
    with pytest.raises(MissingDependencyError, match="needs 'java': apt-get install default-jdk-headless"):
        jars.install(["kafka", "kafka-streams"])  # the one not installed needs Maven


def test_maven_missing_or_failing_leaves_no_bundle(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_tool_dir(tmp_path, java="exit 0")))
    with pytest.raises(MissingDependencyError, match="needs 'mvn': apt-get install maven"):
        jars.install(["kafka"])
    # a Maven that writes a jar, then fails (a download cut short): the half-resolved bundle never counts
    _tool_dir(tmp_path, mvn='for a in "$@"; do case "$a" in -DoutputDirectory=*) touch "${a#*=}/half.jar";; '
                            'esac; done; echo "Could not resolve dependencies"; exit 1')
    with pytest.raises(MissingDependencyError, match=r"(?s)could not resolve the 'kafka' jars.*exit 1.*Could not "
                                                     "resolve dependencies"):
        jars.install(["kafka"])
    assert list(cache.iterdir()) == []  # neither the bundle nor its staging directory
    with pytest.raises(MissingDependencyError):
        jars.path("kafka")


def test_a_kafka_server_without_its_jars_names_the_script_that_installs_them(cache, tmp_path):
    need("confluent_kafka")
    from statekeep.testing import servers

    with pytest.raises(servers.ServerNotInstalled, match="scripts/kafka-jars"):
        servers.kafka(tmp_path / "kafka", servers.free_port())
    with pytest.raises(servers.ServerNotInstalled, match="scripts/kafka-jars"):
        servers.start_kafka_cluster(3)
    assert not (tmp_path / "kafka").exists() and not cache.exists()  # nothing formatted, nothing started


def test_the_connector_version_follows_pyspark():
    assert jars.connector_version("4.3.0") == jars.connector_version("4.3.1") == "4.2.0"  # 4.3 is not served
    assert jars.connector_version("4.2.0") == "4.2.0"
    assert jars.connector_version("4.1.1") == "4.1.1"
    # a bundle's directory names what it resolves: another connector version, or another pom, is another one
    assert re.fullmatch(r"spark-kafka-\d+\.\d+\.\d+-[0-9a-f]{10}", jars.bundle("spark-kafka").key)
    assert jars.bundle("kafka").key.startswith(f"kafka-{jars.KAFKA_VERSION}-")


def _artifact(jar: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``."""
    return re.sub(r"-\d[^-]*(-\d+)?\.jar$", "", jar)


def test_the_installed_connector_adds_nothing_pyspark_has():
    pyspark = need("pyspark")
    try:
        connector = jars.spark_jars()
    except MissingDependencyError as e:
        missing(str(e))
    names = sorted(Path(p).name for p in connector)
    assert {_artifact(n) for n in names} == {"spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13",
                                             "kafka-clients", "commons-pool2"}, names
    assert f"-{jars.connector_version()}.jar" in " ".join(names)
    own = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    assert "scala-library" in own and "kafka-clients" not in own  # the check below compares real names
    assert {_artifact(n) for n in names} & own == set()
