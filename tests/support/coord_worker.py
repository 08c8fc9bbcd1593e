"""A separate process for the coordination tests: ``python coord_worker.py MODE URL PATH ...``.

Modes:
  lock URL PATH LOG N       once LOG.go exists, take the lock N times (alternating become_leader and
                            acquire_lock); while holding, append "enter PID I" / "exit PID I" lines
                            to LOG (O_APPEND)
  leader URL PATH OUT HOLD  announce "waiting PID", become leader, append "leader PID TIME";
                            then hold forever if HOLD is "hold", else release and exit
  counter URL PATH OUT N    append N values of next_counter_value(PATH) to OUT, one per line
  register URL PATH OUT C N once OUT.go exists, as client C, do N random register operations on PATH and append the
                            history to OUT as JSON lines (see statekeep.testing.linearizability)
  put URL PATH VALUE        put VALUE (utf-8) at PATH
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

from statekeep.coordination import CoordinationService
from statekeep.errors import LockBusyError
from statekeep.metadata import open_store
from statekeep.testing.linearizability import run_client, to_json


def append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode() + b"\n")  # one small O_APPEND write: never interleaved
    finally:
        os.close(fd)


def start_together(out: str) -> None:
    """Announce readiness in OUT.ready, then wait for the test to create OUT.go."""
    append(out + ".ready", f"{os.getpid()}.{threading.get_ident()}")
    deadline = time.monotonic() + 120
    while not os.path.exists(out + ".go") and time.monotonic() < deadline:
        time.sleep(0.002)


def lock_loop(coord: CoordinationService, path: str, log: str, n: int) -> None:
    pid = f"{os.getpid()}.{threading.get_ident()}"  # on memory:// the workers are threads of one process
    start_together(log)
    for i in range(n):
        if i % 2:
            lock = coord.become_leader(path, pid.encode()).result(timeout=120)
        else:
            while True:
                try:
                    lock = coord.acquire_lock(path, pid.encode())
                    break
                except LockBusyError:
                    time.sleep(random.uniform(0.001, 0.005))
        append(log, f"enter {pid} {i}")
        time.sleep(random.uniform(0.001, 0.004))
        append(log, f"exit {pid} {i}")
        lock.release()
        time.sleep(random.uniform(0.001, 0.006))  # give the others a chance: a handover test needs handovers


def main(argv: list[str]) -> None:
    mode, url, path, *rest = argv
    store = open_store(url)
    coord = CoordinationService(store)
    try:
        if mode == "lock":
            lock_loop(coord, path, rest[0], int(rest[1]))
        elif mode == "leader":
            out, hold = rest
            future = coord.become_leader(path, b"%d" % os.getpid())
            append(out, f"waiting {os.getpid()}")
            lock = future.result(timeout=300)
            append(out, f"leader {os.getpid()} {time.time():.6f}")
            if hold == "hold":
                while True:
                    time.sleep(60)
            lock.release()
        elif mode == "counter":
            out, n = rest
            values = [coord.next_counter_value(path) for _ in range(int(n))]
            append(out, "\n".join(map(str, values)))
        elif mode == "register":  # one client of a linearizability history, as JSON lines
            out, client, n = rest
            start_together(out)
            ops = run_client(store, path, int(client), int(n), fault_rate=0.03, seed=2)
            append(out, "\n".join(json.dumps(to_json(op)) for op in ops))
        elif mode == "put":
            store.put(path, rest[0].encode())
        else:
            raise SystemExit(f"unknown mode {mode}")
    finally:
        coord.close()
        store.close()


if __name__ == "__main__":
    main(sys.argv[1:])
