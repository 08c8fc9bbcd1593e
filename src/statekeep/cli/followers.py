"""``statekeep followers start|get|status``: read-only followers of a function's state (KIP-813).

A follower materializes a leader's function state in its own directory (``--local-dir``; for
``start`` and ``get`` without it, a temporary one removed on exit) by tailing the leader's changelog
(bootstrapping from the newest snapshot when there is one), and serves reads from there.
``--leader-store URL`` is the leader's metadata store (default ``$STATEKEEP_STORE`` or
``local://./.statekeep-data``); the function must be registered there (under ``--functions-root``).

- ``start``: follow until interrupted, printing the follower's status (and lag) every ``--interval``.
- ``get --key K``: catch up (at most ``--timeout`` seconds), then print the key as FunctionState JSON, with
  ``variables``: its typed state variables decoded to JSON, when it has some (a key with only variables
  prints ``{"key", "variables"}``).
- ``status``: every function followed in ``--local-dir``: applied offset, epoch and, with the
  leader reachable, the lag.

``--prefix P`` (``start``, ``get``): follow only the keys starting with ``P``; a ``--local-dir``
followed before with another prefix is rebuilt for the new one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekeep.cli.common import print_json, print_result
from statekeep.errors import InvalidArgumentError, NotFoundError, StatekeepError
from statekeep.metadata.registry import default_store_url
from statekeep.state.catalog import DEFAULT_ROOT

if TYPE_CHECKING:
    from statekeep.changelog import FollowerStore
    from statekeep.changelog.partitioned_follower import Positions
    from statekeep.changelog.replica import ReplicaMeta


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = groups.add_parser("followers", help="read-only followers of a function's state")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace], int], help: str, *,
                named: bool = True) -> argparse.ArgumentParser:
        sub: argparse.ArgumentParser = commands.add_parser(name, help=help)
        if named:
            sub.add_argument("--tenant", default="public", help="tenant (default: %(default)s)")
            sub.add_argument("--namespace", default="default", help="namespace (default: %(default)s)")
            sub.add_argument("--name", required=True, help="function name")
            sub.add_argument("--blobs", default=None, help="snapshot blob storage if not in the handles' URLs")
            sub.add_argument("--provider", default=None, help="the leader's state provider (default: the registry's)")
            sub.add_argument("--local-dir", default=None,
                             help="the follower's own directory (default: a temporary one, removed on exit)")
            sub.add_argument("--prefix", default="", help="follow only the keys starting with this prefix")
        else:
            sub.add_argument("--local-dir", required=True, help="the follower's own directory")
        sub.add_argument("--leader-store", default=default_store_url(),
                         help="the leader's metadata store URL (default: $STATEKEEP_STORE or %(default)s)")
        sub.add_argument("--functions-root", default=DEFAULT_ROOT,
                         help="where the leader's function registry keeps functions (default: %(default)s)")
        sub.set_defaults(run=run)
        return sub

    start = command("start", _start, "follow a function until interrupted, printing status")
    start.add_argument("--interval", type=float, default=1.0, help="seconds between status lines (default: 1)")
    get = command("get", _get, "catch up, then print one key as FunctionState JSON (and its typed variables)")
    get.add_argument("--key", required=True, help="state key")
    get.add_argument("--timeout", type=float, default=60.0, help="seconds to catch up (default: %(default)s)")
    status = command("status", _status, "the functions followed in a directory", named=False)
    status.add_argument("--json", action="store_true", help="print JSON")


def _open(args: argparse.Namespace) -> FollowerStore:
    from statekeep.changelog import FollowerStore

    return FollowerStore.open(args.leader_store, args.tenant, args.namespace, args.name,
                              local_dir=args.local_dir, blobs=args.blobs, provider=args.provider,
                              functions_root=args.functions_root, key_prefix=args.prefix)


def _start(args: argparse.Namespace) -> int:
    with _open(args) as follower:
        print(f"following {args.tenant}/{args.namespace}/{args.name} of {args.leader_store}"
              + (f" (keys starting with {args.prefix!r})" if args.prefix else "")
              + f" into {follower.local_dir}; Ctrl-C stops", file=sys.stderr)
        while True:
            status = follower.status()
            try:
                status["lag"], status["lagMs"] = follower.lag, follower.lag_ms
            except NotFoundError:
                raise
            except StatekeepError as e:
                status["lag"], status["lagMs"], status["error"] = None, None, str(e)
            print(f"{time.strftime('%H:%M:%S')}  {status['phase']:<9}  applied offset {status['appliedOffset']:>10}  "
                  f"lag {status['lag']} ({status['lagMs']} ms)"
                  + (f"  restored {status['restoredEntries']}" if status["restoredEntries"] else "")
                  + (f"  error: {status['error']}" if status["error"] else ""), flush=True)
            time.sleep(args.interval)


def _get(args: argparse.Namespace) -> int:
    from statekeep.state import typed
    from statekeep.state.shape import function_state_json
    from statekeep.state.timestate import visible_entry

    with _open(args) as follower:
        if not follower.wait_until_caught_up(args.timeout):
            raise StatekeepError(f"the follower did not catch up within {args.timeout:g} s (lag {follower.lag})")
        entry = visible_entry(follower, args.key)  # as a user sees it: no internal or expired key
        variables = typed.key_variables(follower, args.key)
    if entry is None and not variables:
        raise NotFoundError(f"key {args.key!r} not found in {args.tenant}/{args.namespace}/{args.name}")
    out = function_state_json(entry) if entry is not None else {"key": args.key}
    if variables:
        out["variables"] = variables
    print_json(out)
    return 0


def _status(args: argparse.Namespace) -> int:
    from statekeep.changelog.partitioned_follower import PartitionedReplica
    from statekeep.changelog.replica import followed
    from statekeep.kafka.follower import KafkaReplica

    if not os.path.isdir(args.local_dir):
        raise InvalidArgumentError(f"no follower directory {args.local_dir}")
    rows = []
    for tenant, namespace, name in followed(args.local_dir):
        with KafkaReplica(args.local_dir, tenant, namespace, name) as kafka:  # a Kafka topic's copy names it
            source = kafka.source()
            place = kafka.place() if source is not None else None
        with PartitionedReplica(args.local_dir, tenant, namespace, name) as replica:  # any replica; and positions
            meta = replica.load()
            positions = replica.positions() if source is None else None
        if positions is not None and positions.gen != meta.gen:
            positions = None
        rows.append({"tenant": tenant, "namespace": namespace, "name": name, "appliedOffset": meta.applied,
                     "epoch": meta.epoch, "generation": meta.gen, "restoring": meta.restore is not None,
                     "lag": _kafka_lag(source, place, meta) if source is not None
                     else _lag(args, tenant, namespace, name, meta, positions)})
        if source is not None:
            rows[-1]["source"] = source
    return print_result(args, rows, [
        f"{row['tenant']}/{row['namespace']}/{row['name']}  applied offset {row['appliedOffset']}  "
        f"lag {row['lag'] if row['lag'] is not None else '?'}" + ("  (restoring)" if row["restoring"] else "")
        for row in rows] or [f"no followers in {args.local_dir}"])


def _kafka_lag(source: str, place: dict[str, Any] | None, meta: ReplicaMeta) -> int | str | None:
    """Records of the followed Kafka topic after the copy's positions (every record before its first bootstrap);
    None if unknown, "deleted" if the topic is gone or is another one."""
    from statekeep.kafka.follower import KafkaChangelog

    try:
        topic = KafkaChangelog(source, "", "", "")
        topic_id, partitions = topic.describe()
        if meta.epoch and topic_id != meta.epoch:
            return "deleted"
        ends = topic.offsets(partitions)
        positions = place["positions"] if place is not None else topic.offsets(partitions, earliest=True)
        return sum(max(0, end - positions.get(p, 0)) for p, end in ends.items())
    except NotFoundError:
        return "deleted"
    except StatekeepError:
        return None


def _lag(args: argparse.Namespace, tenant: str, namespace: str, name: str,
         meta: ReplicaMeta, positions: Positions | None) -> int | str | None:
    """Records the leader has after the follower's applied offset (for partition-owned state: entries
    of segments not applied); None if unknown, "deleted" if gone."""
    from statekeep.changelog.partitioned_follower import lag
    from statekeep.functions.config.service import FunctionService
    from statekeep.state.partitioned import PartitionedStateStore

    try:
        with FunctionService.open(args.leader_store, functions_root=args.functions_root) as service:
            state = service.registry.state_store(tenant, namespace, name)
            if isinstance(state, PartitionedStateStore):
                return lag(state, positions)
            if meta.epoch is not None and state.changelog_position().epoch != meta.epoch:
                return "deleted"
            return state.count_changelog(meta.applied if meta.gen is not None else -1)
    except NotFoundError:
        return "deleted"
    except StatekeepError:
        return None
