"""The ``statekeep`` command. Each command group lives in its own module and registers itself
on the parser; errors from the statekeep tree become a one-line message and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from statekeep.errors import InvalidArgumentError, InvalidPathError, NotFoundError, StatekeepError


def build_parser() -> argparse.ArgumentParser:
    from statekeep.cli import followers, functions, handles, metadata, migrate, standalone, topics

    parser = argparse.ArgumentParser(prog="statekeep", description=__doc__.splitlines()[0])
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    for group in (metadata, functions, standalone, handles, followers, migrate, topics):
        group.register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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


