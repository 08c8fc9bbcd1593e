"""A leader in its own process for the state handle tests: ``python handles_worker.py URL ROOT ELECTION BLOBS``.

Becomes leader, claims ROOT, adds the handle "shared", prints "leader". Then, for each line "go" read from
stdin (the test pauses this process with SIGSTOP beyond its session and lets a successor take over before
sending it), tries to add, replace and remove handles and prints one JSON line: the name of the error each
attempt raised, or "applied".
"""

from __future__ import annotations

import json
import sys

from statekeep.coordination import CoordinationService
from statekeep.handles import StateHandleStore
from statekeep.metadata import open_store


def main(argv: list[str]) -> None:
    url, root, election, blobs = argv
    store = open_store(url)
    coord = CoordinationService(store)
    lock = coord.become_leader(election, b"worker").result(60)
    handles = StateHandleStore(store, root, blobs, lock_identity="worker", leadership=lock)
    handles.add_and_lock("shared", b"from the worker")
    handles.release("shared")
    print("leader", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            continue
        outcomes = []
        for attempt in (lambda: handles.add_and_lock("by-paused", b"paused"),
                        lambda: handles.replace("shared", handles.exists("shared"), b"paused"),
                        lambda: handles.release_and_try_remove("shared"),
                        handles.clear_entries):
            try:
                attempt()
                outcomes.append("applied")
            except Exception as e:  # report any outcome; the test decides
                outcomes.append(type(e).__name__)
        print(json.dumps(outcomes), flush=True)
    coord.close()
    store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
