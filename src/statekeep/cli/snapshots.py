"""``statekeep functions snapshot|snapshots|restore|compact``: function snapshots and changelog compaction.

They work directly on the store (``--data-dir DIR`` for ``local://DIR``, or ``--store URL``), not
through a server. Snapshot blobs go to ``--blobs URL`` (default ``DIR/blobs`` on a local:// store;
required on ZooKeeper and etcd, e.g. ``file:///shared/blobs`` or ``s3://bucket/prefix``). Having no
server side, they open the store themselves (:func:`statekeep.cli.common.direct`) rather than going
through a :class:`~statekeep.cli.functions_client.FunctionsClient`.

- ``snapshot``: snapshot the function's whole state now; prints the snapshot as JSON.
- ``snapshots``: list its snapshots (oldest first), a table or ``--json``.
- ``restore [--snapshot N]``: replace the function's state by a snapshot's (default the newest); each
  change is written to the changelog, so followers see the restore. One transaction on the embedded
  provider; in batches on the metadata provider. Stop the function's writers first.
- ``compact [--tombstone-retention SECONDS]``: one compaction pass over the function's changelog.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from statekeep.cli import common
from statekeep.cli.common import CommandAdder, print_json, utc_time
from statekeep.errors import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from statekeep.changelog import SnapshotStore
    from statekeep.functions.config.service import FunctionService
    from statekeep.state.base import StateStore


def register(command: CommandAdder) -> None:
    """Add the commands through the functions group's ``command`` helper."""
    for name, run, help in (("snapshot", _snapshot, "snapshot a function's state into blob storage"),
                            ("snapshots", _snapshots, "list a function's snapshots"),
                            ("restore", _restore, "replace a function's state by a snapshot's")):
        sub = command(name, run, help, direct=True)
        sub.add_argument("--blobs", default=None, help="blob storage URL (default: DATA_DIR/blobs on local://)")
        if name == "snapshots":
            sub.add_argument("--json", action="store_true", help="print JSON")
        if name == "restore":
            sub.add_argument("--snapshot", type=int, default=None, help="snapshot number (default: the newest)")
    compact = command("compact", _compact, "compact a function's changelog once (newest record per key)",
                      direct=True)
    compact.add_argument("--tombstone-retention", type=float, default=None, metavar="SECONDS",
                         help="drop tombstones older than this (default: 24 hours)")


def _open(args: argparse.Namespace) -> tuple[FunctionService, StateStore, SnapshotStore]:
    from statekeep.changelog import SnapshotStore

    if args.url:
        raise InvalidArgumentError(f"{args.command} works on the store directly: use --data-dir or --store, not --url")
    service = common.direct(args)
    try:
        state = service.registry.state_store(args.tenant, args.namespace, args.name)
        snapshots = SnapshotStore(service.registry.store, getattr(args, "blobs", None))
    except BaseException:
        service.close()
        raise
    return service, state, snapshots


def _snapshot(args: argparse.Namespace) -> int:
    service, state, snapshots = _open(args)
    with service:
        print_json(snapshots.create(state).to_json())
    return 0


def _snapshots(args: argparse.Namespace) -> int:
    service, state, snapshots = _open(args)
    with service:
        infos = snapshots.list(args.tenant, args.namespace, args.name)
        epoch = state.changelog_position().epoch
    return common.print_result(args, [{**i.to_json(), "current": i.epoch == epoch} for i in infos], [
        f"{i.number:>6}  offset {i.offset:>10}  {i.size:>12} bytes  {utc_time(i.created_ms)}"
        + ("" if i.epoch == epoch else "  (of a deleted incarnation)") for i in infos]
        or [f"no snapshots of {args.tenant}/{args.namespace}/{args.name}"])


def _restore(args: argparse.Namespace) -> int:
    service, state, snapshots = _open(args)
    with service:
        if args.snapshot is None:
            info = snapshots.newest(args.tenant, args.namespace, args.name)
        else:
            info = snapshots.get(args.tenant, args.namespace, args.name, args.snapshot)
        if info is None:
            which = "no snapshot" if args.snapshot is None else f"no snapshot {args.snapshot}"
            raise NotFoundError(f"{which} of {args.tenant}/{args.namespace}/{args.name}")
        changed = snapshots.restore(state, info)
        print_json({"restored": info.number, "offset": info.offset, "changedKeys": changed})
    return 0


def _compact(args: argparse.Namespace) -> int:
    from statekeep.changelog import DEFAULT_TOMBSTONE_RETENTION_S, compact

    service, state, _ = _open(args)
    with service:
        before = state.count_changelog()
        retention = DEFAULT_TOMBSTONE_RETENTION_S if args.tombstone_retention is None else args.tombstone_retention
        result = compact(state, retention)
        print_json({"scanned": result.scanned, "removed": result.removed,
                    "tombstonesDropped": result.tombstones_dropped, "uptoOffset": result.upto_offset,
                    "recordsBefore": before, "recordsAfter": state.count_changelog()})
    return 0
