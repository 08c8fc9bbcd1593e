"""One owner of an executor's Kafka producers: the delivery agent.

Spark runs a partition's next micro-batch in whichever Python worker of the executor is idle. A transactional
producer kept by one worker was therefore fenced, most batches, by the next worker's producer of the same
``transactional.id`` (its ``init_transactions``), which then looked up what Kafka had committed before writing:
two round trips to the cluster per (batch, partition), on the task's critical path.

So the Python workers of an executor hand their deliveries to one agent process per executor, as Kafka Streams'
thread owns its producer and Flink's ``KafkaSink`` pools its own: :func:`deliver` sends the (batch, partition)'s
records to the agent and waits for its answer; the agent (:data:`AGENT_MODULE` run as a program) runs the same
``KafkaDelivery`` (the protocol of :mod:`statekeep.functions.messaging.kafka` is unchanged), keeping each id's
producer, and its group's look-up consumer, from batch to batch. Deliveries of one id run one at a
time, in the order they arrive. The first worker that needs the agent starts it (under a file lock: one per
executor); it leaves when the executor's Python daemon (its starter's parent) is gone, or after
:data:`IDLE_SECONDS` without a delivery.

What the agent changes in the exactly-once argument: nothing. A worker's delivery is the agent's, answered before
the task ends; a worker killed meanwhile leaves the agent to finish or fail the transaction, and Spark's retry of
the task is a replay, which fences the id and looks up (in the agent, after the first delivery of the id ended).
An agent killed mid-delivery is a failed delivery: the task fails, its retry starts a new agent, whose first
delivery of the id fences the old producer. Outside a Spark task (the driver, a trigger, a test) delivery runs in
the calling process, as before; ``STATEKEEP_KAFKA_AGENT=0`` makes tasks do so too.
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


def deliver(bootstrap: str, transactional_id: str, batch: int | None, table: Any, *, replay: bool,
            timeout: float) -> bool:
    """The agent's delivery of ``table`` (``KafkaDelivery.deliver``'s arguments), the agent started if none
    answers; waits up to ``timeout`` seconds for its answer. Raises what the agent's delivery raised, or
    :class:`AgentError` if the agent could not be reached or died."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    request = pickle.dumps({"bootstrap": bootstrap, "id": transactional_id, "batch": batch, "replay": replay,
                            "table": sink.getvalue().to_pybytes()})
    try:
        with _connect() as conn:
            conn.settimeout(timeout)
            _send(conn, request)
            answer = pickle.loads(_receive(conn))  # noqa: S301 - the executor's own agent, on a socket only we open
    except Exception as e:  # noqa: BLE001 - unreachable, died, or an answer that does not unpickle
        raise AgentError(f"{transactional_id}: batch {batch}'s Kafka delivery agent failed: "
                         f"{type(e).__name__}: {e}") from e
    if isinstance(answer, BaseException):
        raise answer
    return bool(answer)


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


class Agent:
    """The agent's side: one thread per connection, deliveries of one transactional id one at a time."""

    def __init__(self, path: str, owner: int, run: Callable[[str, str, int | None, Any, bool], bool]) -> None:
        self.path, self.owner, self.run = path, owner, run
        self.locks: dict[str, threading.Lock] = {}
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
                os._exit(0)  # the executor's Python daemon is gone: so are its workers
            with self.guard:
                idle = not self.busy and time.monotonic() - self.last > IDLE_SECONDS
            if idle:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                os._exit(0)

    def _handle(self, conn: socket.socket) -> None:
        import pyarrow as pa

        with conn:
            try:
                request = pickle.loads(_receive(conn))  # noqa: S301 - from this executor's workers
            except OSError:
                return
            with self.guard:
                self.busy += 1
                lock = self.locks.setdefault(request["id"], threading.Lock())
            try:
                with lock:
                    table = pa.ipc.open_stream(request["table"]).read_all()
                    answer: Any = self.run(request["bootstrap"], request["id"], request["batch"], table,
                                           request["replay"])
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

