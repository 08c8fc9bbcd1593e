"""``statekeep migrate --from URL --to URL``, ``statekeep export --store URL FILE`` and
``statekeep import --store URL FILE``: moving a whole store (metadata tree, functions, their state)
between backends. A report goes to stdout (``--json``: as JSON), progress to stderr. Exit status 0 when
the copy is verified, 1 on an error (target not empty, unreachable store, corrupt file, mismatch)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from statekeep.cli.common import print_result
from statekeep.metadata.registry import default_store_url

if TYPE_CHECKING:
    from statekeep.migrate.core import Report


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def common(parser: argparse.ArgumentParser, *, writes: bool) -> None:
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--no-progress", action="store_true", help="no progress display on stderr")
        if writes:
            parser.add_argument("--dry-run", action="store_true",
                                help="read the source, check the target, say what would be done; write nothing")
            parser.add_argument("--force", action="store_true",
                                help="write into a non-empty target: source keys overwrite target keys, other "
                                     "target keys stay, each copied function's state becomes the source's")
            parser.add_argument("--batch-keys", type=int, default=None, help="keys per write (default: per backend)")

    migrate = groups.add_parser("migrate", help="copy a whole store to another backend (resumable, verified)")
    migrate.add_argument("--from", dest="source", required=True, help="source store URL (only read)")
    migrate.add_argument("--to", dest="target", required=True, help="target store URL")
    common(migrate, writes=True)
    migrate.set_defaults(run=_migrate)

    export = groups.add_parser("export", help="write a whole store to a portable file (JSON lines; .gz: gzip)")
    export.add_argument("--store", default=default_store_url(), help="store URL (default: %(default)s)")
    export.add_argument("file", help="the file to write")
    common(export, writes=False)
    export.set_defaults(run=_export)

    load = groups.add_parser("import", help="load a file written by 'statekeep export' into a store")
    load.add_argument("--store", default=default_store_url(), help="store URL (default: %(default)s)")
    load.add_argument("file", help="the file to read")
    common(load, writes=True)
    load.set_defaults(run=_import)


def _show(report: Report, args: argparse.Namespace) -> int:
    return print_result(args, report.to_json(), [report.text()])


def _migrate(args: argparse.Namespace) -> int:
    from statekeep.migrate import migrate

    return _show(migrate(args.source, args.target, dry_run=args.dry_run, force=args.force,
                         batch_keys=args.batch_keys, progress=not args.no_progress), args)


def _export(args: argparse.Namespace) -> int:
    from statekeep.migrate import export_store

    return _show(export_store(args.store, args.file, progress=not args.no_progress), args)


def _import(args: argparse.Namespace) -> int:
    from statekeep.migrate import import_file

    return _show(import_file(args.store, args.file, dry_run=args.dry_run, force=args.force,
                             batch_keys=args.batch_keys, progress=not args.no_progress), args)
