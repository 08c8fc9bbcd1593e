"""``statekeep handles ls|gc --store URL --root PATH [--blobs URL]``: inspect state handles, reclaim orphan blobs.

``gc`` is a dry run unless ``--delete`` is given: it reports what it would reclaim (count and bytes).
Blob storage credentials come from the environment (for s3://, e.g. ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from statekeep.cli.common import print_json, print_result, utc_time
from statekeep.metadata import open_store
from statekeep.metadata.registry import default_store_url


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = groups.add_parser("handles", help="state handles: list them, reclaim orphan blobs")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help)
        sub.add_argument("--store", default=default_store_url(),
                         help="metadata store URL (default: $STATEKEEP_STORE or %(default)s)")
        sub.add_argument("--root", required=True, help="root path of the state handle store, e.g. /jobs/j1/state")
        sub.add_argument("--json", action="store_true", help="print JSON")
        sub.set_defaults(run=run)
        return sub

    command("ls", _ls, "list the handles under a root")
    gc = command("gc", _gc, "find blobs no handle points to; delete them with --delete")
    gc.add_argument("--blobs", required=True, help="blob storage URL the handle store writes to, e.g. file:///var/blobs")
    gc.add_argument("--grace", type=float, default=3600.0, metavar="SECONDS",
                    help="only blobs last written longer ago than this are orphans (default: %(default)s)")
    gc.add_argument("--delete", action="store_true", help="delete the orphans (default: dry run, delete nothing)")


def _size(n: int) -> str:
    value, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"


def _ls(args: argparse.Namespace) -> int:
    from statekeep.handles.gc import list_handles

    with open_store(args.store) as store:
        rows = list_handles(store, args.root)
    return print_result(args, rows, [
        f"{row['key']}  v{row['version']}  UNREADABLE: {row['error']}" if "error" in row else
        f"{row['key']}  v{row['version']}  {_size(row['size'])}  {utc_time(row['createdMs'])}  "
        f"locks: {len(row['lockedBy'])}  {row['blob']}" for row in rows] or [f"no state handles under {args.root}"])


def _gc(args: argparse.Namespace) -> int:
    from statekeep.handles.gc import collect_garbage

    with open_store(args.store) as store:
        report = collect_garbage(store, args.root, args.blobs, grace_seconds=args.grace, delete=args.delete)
    if args.json:
        print_json(report.to_json())
        return 1 if report.failed else 0
    for blob in report.orphans:
        mark = " (unfinished upload)" if blob.temporary else ""
        print(f"{_size(blob.size):>10}  {utc_time(blob.written_ms)}  {blob.url}{mark}")
    verb = "reclaimed" if args.delete else "would reclaim"
    print(f"{verb} {len(report.deleted) if args.delete else len(report.orphans)} blob(s), "
          f"{_size(sum(b.size for b in report.orphans if not args.delete or b.url in report.deleted))}; "
          f"scanned {report.scanned}: {report.referenced} referenced, {report.young} younger than {args.grace:g}s"
          + ("" if args.delete else " (dry run: nothing deleted; pass --delete to delete)"))
    for url, error in report.failed:
        print(f"failed to delete {url}: {error}")
    return 1 if report.failed else 0
