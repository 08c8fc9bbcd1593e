"""Followers (KIP-813) on the embedded default (``local://``, embedded provider), two measurements:

1. Lag at a steady 5k updates/s: this process writes ``apply_batch`` batches (every 10 ms, each
   value the batch's number) to a leader function; a follower in ANOTHER process records when each
   batch is applied locally. Lag = follower applied (its local write durable) - leader commit
   (``apply_batch`` returned, durable), on the machine-wide monotonic clock. Baseline in the same
   run: the leader's own commit latency. Target: follower lag p99 < 100 ms.
2. Restore: a leader with N keys (default 1M) each updated ROUNDS times (a history of N x (ROUNDS+1)
   records), a snapshot, then a tail of 1% more updates. A new follower bootstrapping from the
   snapshot plus the tail, against one replaying the whole changelog (no snapshots). Target >= 5x.
3. Subset restore (followers of a key prefix): a follower of the 1% of keys under one prefix
   bootstrapping from the same snapshot plus tail, against the full restore of (2); time and disk
   used by each replica's directory (LMDB file size after the restore). ``--no-replay`` skips the
   replay baseline of (2), ``--no-lag`` skips (1).

    python benchmarks/followers.py [--quick] [--keys N] [--rounds R] [--seconds S] [--rate U] [--no-lag] [--no-replay]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from statekeep.changelog import FollowerStore, SnapshotStore
from statekeep.state import open_provider

FUNCTION = ("bench", "ns", "fn")


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ---- 1. lag --------------------------------------------------------------------------------------

def follower_process(url: str, local_dir: str, out: str) -> None:
    """Runs in the follower's process: apply times per batch number, written to ``out`` on 'quit'."""
    applied: dict[int, float] = {}

    def on_apply(batch) -> None:
        now = time.monotonic()
        for r in batch:
            if r.value is not None and r.kind == "bytes":
                applied[int(r.value)] = now

    follower = FollowerStore.open(open_provider("embedded", {"metadata_url": url}), *FUNCTION,
                                  local_dir=local_dir, snapshots=False, on_apply=on_apply, poll_interval=0.002)
    print("ready", flush=True)
    sys.stdin.readline()
    follower.wait_until_caught_up(60)
    follower.close()
    with open(out, "w") as f:
        json.dump(applied, f)


def bench_lag(work: str, seconds: float, rate: int) -> dict:
    url = f"local://{work}/leader"
    provider = open_provider("embedded", {"metadata_url": url})
    state = provider.get_state_store(*FUNCTION)
    state.put("warm", b"0")
    out = os.path.join(work, "applied.json")
    proc = subprocess.Popen([sys.executable, __file__, "--follower-process", url, f"{work}/follower", out],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    started: dict[int, float] = {}
    committed: dict[int, float] = {}
    begin = time.monotonic()
    written = batch_no = 0
    while time.monotonic() - begin < seconds:
        due = int((time.monotonic() - begin) * rate) - written  # steady rate, whatever a commit costs
        if due <= 0:
            time.sleep(0.001)
            continue
        batch_no += 1
        puts = {f"k{(written + i) % 10_000}": b"%d" % batch_no for i in range(due)}
        started[batch_no] = time.monotonic()
        state.apply_batch(puts, {})
        committed[batch_no] = time.monotonic()
        written += due
        time.sleep(max(0.0, 0.010 - (committed[batch_no] - started[batch_no])))
    elapsed = time.monotonic() - begin
    proc.stdin.write("quit\n")
    proc.stdin.flush()
    assert proc.wait(120) == 0
    applied = {int(k): v for k, v in json.load(open(out)).items()}
    provider.close()
    warm = [b for b in committed if committed[b] - begin > min(2.0, seconds / 5)]  # skip the warm-up
    lag = [max(0.0, applied[b] - committed[b]) * 1000 for b in warm]
    e2e = [(applied[b] - started[b]) * 1000 for b in warm]
    commit = [(committed[b] - started[b]) * 1000 for b in warm]
    return {"rate": written / elapsed, "batches": len(warm), "lag": lag, "e2e": e2e, "commit": commit,
            "missing": sum(1 for b in committed if b not in applied)}


# ---- 2. restore ----------------------------------------------------------------------------------

def disk_bytes(path: str) -> int:
    """Bytes the files under ``path`` occupy on disk (allocated blocks: LMDB's map is sparse)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def subset_prefix(keys: int) -> tuple[str, int]:
    """A prefix of ``key%08d`` covering about 1% of ``keys`` keys, in the middle of the key range (so a
    restore steps over half the snapshot before it), and how many keys it covers."""
    digits = 8
    while digits > 0 and 10 ** (8 - digits + 1) * 100 <= keys:  # the next shorter prefix is still <= 1%
        digits -= 1
    prefix = f"key{(keys // 2) // 10 ** (8 - digits):0{digits}d}"
    return prefix, sum(1 for i in range(keys) if f"key{i:08d}".startswith(prefix))


def bench_restore(work: str, keys: int, rounds: int, replay: bool = True) -> dict:
    provider = open_provider("embedded", {"metadata_url": f"local://{work}/leader2"})
    state = provider.get_state_store(*FUNCTION)
    chunk = 20_000
    t = time.perf_counter()
    for r in range(rounds + 1):
        for start in range(0, keys, chunk):
            state.apply_batch({f"key{i:08d}": b"value-%d-%d" % (r, i) for i in range(start, min(keys, start + chunk))},
                              {})
    history_s = time.perf_counter() - t
    t = time.perf_counter()
    snapshot = SnapshotStore(provider.store).create(state)
    snapshot_s = time.perf_counter() - t
    tail = max(1, keys // 100)
    for start in range(0, tail, chunk):
        state.apply_batch({f"key{i * 97 % keys:08d}": b"tail" for i in range(start, min(tail, start + chunk))}, {})
    records = state.count_changelog()
    leader_digest = digest(state)

    prefix, subset_keys = subset_prefix(keys)
    subset_digest = digest(state, prefix)

    def follow(name: str, snapshots: bool, key_prefix: str = "") -> tuple[float, str, int]:
        t0 = time.perf_counter()
        with FollowerStore.open(provider, *FUNCTION, local_dir=f"{work}/{name}", snapshots=snapshots,
                                key_prefix=key_prefix) as f:
            assert f.wait_until_caught_up(3600)
            took = time.perf_counter() - t0
            return took, digest(f), disk_bytes(f"{work}/{name}")

    subset, sub_digest, subset_disk = follow("subset-from-snapshot", True, prefix)
    from_snapshot, snap_digest, full_disk = follow("from-snapshot", True)
    replay_s, replay_digest = (follow("replay", False)[:2] if replay else (None, leader_digest))
    provider.close()
    assert snap_digest == leader_digest == replay_digest, "a follower differs from the leader"
    assert sub_digest == subset_digest, "the subset follower differs from the leader's subset"
    return {"keys": keys, "records": records, "history_s": history_s, "snapshot_s": snapshot_s,
            "snapshot_bytes": snapshot.size, "from_snapshot": from_snapshot, "replay": replay_s, "tail": tail,
            "prefix": prefix, "subset_keys": subset_keys, "subset": subset, "subset_disk": subset_disk,
            "full_disk": full_disk}


def digest(store, prefix: str = "") -> str:
    import hashlib

    h = hashlib.sha256()
    for e in store.scan_entries(prefix):
        h.update(e.key.encode() + b"\0" + bytes(e.value) + b"\0%d\0" % e.version)
    return h.hexdigest()


# ---- main ----------------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--follower-process":
        follower_process(*sys.argv[2:5])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100k keys, 6 s of lag measurement")
    parser.add_argument("--keys", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=5, help="updates per key after its creation (default 5)")
    parser.add_argument("--seconds", type=float, default=None, help="lag measurement (default 20, quick 6)")
    parser.add_argument("--rate", type=int, default=5000, help="updates per second (default 5000)")
    parser.add_argument("--no-lag", action="store_true", help="skip the lag measurement")
    parser.add_argument("--no-replay", action="store_true", help="skip the changelog replay baseline of the restore")
    args = parser.parse_args()
    keys = args.keys or (100_000 if args.quick else 1_000_000)
    seconds = args.seconds or (6.0 if args.quick else 20.0)
    work = tempfile.mkdtemp(prefix="statekeep-followers-")
    try:
        lag = None if args.no_lag else bench_lag(work, seconds, args.rate)
        restore = bench_restore(work, keys, args.rounds, replay=not args.no_replay)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    rows = []
    if lag is not None:
        rows += [
            (f"lag at {lag['rate']:.0f} updates/s, p50", f"{pct(lag['lag'], .5):.1f} ms", "leader commit p50",
             f"{pct(lag['commit'], .5):.1f} ms", f"{pct(lag['lag'], .5) / pct(lag['commit'], .5):.2f}x"),
            ("lag p99 (target < 100 ms)", f"{pct(lag['lag'], .99):.1f} ms", "leader commit p99",
             f"{pct(lag['commit'], .99):.1f} ms", f"{pct(lag['lag'], .99) / pct(lag['commit'], .99):.2f}x"),
            ("lag max", f"{max(lag['lag']):.1f} ms", "write start -> applied p99",
             f"{pct(lag['e2e'], .99):.1f} ms", ""),
        ]
    if restore["replay"] is not None:
        rows.append((f"restore {restore['keys']:,} keys: snapshot + {restore['tail']:,} tail",
                     f"{restore['from_snapshot']:.2f} s", f"replay {restore['records']:,} records",
                     f"{restore['replay']:.2f} s", f"{restore['replay'] / restore['from_snapshot']:.1f}x faster"))
    rows += [
        (f"subset restore: prefix {restore['prefix']!r}, {restore['subset_keys']:,} keys", f"{restore['subset']:.2f} s",
         f"full restore, {restore['keys']:,} keys", f"{restore['from_snapshot']:.2f} s",
         f"{restore['from_snapshot'] / restore['subset']:.1f}x faster"),
        ("subset replica on disk", f"{restore['subset_disk'] / 1e6:.1f} MB", "full replica on disk",
         f"{restore['full_disk'] / 1e6:.1f} MB",
         f"{restore['full_disk'] / max(1, restore['subset_disk']):.1f}x smaller"),
    ]
    header = ("measurement", "result", "baseline (same run)", "baseline result", "ratio")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(5)]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    if lag is not None:
        print(f"\nlag: {lag['batches']} batches after warm-up, {lag['missing']} never applied")
    print(f"restore: history written in {restore['history_s']:.1f} s, snapshot of "
          f"{restore['snapshot_bytes'] / 1e6:.1f} MB taken in {restore['snapshot_s']:.1f} s; "
          "followers equal the leader")
    if lag is not None and restore["replay"] is not None:
        ok = pct(lag["lag"], .99) < 100 and restore["replay"] / restore["from_snapshot"] >= 5
        print("targets (lag p99 < 100 ms, restore >= 5x):", "met" if ok else "NOT met")


if __name__ == "__main__":
    main()
