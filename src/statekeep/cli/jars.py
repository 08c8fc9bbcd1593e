"""``statekeep jars install [BUNDLE ...]`` and ``statekeep jars path BUNDLE``: the Java jars statekeep
resolves from Maven Central into its cache (see :mod:`statekeep.jars`): the Kafka broker the tests start
(``kafka``), Spark's Kafka connector for the installed PySpark (``spark-kafka``), Kafka Streams
(``kafka-streams``), a Pulsar standalone (``pulsar``).

``install`` resolves each bundle named (default: ``kafka`` and ``spark-kafka``) that is not installed yet,
with ``mvn`` (it needs Maven and a JDK), and prints ``BUNDLE DIRECTORY`` for each; an installed bundle
costs nothing. ``path`` prints a bundle's directory (``--classpath``: its jars joined for ``java -cp``), or
fails naming the command that installs it. The cache is ``$STATEKEEP_JARS``, else ``~/.cache/statekeep/jars``.
"""

from __future__ import annotations

import argparse


DESCRIPTION = """\
Resolve the Java jars statekeep uses from Maven Central, with mvn, into $STATEKEEP_JARS (default
~/.cache/statekeep/jars): kafka (the Kafka broker the tests start), spark-kafka (Spark's Kafka connector for
the installed PySpark, for spark.jars), kafka-streams, pulsar (a Pulsar standalone: broker and functions worker).
An installed bundle is never resolved again."""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from statekeep import jars

    parser = groups.add_parser("jars", help="resolve the Java jars statekeep uses (Kafka, Spark's Kafka "
                                            "connector) from Maven Central into its cache",
                               description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    install = commands.add_parser("install", help="resolve bundles with mvn (once: an installed one is kept)")
    install.add_argument("bundles", nargs="*", metavar="BUNDLE",
                         help=f"{', '.join(jars.BUNDLES)} (default: {' '.join(jars.DEFAULT_BUNDLES)})")
    install.add_argument("--verbose", action="store_true", help="show Maven's output as it runs")
    install.set_defaults(run=_install)
    where = commands.add_parser("path", help="print a bundle's directory (fails if it is not installed)")
    where.add_argument("bundle", choices=jars.BUNDLES, help="the bundle")
    where.add_argument("--classpath", action="store_true", help="print its jars joined for java -cp instead")
    where.set_defaults(run=_path)


def _install(args: argparse.Namespace) -> int:
    from statekeep import jars

    for name, directory in jars.install(args.bundles or jars.DEFAULT_BUNDLES, quiet=not args.verbose).items():
        print(f"{name} {directory}")
    return 0


def _path(args: argparse.Namespace) -> int:
    from statekeep import jars

    print(jars.classpath(args.bundle) if args.classpath else jars.path(args.bundle))
    return 0
