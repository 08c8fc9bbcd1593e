"""Pulsar function state through a provider, in one run: a Java function's ``incrCounter`` and ``getState`` on a real
Pulsar functions worker with statekeep as its PIP-312 state provider, against the standalone's own provider.

    python benchmarks/pulsar.py [--ops N] [--rounds R]

It starts a ``statekeep standalone`` (its embedded default store, in a temp dir, no Spark worker) and, one after the
other, two Pulsar standalones (``statekeep.testing.servers.pulsar``, the jars ``scripts/pulsar-setup`` installs):

- statekeep: the functions worker's ``stateStorageProviderImplementation`` is statekeep's
  (java/pulsar-state-provider): each state call is one REST request to the statekeep server;
- built-in: the standalone's own ``PulsarMetadataStateStoreProviderImpl`` on a RocksDB metadata store in the
  broker's JVM (what a 4.x standalone uses; a cluster's default is BookKeeper's table service).

On each, a Java function (benchmarks/pulsar_function, compiled with ``javac``) gets R + 1 inputs "N": each makes N
``context.incrCounter`` calls, puts one 16-byte value, then makes N ``context.getState`` calls of it, timing each
call with ``System.nanoTime`` inside the worker, and answers each kind's p50 and p99 in microseconds with the
counter's value. The first input warms up (class loading, connections, JIT) and is not reported; the table shows
the median over the R rounds of each figure, and the ratio statekeep / built-in. The counter read back must equal
(R + 1) * N on both: a provider that loses increments is marked NO.

Each broker's ready time (start to its functions worker answering) is printed too.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# this file is pulsar.py: its directory, first on sys.path when run as a script, would shadow pulsar-client's module
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import httpx  # noqa: E402 - after the path fix above

from statekeep.testing import servers  # noqa: E402
from statekeep.testing.pulsar import create_topic, deploy, function_jar  # noqa: E402

FUNCTION = Path(__file__).resolve().parent / "pulsar_function"


def statekeep_server(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = servers.free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(directory / "statekeep.log", "wb")  # noqa: SIM115 - the server's, closed with it
    process = subprocess.Popen([sys.executable, "-m", "statekeep.cli", "standalone", "--data-dir",
                                str(directory / "statekeep"), "--port", str(port), "--no-worker"],
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"statekeep did not start; see {directory / 'statekeep.log'}")


def measure(directory: Path, jar: Path, state_url: str | None, ops: int, rounds: int) -> tuple[list[float], bool]:
    """[incr p50, incr p99, get p50, get p99] medians over ``rounds``, and whether the counter was exact."""
    import pulsar

    started = time.monotonic()
    broker = servers.pulsar(directory, servers.free_port(), state_url)
    try:
        broker.start()
        print(f"  {'statekeep' if state_url else 'built-in'}: broker ready in {time.monotonic() - started:.1f} s",
              flush=True)
        create_topic(broker.web_url, "bench-in")
        create_topic(broker.web_url, "bench-out")
        deploy(broker.web_url, "bench", jar, "StateBench", "bench-in", "bench-out")
        client = pulsar.Client(broker.service_url, logger=_quiet())
        string = pulsar.schema.StringSchema()
        consumer = client.subscribe("persistent://public/default/bench-out", "bench", schema=string,
                                    initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer("persistent://public/default/bench-in", schema=string)
        answers = []
        for _ in range(rounds + 1):
            producer.send(str(ops))
            message = consumer.receive(600_000)
            consumer.acknowledge(message)
            answers.append([float(x) for x in message.value().split()])
        client.close()
    finally:
        broker.stop()
    figures = [statistics.median(a[i] for a in answers[1:]) for i in range(4)]
    return figures, int(answers[-1][4]) == (rounds + 1) * ops


def _quiet() -> object:
    import logging

    logger = logging.getLogger("benchmark.pulsar")
    logger.setLevel(logging.WARNING)
    return logger


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=2000, help="state calls of each kind per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds reported (after one warm-up)")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="statekeep-bench-pulsar-"))
    process = None
    try:
        jar = function_jar(FUNCTION, directory / "function")
        process, url = statekeep_server(directory)
        ours, our_exact = measure(directory / "pulsar-statekeep", jar, url, args.ops, args.rounds)
        theirs, their_exact = measure(directory / "pulsar-builtin", jar, None, args.ops, args.rounds)
    finally:
        if process is not None:
            process.terminate()
            process.wait(30)
        shutil.rmtree(directory, ignore_errors=True)
    print(f"\nJava function state calls, {args.ops} per kind per round, median of {args.rounds} rounds (µs)")
    print(f"{'provider':<12}{'incr p50':>10}{'incr p99':>10}{'get p50':>10}{'get p99':>10}{'exact':>7}")
    for name, row, exact in (("statekeep", ours, our_exact), ("built-in", theirs, their_exact)):
        print(f"{name:<12}" + "".join(f"{x:>10.1f}" for x in row) + f"{'yes' if exact else 'NO':>7}")
    print(f"{'ratio':<12}" + "".join(f"{a / b:>9.1f}x" for a, b in zip(ours, theirs)) + "   (statekeep / built-in)")


if __name__ == "__main__":
    main()
