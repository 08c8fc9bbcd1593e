"""The ``statekeep`` command. Each command group lives in its own module and registers itself
on the parser; errors from the statekeep tree become a one-line message and a non-zero exit."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from statekeep.errors import InvalidArgumentError, InvalidPathError, NotFoundError, StatekeepError

#: what ``statekeep --help`` says before the list of commands
DESCRIPTION = """\
statekeep: stateful Python functions on Apache Spark with exactly-once state, and the pluggable
metadata store under them (local:// embedded by default; memory://, zk://, etcd://).
The functions commands are shaped like pulsar-admin functions."""
#: what ``statekeep --help`` says after it
EPILOG = """first steps:
  statekeep functions localrun --name wc --py FILE --inputs DIR --key-field word --once --data-dir ./data
  statekeep functions querystate --name wc --key KEY --data-dir ./data
  statekeep standalone --data-dir ./data          REST API, console at /ui, a worker running created functions

Each command has its own --help (statekeep functions localrun --help). Without --data-dir or --store,
commands work on $STATEKEEP_STORE, else local://./.statekeep-data; the functions commands go to the
server --url, else $STATEKEEP_URL, else the store $STATEKEEP_STORE, else client.conf's webServiceUrl,
else http://localhost:8080 (localrun and the snapshot commands always work on a store)."""


def build_parser() -> argparse.ArgumentParser:
    from statekeep.cli import followers, functions, handles, jars, metadata, migrate, standalone, topics

    parser = argparse.ArgumentParser(prog="statekeep", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    for group in (metadata, functions, standalone, handles, followers, migrate, topics, jars):
        group.register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``statekeep ARGV`` and return its exit code: 0 on success, 2 for invalid input, 1 for other statekeep
    errors (one line on stderr, no traceback), 130 on Ctrl-C. ``--help`` and usage errors exit through argparse
    (``SystemExit`` 0 and 2)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (InvalidPathError, InvalidArgumentError) as e:
        print(f"statekeep: invalid input: {e}", file=sys.stderr)
        return 2
    except NotFoundError as e:
        print(f"statekeep: not found: {e}", file=sys.stderr)
        return 1
    except StatekeepError as e:
        # no server answered: its message is the whole advice, said plainly
        plain = type(e).__name__ == "ServerUnreachableError"
        print(f"statekeep: {e}" if plain else f"statekeep: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader of stdout left (``statekeep ... | head``): quietly, as a shell tool does
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's final flush does not fail again
        return 141


