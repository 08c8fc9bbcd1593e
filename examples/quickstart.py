"""Quickstart: the metadata store on the embedded default (no servers).

Run with ``.venv/bin/python examples/quickstart.py`` (``scripts/run`` or ``scripts/setup-venv`` creates
``.venv``); the store URL comes from $STATEKEEP_STORE (default local://./.statekeep-data).
"""

from __future__ import annotations

import os
import time

from statekeep.errors import BadVersionError
from statekeep.metadata import NotificationType, Put, open_store

url = os.environ.get("STATEKEEP_STORE", "local://./.statekeep-data")
events = []

with open_store(url) as store:
    store.add_listener(lambda n: events.append(n))

    # versioned put and compare-and-set
    stat = store.put("/quickstart/config", b'{"parallelism": 1}')
    print(f"put /quickstart/config -> version {stat.version}")
    current = store.get("/quickstart/config")
    store.put("/quickstart/config", b'{"parallelism": 2}', expected_version=current.stat.version)
    try:
        store.put("/quickstart/config", b'{"parallelism": 3}', expected_version=current.stat.version)
    except BadVersionError as e:
        print(f"a stale compare-and-set loses the race: {e}")

    # sequential and ephemeral keys, atomic multi-operations
    for _ in range(3):
        store.put("/quickstart/jobs/job-", b"", sequential=True)
    store.put("/quickstart/workers/me", b"alive", ephemeral=True)
    store.multi([Put("/quickstart/a", b"1"), Put("/quickstart/b", b"2")])
    print("children of /quickstart:", store.get_children("/quickstart"))
    print("jobs:", store.get_children("/quickstart/jobs"))

    time.sleep(0.2)  # notifications are delivered asynchronously
    created = sum(1 for e in events if e.type is NotificationType.Created)
    print(f"notifications seen: {len(events)} ({created} Created)")

print(f"done; inspect it with: statekeep metadata ls /quickstart --store {url}")
