"""State handles against raw sequential file I/O with fsync, in one run, on the same disk.

    python benchmarks/handles.py [--size 1G] [--chunk 8M] [--repeat 3] [--dir DIR] [--store URL]

Writes a state of ``--size`` bytes through ``StateHandleStore.add_and_lock`` (streamed in chunks from an
iterator: temp file, sha256, fsync, rename, handle in the metadata store) and reads it back through
``handle.open()`` (read-ahead, sha256 verified), against a raw loop doing the same sequential writes with
one fsync and the same sequential reads. Reads are timed with the file evicted from the page cache (cold,
``posix_fadvise(DONTNEED)``) and cached (warm). Prints throughput, the ratio statekeep/raw (median of
``--repeat`` runs), and peak memory while streaming (tracemalloc peak and ru_maxrss growth).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import statistics
import tempfile
import time
import tracemalloc
import uuid

from statekeep.handles import StateHandleStore
from statekeep.metadata import open_store

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = text[-1] if text and text[-1] in UNITS else ""
    return int(float(text[: len(text) - len(unit)]) * UNITS[unit])


def chunks(block: bytes, size: int):
    sent = 0
    while sent < size:
        piece = block if size - sent >= len(block) else block[: size - sent]
        sent += len(piece)
        yield piece


def fresh_chunks(block: bytes, size: int):
    """Like ``chunks`` but a new bytes object each time, as a real source (a file, a socket) produces."""
    for i, piece in enumerate(chunks(block, size)):
        yield piece[i % 251:] + piece[: i % 251]


def evict(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def raw_write(path: str, block: bytes, size: int) -> None:
    with open(path, "wb") as f:
        for piece in chunks(block, size):
            f.write(piece)
        f.flush()
        os.fsync(f.fileno())


def raw_read(path: str, chunk: int, digest: bool = False) -> None:
    h = hashlib.sha256() if digest else None
    with open(path, "rb", buffering=0) as f:
        while piece := f.read(chunk):
            if h is not None:
                h.update(piece)


def stream_read(handle, chunk: int) -> None:
    with handle.open() as stream:
        while stream.read(chunk):
            pass


def maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G", help="state size, e.g. 1G, 256M (default %(default)s)")
    parser.add_argument("--chunk", default="8M", help="chunk size (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=4, help="timed runs of each operation (default %(default)s)")
    parser.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir)")
    parser.add_argument("--store", default=None, help="metadata store URL (default: a fresh memory://)")
    args = parser.parse_args()
    size, chunk = parse_size(args.size), parse_size(args.chunk)
    block = os.urandom(chunk)
    work = tempfile.mkdtemp(prefix="statekeep-bench-", dir=args.dir)
    store = open_store(args.store or f"memory://{uuid.uuid4().hex}")
    handles = StateHandleStore(store, f"/bench/{uuid.uuid4().hex}", f"file://{work}/blobs", chunk_size=chunk)
    raw_path = os.path.join(work, "raw.bin")

    # Memory first, in a process whose high-water mark is still low: one write and one read, traced.
    rss_before = maxrss_mib()
    tracemalloc.start()
    handle = handles.add_and_lock("memory", fresh_chunks(block, size))
    _, write_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    stream_read(handle, chunk)
    _, read_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_growth = maxrss_mib() - rss_before
    handles.release_and_try_remove("memory")

    runs: dict[str, list[float]] = {
        k: [] for k in ("sk_w", "raw_w", "sk_rc", "raw_rc", "sk_rw", "raw_rw", "raw_rw_sha")}
    # Untimed warm-up: on thin-provisioned virtual disks the first write to fresh blocks is much slower
    # than later ones; write (and free) space for both first, then alternate which one goes first.
    raw_write(raw_path, block, size)
    os.unlink(raw_path)
    for run in range(args.repeat):
        key = f"run-{run}"
        sk_write = lambda: handles.add_and_lock(key, chunks(block, size))  # noqa: E731
        if run % 2 == 0:
            runs["raw_w"].append(timed(lambda: raw_write(raw_path, block, size)))
            runs["sk_w"].append(timed(sk_write))
        else:
            runs["sk_w"].append(timed(sk_write))
            runs["raw_w"].append(timed(lambda: raw_write(raw_path, block, size)))
        handle = handles.get_and_lock(key)
        blob_path = handle.blob_url.removeprefix("file://")
        evict(raw_path)
        runs["raw_rc"].append(timed(lambda: raw_read(raw_path, chunk)))
        evict(blob_path)
        runs["sk_rc"].append(timed(lambda: stream_read(handle, chunk)))
        runs["raw_rw"].append(timed(lambda: raw_read(raw_path, chunk)))
        runs["sk_rw"].append(timed(lambda: stream_read(handle, chunk)))
        runs["raw_rw_sha"].append(timed(lambda: raw_read(raw_path, chunk, digest=True)))
        os.unlink(raw_path)  # untimed clean-up of both
        handles.release_and_try_remove(key)

    gib = size / (1 << 30)
    rate = {k: gib / statistics.median(v) for k, v in runs.items()}
    print(f"state {size / (1 << 20):.0f} MiB in {chunk / (1 << 20):g} MiB chunks, {args.repeat} runs (median), "
          f"blobs and raw file in {work}")
    print(f"{'operation':<34}{'statekeep GiB/s':>16}{'raw GiB/s':>12}{'ratio':>8}")
    for label, sk, raw in (("write + fsync", "sk_w", "raw_w"), ("read, cold cache (verified)", "sk_rc", "raw_rc"),
                           ("read, warm cache (verified)", "sk_rw", "raw_rw"),
                           ("read, warm, vs raw read + sha256", "sk_rw", "raw_rw_sha")):
        print(f"{label:<34}{rate[sk]:>16.3f}{rate[raw]:>12.3f}{rate[sk] / rate[raw]:>7.2f}x")
    print(f"peak memory while streaming: tracemalloc {write_peak / (1 << 20):.1f} MiB (write), "
          f"{read_peak / (1 << 20):.1f} MiB (read); ru_maxrss growth {rss_growth:.1f} MiB; "
          f"state {size / (1 << 20):.0f} MiB")
    store.close()
    shutil.rmtree(work, ignore_errors=True)

if __name__ == "__main__":
    main()
