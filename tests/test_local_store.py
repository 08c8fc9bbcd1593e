"""local:// beyond the contract: crashes, several processes, durability bookkeeping."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from statekeep.errors import StoreClosedError
from statekeep.metadata import NotificationType, open_store

from statekeep.testing import wait_for

WRITER = textwrap.dedent("""
    import sys, threading
    from statekeep.metadata import open_store
    store = open_store("local://" + sys.argv[1])
    lock = threading.Lock()

    def write(thread):
        for i in range(1_000_000):
            path = f"/w/t{thread}/{i:08d}"
            store.put(path, path.encode() * 3)
            with lock:  # printed only after put() returned: an acknowledged write
                sys.stdout.write(path + "\\n")
                sys.stdout.flush()

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
""")

CAS_INCREMENTER = textwrap.dedent("""
    import sys
    from statekeep.errors import BadVersionError
    from statekeep.metadata import open_store
    store = open_store("local://" + sys.argv[1])
    successes = 0
    for _ in range(int(sys.argv[2])):
        current = store.get("/counter")
        try:
            store.put("/counter", (int(current.value) + 1).__str__().encode(), current.stat.version)
            successes += 1
        except BadVersionError:
            pass
    print(successes)
""")


def python(code: str, *args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], text=True, **kwargs)


@pytest.mark.parametrize("trial", range(10))
def test_sigkill_loses_no_acknowledged_write(tmp_path, trial):
    rng = random.Random(trial)
    writer = python(WRITER, str(tmp_path), stdout=subprocess.PIPE)
    first = writer.stdout.readline()  # writing has begun; now kill it at a random moment
    time.sleep(rng.uniform(0.0, 0.5))
    os.kill(writer.pid, signal.SIGKILL)
    out, _ = writer.communicate()
    acknowledged = [line for line in (first + out).splitlines() if line.startswith("/w/")]
    assert acknowledged

    store = open_store(f"local://{tmp_path}")
    try:
        for path in acknowledged:
            result = store.get(path)
            assert result is not None and result.value == path.encode() * 3, path
        # the store is readable and consistent: every listed child can be read
        for thread in store.get_children("/w"):
            for name in store.get_children(f"/w/{thread}"):
                assert store.get(f"/w/{thread}/{name}") is not None
    finally:
        store.close()


def test_cas_increments_from_several_processes(tmp_path):
    store = open_store(f"local://{tmp_path}")
    store.put("/counter", b"0")
    workers = [python(CAS_INCREMENTER, str(tmp_path), "150", stdout=subprocess.PIPE) for _ in range(4)]
    successes = sum(int(w.communicate()[0]) for w in workers)
    assert all(w.returncode == 0 for w in workers)
    result = store.get("/counter")
    assert int(result.value) == successes == result.stat.version
    store.close()


def test_killed_process_ephemeral_keys_vanish_with_notification(tmp_path):
    observer = open_store(f"local://{tmp_path}")
    events = []
    observer.add_listener(events.append)
    holder = python(textwrap.dedent("""
        import sys, time
        from statekeep.metadata import open_store
        store = open_store("local://" + sys.argv[1])
        store.put("/locks/owner", b"me", ephemeral=True)
        print("held", flush=True)
        time.sleep(600)
    """), str(tmp_path), stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == "held"
    assert observer.get("/locks/owner").stat.ephemeral
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert wait_for(lambda: not observer.exists("/locks/owner"))
    assert wait_for(lambda: any(e.type is NotificationType.Deleted and e.path == "/locks/owner" for e in events))
    assert any(e.type is NotificationType.Created and e.path == "/locks/owner" for e in events)
    observer.close()


def test_without_listeners_the_watcher_only_reaps_and_a_first_listener_gets_only_later_changes(tmp_path):
    """A process whose stores do not listen (a Spark task's) is not woken every poll interval; a listener
    added later is told of the changes after it was added, not of those made while no one listened."""
    store = open_store(f"local://{tmp_path}?poll_interval=0.005&reap_interval=5")
    try:
        engine = store._engine
        assert engine._watch() > 1  # the next tick is the next reap, seconds away
        store.put("/before", b"x")
        events = []
        store.add_listener(events.append)
        assert engine._watch() == 0.005  # polled every poll interval while someone listens
        store.put("/after", b"y")
        assert wait_for(lambda: any(e.path == "/after" for e in events))
        assert not any(e.path == "/before" for e in events)
    finally:
        store.close()


def test_store_opened_before_fork_is_refused_in_the_child(tmp_path):
    store = open_store(f"local://{tmp_path}")
    store.put("/k", b"v")
    pid = os.fork()
    if pid == 0:  # child: the inherited store must refuse; a new one works
        code = 1
        try:
            store.get("/k")
        except StoreClosedError:
            fresh = open_store(f"local://{tmp_path}")
            code = 0 if fresh.get("/k").value == b"v" else 2
            fresh.close()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.get("/k").value == b"v"  # the parent's store is untouched by the child
    store.close()


def test_group_commit_shares_transactions(tmp_path):
    import threading

    store = open_store(f"local://{tmp_path}")
    before = store.commit_count

    def write(t):
        for i in range(50):
            store.put(f"/g/{t}/{i}", b"x")

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    commits = store.commit_count - before
    assert sum(len(store.get_children(f"/g/{t}")) for t in range(8)) == 400
    assert commits < 400  # some puts shared a commit (and so an fsync)
    store.close()


def test_map_full_is_a_clear_error_and_writes_nothing(tmp_path):
    from statekeep.errors import StoreUnavailableError

    store = open_store(f"local://{tmp_path}", map_size=1 << 20)
    store.put("/small", b"ok")
    with pytest.raises(StoreUnavailableError, match="map_size"):
        for i in range(100):
            store.put(f"/big/{i}", b"x" * 60_000)
    assert store.get("/small").value == b"ok"
    store.close()


def test_overlong_path_is_an_invalid_path_and_writes_nothing(tmp_path):
    from statekeep.errors import InvalidPathError

    store = open_store(f"local://{tmp_path}")
    long_path = "/" + "x" * 600
    with pytest.raises(InvalidPathError, match="longer than local://"):
        store.put(long_path, b"v")
    with pytest.raises(InvalidPathError):
        store.get(long_path)
    assert store.get_children("/") == []
    store.put("/" + "y" * 500, b"fits")
    store.close()


OPEN_DB_DURING_A_COMMIT = """
import sys, threading, time
from statekeep.metadata import open_store
from statekeep.metadata.embedded import embedded_engine

engine = embedded_engine(open_store(sys.argv[1]))
calling = threading.Event()

def build(reader, now_ms):  # Python code inside the write transaction: it needs the GIL to go on
    calling.wait()
    for _ in range(200):
        time.sleep(0.001)
    return None, None

committer = threading.Thread(target=engine.submit, args=(build,))
committer.start()
calling.set()
engine.open_db(b"opened_meanwhile")  # while the other thread's write transaction is open
committer.join()
print("ok")
"""


def test_a_database_opened_while_another_thread_commits_does_not_hang_the_process(tmp_path):
    """LMDB's open_db without a transaction waits for the writer lock holding the GIL: while another thread
    of the process was inside a write transaction (the group commit running Python code), the whole process
    hung for good, e.g. a server whose first state read came while its worker was writing."""
    result = subprocess.run([sys.executable, "-c", OPEN_DB_DURING_A_COMMIT, f"local://{tmp_path / 'store'}"],
                            capture_output=True, text=True, timeout=60)  # a hang fails as TimeoutExpired
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_a_commit_that_trims_every_old_event_succeeds_and_notifications_go_on(tmp_path, monkeypatch):
    """Every 64th commit trims the notification log of events older than a minute. When every event is that
    old and the commit adds none (a write to the engine's own databases, as function state's are, or a dead
    session's expiry with no key left), the trim must stop at the log's end, not read past it (seen: 'local
    store commit failed: error(unpack_from requires a buffer of at least 9 bytes...)', the whole commit
    refused), and keep the newest event: the next event's id follows it, and a watcher that saw it would miss
    events numbered from 1 again."""
    from statekeep.metadata import local
    from statekeep.metadata.embedded import embedded_engine

    store = open_store(f"local://{tmp_path / 'store'}")
    events = []
    store.add_listener(events.append)
    for i in range(3):
        store.put(f"/old/{i}", b"")
    engine = embedded_engine(store)
    db = engine.open_db(b"own")
    monkeypatch.setattr(local, "EVENT_RETENTION_MS", -60_000)  # every event is now older than the retention
    for i in range(130):  # two trims, each with nothing newer left in the log
        engine.submit(lambda reader, now_ms, i=i: (reader.txn.put(b"%d" % i, b"v", db=db), None))
    with engine.read(db) as txn:
        assert [txn.get(b"%d" % i) for i in (0, 63, 64, 129)] == [b"v"] * 4
    with engine.read(engine.events) as txn:
        assert txn.stat(engine.events)["entries"] == 1  # the trims left only the newest event
    monkeypatch.undo()
    store.put("/new", b"")  # the log goes on from empty: the next change is written and notified
    assert wait_for(lambda: any(e.path == "/new" for e in events))
    store.close()
