"""One owner of an executor's Kafka producers: the delivery agent.

Spark runs a partition's next micro-batch in whichever Python worker of the executor is idle. A transactional
producer kept by one worker was therefore fenced, most batches, by the next worker's producer of the same
``transactional.id`` (its ``init_transactions``), which then looked up what Kafka had committed before writing:
two round trips to the cluster per (batch, partition), on the task's critical path.

So the Python workers of an executor hand their deliveries to one agent process per executor, as Kafka Streams'
thread owns its producer and Flink's ``KafkaSink`` pools its own. The agent (:data:`AGENT_MODULE` run as a
program) runs the same ``KafkaDelivery`` (the protocol of :mod:`statekeep.functions.messaging.kafka`), keeping each
id's producer, and its group's look-up consumer, from batch to batch; each id's deliveries run one at a time, in
the order they came (its lane). The first worker that needs the agent starts it (under a file lock: one per
executor) (:func:`warm` can also have an id's producer made ahead of its deliveries; no task calls it now: see
ARCHITECTURE.md); it leaves when the executor's Python daemon (its starter's parent) is gone, having ended what it was
handed, or after :data:`IDLE_SECONDS` without a delivery.

**Delivery behind the task** (:func:`behind`). A task whose state commit is its own hands its kept batch to the
agent and ends: the Kafka commit leaves the task's critical path, and Spark's next micro-batch runs meanwhile. The
agent accepts it only if every earlier batch of the partition still kept was handed to it since the id's last
failed delivery, so the id's batches reach Kafka in batch order and those Kafka has are always a prefix. A
delivery behind that fails is not retried: the batch stays kept, the id's next request is refused, and its task
catches the partition up (:func:`catch_up`: fenced, the first batch Kafka lacks looked up, the rest delivered in
order). Spark's replay of a batch catches up the same way, and so does the query's end (the driver drains this
machine's agents, then catches up any partition whose last kept batch Kafka lacks:
``statekeep.functions.messaging.kafka.settle``). An agent killed with batches handed is the same as a failed
delivery: they are kept. Outside a Spark task (the driver, a trigger, a test) delivery runs in the calling process;
``STATEKEEP_KAFKA_AGENT=0`` makes tasks do so too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from statekeep.errors import StatekeepError
from statekeep.lru import memo

#: the module whose ``__main__`` is the agent (with Kafka's delivery: it imports this one, not this one it)
AGENT_MODULE = "statekeep.functions.messaging.kafkatxn"
#: the agent leaves after this long without a delivery (its producers' transactions are all ended by then)
IDLE_SECONDS = 600.0
#: how long a worker waits for a new agent to listen
START_SECONDS = 30.0
_FRAME = struct.Struct(">Q")


def wanted() -> bool:
    """Whether deliveries go to the executor's agent: in a Spark task (a Python worker), unless
    ``STATEKEEP_KAFKA_AGENT=0``."""
    if os.environ.get("STATEKEEP_KAFKA_AGENT", "1") == "0":
        return False
    taskcontext = sys.modules.get("pyspark.taskcontext")
    return taskcontext is not None and taskcontext.TaskContext.get() is not None


class AgentError(StatekeepError):
    """The executor's delivery agent could not be reached, or died before it answered."""


_warmed: dict[tuple[str, str], bool] = memo()  # the ids this worker asked the agent to ready


def warm(bootstrap: str, transactional_id: str) -> None:
    """Once per worker process and id, without waiting: the agent started if none answers, and asked to make the
    id's producer ready (``KafkaDelivery.warm``) while the task runs, ahead of the id's deliveries (its lane runs
    it first). A failure is left to the delivery, which starts the agent and the producer itself."""
    if (bootstrap, transactional_id) in _warmed:
        return
    _warmed[(bootstrap, transactional_id)] = True

    def ask() -> None:
        with contextlib.suppress(Exception):
            _ask({"op": "warm", "bootstrap": bootstrap, "id": transactional_id}, START_SECONDS)

    threading.Thread(target=ask, name=f"statekeep-warm-{transactional_id}", daemon=True).start()


def deliver(bootstrap: str, transactional_id: str, batch: int | None, table: Any, *, replay: bool,
            timeout: float) -> bool:
    """The agent's delivery of ``table`` (``KafkaDelivery.deliver``'s arguments), the agent started if none
    answers; waits up to ``timeout`` seconds for its answer. Raises what the agent's delivery raised, or
    :class:`AgentError` if the agent could not be reached or died."""
    return bool(_ask({"op": "deliver", "bootstrap": bootstrap, "id": transactional_id, "batch": batch,
                      "replay": replay, "table": _ipc(table)}, timeout))


def behind(bootstrap: str, transactional_id: str, batch: int, table: Any, earlier: list[int]) -> int | None:
    """Hand ``batch``'s records to the agent to deliver behind the task, after the id's earlier ones: accepted
    only if every batch in ``earlier`` (the partition's kept batches before it) was accepted by this agent since
    its last failed delivery of the id, so that the id's batches reach Kafka in order. Returns None if refused
    (the caller catches up: :func:`catch_up`), else the id's last batch the agent has delivered (-1: none yet).
    A delivery accepted and then failed is left kept: the id's next request is refused, and catches up."""
    answer = _ask({"op": "behind", "bootstrap": bootstrap, "id": transactional_id, "batch": batch,
                   "earlier": earlier, "table": _ipc(table)}, START_SECONDS)
    return None if answer is None else int(answer)


def catch_up(bootstrap: str, transactional_id: str, kept: list[tuple[int, Any]], timeout: float) -> None:
    """The agent's ``KafkaDelivery.catch_up`` of ``kept`` (after the id's deliveries it has accepted)."""
    _ask({"op": "catch_up", "bootstrap": bootstrap, "id": transactional_id,
          "kept": [(batch, _ipc(table)) for batch, table in kept]}, timeout)


def drain(prefix: str, timeout: float) -> None:
    """Wait until every agent of this machine has ended the deliveries it accepted of the ids starting with
    ``prefix`` (delivered or failed them): the end of a function's query run by a driver whose executors are on
    this machine (local mode). An agent that does not answer is left alone (its kept batches are caught up by
    whoever delivers next)."""
    directory = _directory()
    for name in os.listdir(directory):
        if name.endswith(".sock"):
            conn = _try_connect(os.path.join(directory, name))
            if conn is None:
                continue
            with conn, contextlib.suppress(OSError):
                conn.settimeout(timeout)
                _send(conn, pickle.dumps({"op": "drain", "prefix": prefix}))
                _receive(conn)


def _ipc(table: Any) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _ask(request: dict[str, Any], timeout: float) -> Any:
    """The agent's answer to ``request`` (the agent started if none answers); raises what it answered with, or
    :class:`AgentError`."""
    try:
        with _connect() as conn:
            conn.settimeout(timeout)
            _send(conn, pickle.dumps(request))
            answer = pickle.loads(_receive(conn))  # noqa: S301 - the executor's own agent, on a socket only we open
    except Exception as e:  # noqa: BLE001 - unreachable, died, or an answer that does not unpickle
        raise AgentError(f"{request['id']}: batch {request.get('batch')}'s Kafka delivery agent failed: "
                         f"{type(e).__name__}: {e}") from e
    if isinstance(answer, BaseException):
        raise answer
    return answer


def _directory() -> str:
    path = os.path.join(tempfile.gettempdir(), f"statekeep-kafka-{os.getuid()}")
    os.makedirs(path, mode=0o700, exist_ok=True)
    return path


def _connect() -> socket.socket:
    """A connection to the agent of this worker's executor (its Python daemon: the worker's parent), starting it
    if none listens."""
    owner = os.getppid()
    path = os.path.join(_directory(), f"{owner}.sock")
    conn = _try_connect(path)
    if conn is not None:
        return conn
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter per executor; the others find its agent listening
        conn = _try_connect(path)
        if conn is not None:
            return conn
        with open(os.path.join(_directory(), f"{owner}.log"), "ab") as log:
            subprocess.Popen([sys.executable, "-m", AGENT_MODULE, path, str(owner)], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=log, start_new_session=True, close_fds=True)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            conn = _try_connect(path)
            if conn is not None:
                return conn
            time.sleep(0.02)
    raise ConnectionRefusedError(f"no Kafka delivery agent listened at {path} within {START_SECONDS:.0f} s")


def _try_connect(path: str) -> socket.socket | None:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except (FileNotFoundError, ConnectionRefusedError):
        conn.close()
        return None
    return conn


def _send(conn: socket.socket, data: bytes) -> None:
    conn.sendall(_FRAME.pack(len(data)) + data)


def _receive(conn: socket.socket) -> bytes:
    head = _exactly(conn, _FRAME.size)
    return _exactly(conn, _FRAME.unpack(head)[0])


def _exactly(conn: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = conn.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionResetError("the Kafka delivery agent closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- the agent ----------------------------------------------------------------------------------------------------


class _Lane:
    """One transactional id's deliveries in the agent: run one at a time, in the order they came, on a thread of
    their own. ``delivered``: the last batch this lane delivered (-1: none), so every batch up to it is in Kafka
    (they arrive in order); ``accepted``: the later batches handed behind since the id's last failed delivery."""

    def __init__(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=1)
        self.accepted: set[int] = set()
        self.delivered = -1
        self.generation = 0  # one more at each failure: a delivery accepted before it is not run


class Agent:
    """The agent's side: one thread per connection; each id's deliveries on its :class:`_Lane`. ``run(op,
    bootstrap, id, batch, payload, replay)`` runs one delivery (``op`` "deliver", "behind" or "catch_up"), or
    readies the id's producer ("warm")."""

    def __init__(self, path: str, owner: int, run: Callable[..., Any]) -> None:
        self.path, self.owner, self.run = path, owner, run
        self.lanes: dict[str, _Lane] = {}
        self.guard = threading.Lock()
        self.last = time.monotonic()
        self.busy = 0

    def serve(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)  # a dead agent's (its starter holds the lock)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.path)
        server.listen(64)
        threading.Thread(target=self._watch, daemon=True).start()
        while True:
            conn, _ = server.accept()
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(self.owner, 0)
            except ProcessLookupError:
                self._drain()  # the executor's Python daemon is gone (its workers too): what it handed, then out
                os._exit(0)
            with self.guard:
                idle = not self.busy and time.monotonic() - self.last > IDLE_SECONDS
            if idle:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                os._exit(0)

    def _lane(self, ident: str) -> _Lane:
        with self.guard:
            return self.lanes.setdefault(ident, _Lane())

    def _drain(self, prefix: str = "") -> None:
        with self.guard:
            lanes = [lane for ident, lane in self.lanes.items() if ident.startswith(prefix)]
        for lane in lanes:
            lane.pool.submit(lambda: None).result()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = pickle.loads(_receive(conn))  # noqa: S301 - from this executor's workers
            except OSError:
                return
            with self.guard:
                self.busy += 1
            try:
                answer = self._answer(request)
            except Exception as e:  # noqa: BLE001 - handed to the worker, which raises it
                answer = e
            finally:
                with self.guard:
                    self.busy -= 1
                    self.last = time.monotonic()
            try:
                data = pickle.dumps(answer)
            except Exception:  # noqa: BLE001 - an error that does not pickle: its text
                data = pickle.dumps(AgentError(f"{type(answer).__name__}: {answer}"))
            with contextlib.suppress(OSError):  # a worker killed meanwhile: its task's retry is a replay
                _send(conn, data)

    def _answer(self, request: dict[str, Any]) -> Any:
        import pyarrow as pa

        op = request["op"]
        if op == "drain":
            self._drain(request["prefix"])
            return True
        lane = self._lane(request["id"])

        def table(data: bytes) -> Any:
            return pa.ipc.open_stream(data).read_all()

        def run(payload: Any, replay: bool = False) -> Any:
            return self.run(op, request["bootstrap"], request["id"], request.get("batch"), payload, replay)

        if op == "warm":  # before the id's deliveries, in its lane; no one waits for it (a failure: the delivery's)
            lane.pool.submit(run, None)
            return True
        if op == "deliver":
            return lane.pool.submit(lambda: run(table(request["table"]), request["replay"])).result()
        if op == "catch_up":
            kept = [(batch, table(data)) for batch, data in request["kept"]]

            def caught_up() -> None:
                try:
                    run(kept)
                except BaseException:
                    with self.guard:
                        lane.accepted.clear()
                        lane.generation += 1
                    raise
                with self.guard:
                    lane.accepted = set()
                    lane.delivered = max([lane.delivered, *(batch for batch, _ in kept)])

            return lane.pool.submit(caught_up).result()
        assert op == "behind", op
        batch = request["batch"]
        with self.guard:
            if not all(b <= lane.delivered or b in lane.accepted for b in request["earlier"]):
                return None
            lane.accepted.add(batch)
            generation = lane.generation

        def deliver_behind() -> None:
            if lane.generation != generation:
                return  # an earlier one of the id failed: this one stays kept, for the catch-up
            try:
                run(table(request["table"]))
            except BaseException as e:  # noqa: BLE001 - no one waits: the id's next request catches up
                with self.guard:
                    lane.accepted.clear()
                    lane.generation += 1
                print(f"statekeep: {request['id']}: batch {batch} not delivered behind its task (caught up by the "
                      f"next): {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                return
            with self.guard:  # what this lane delivered needs no remembering: it is all before ``delivered``
                lane.delivered = max(lane.delivered, batch)
                lane.accepted = {b for b in lane.accepted if b > lane.delivered}

        lane.pool.submit(deliver_behind)
        return lane.delivered
