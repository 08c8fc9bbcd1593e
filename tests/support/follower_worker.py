"""A follower in a process of its own (for test_followers_processes.py):

    python follower_worker.py LEADER_URL TENANT NAMESPACE NAME LOCAL_DIR [--restore-chunk N] [--no-snapshots]
                              [--provider P] [--prefix P] [--even]

Prints a JSON status line (FollowerStore.status()) every 20 ms. Reads commands from stdin:
``dump PATH`` waits until caught up, writes every entry as JSON to PATH and prints ``{"dumped": PATH}``;
``quit`` closes the follower and exits.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading

from statekeep.changelog import FollowerStore


def even_key(key: str) -> bool:
    return key[-1] in "02468"


def dump(follower: FollowerStore, path: str) -> None:
    if not follower.wait_until_caught_up(300):
        raise SystemExit("follower did not catch up in 300 s")
    entries = [[e.key, e.kind, e.value.hex(), e.version] for e in follower.scan_entries()]
    with open(path, "w") as f:
        json.dump(entries, f)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("url", "tenant", "namespace", "name", "local_dir"):
        parser.add_argument(name)
    parser.add_argument("--restore-chunk", type=int, default=20_000)
    parser.add_argument("--no-snapshots", action="store_true")
    parser.add_argument("--provider", default=None, help="the leader's state provider (default: the store's)")
    parser.add_argument("--prefix", default="", help="follow only the keys with this prefix")
    parser.add_argument("--even", action="store_true", help="follow only the keys ending in an even digit")
    args = parser.parse_args()
    follower = FollowerStore.open(args.url, args.tenant, args.namespace, args.name, local_dir=args.local_dir,
                                  snapshots=not args.no_snapshots, restore_chunk=args.restore_chunk,
                                  provider=args.provider, key_prefix=args.prefix,
                                  key_filter=even_key if args.even else None)
    out = threading.Lock()
    stop = threading.Event()

    def say(data: dict) -> None:
        with out:
            sys.stdout.write(json.dumps(data) + "\n")
            sys.stdout.flush()

    def report() -> None:
        while not stop.wait(0.02):
            say(follower.status())

    threading.Thread(target=report, daemon=True).start()
    for line in sys.stdin:
        command, _, arg = line.strip().partition(" ")
        if command == "dump":
            dump(follower, arg)
            say({"dumped": arg})
        elif command == "quit":
            break
    stop.set()
    follower.close()


if __name__ == "__main__":
    main()
