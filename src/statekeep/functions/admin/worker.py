"""The functions worker of ``statekeep standalone``: runs every registered function as a Spark
streaming query, and follows creates, updates and deletes.

Each function runs under a lock at ``/statekeep/workers/T/N/F`` (an ephemeral key in the
coordination service) whose content names the worker (:func:`lock_content`), so when several
workers (servers, possibly on different hosts) share a store each function runs on exactly one of
them, and ``functions status`` can say which. A worker that dies (SIGKILL, or its session lost)
loses its locks with its session; the others are woken by the lock's deletion and take its
functions over, each resuming from the function's checkpoint (which must therefore be somewhere
every worker reaches). A pass runs on every registry notification, every deleted lock, every lost
lock of its own and every ``interval`` seconds. Spark starts in the background, so the REST API is
ready before the first function runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekeep import jsonrecords
from statekeep.background import Periodic
from statekeep.coordination import CoordinationService, ResourceLock
from statekeep.errors import CorruptRecordError, LockBusyError, NotFoundError, StatekeepError
from statekeep.functions.config.registry import FunctionRegistry
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.types import Notification, NotificationType

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from statekeep.functions.driver.spark import FunctionQuery

log = logging.getLogger(__name__)
LOCK_ROOT = "/statekeep/workers"
DELETE_GRACE_S = 60.0


def lock_content(worker_id: str) -> bytes:
    """What a runner of a function writes into the function's lock: JSON with ``workerId`` (and the
    host and process), so any server can tell who runs it."""
    return json.dumps({"workerId": worker_id, "host": socket.gethostname(), "pid": os.getpid(),
                       "sinceMs": int(time.time() * 1000)}, sort_keys=True).encode()


def lock_path(tenant: str, namespace: str, name: str) -> str:
    return f"{LOCK_ROOT}/{tenant}/{namespace}/{name}"


def function_runner(store: MetadataStore, tenant: str, namespace: str, name: str) -> str | None:
    """The id of the worker (or localrun) holding the function's lock in ``store`` now, or None if
    nobody runs it."""
    result = store.get(lock_path(tenant, namespace, name))
    if result is None or not result.stat.ephemeral:
        return None
    raw = result.value
    try:
        return str(jsonrecords.decode(raw, lock_path(tenant, namespace, name), "function lock")["workerId"])
    except (CorruptRecordError, KeyError):
        return raw.decode("utf-8", "replace")  # a lock written by an older version: its raw content


def acquire_function_lock(coordination: CoordinationService, tenant: str, namespace: str, name: str,
                          worker_id: str, *, wait: float = 0.0,
                          on_wait: Callable[[str | None], object] | None = None) -> ResourceLock:
    """Take the function's lock for ``worker_id`` (a :class:`ResourceLock`), waiting up to ``wait``
    seconds for its holder to release it or die (a dead holder's lock goes with its session, on
    zk:// and etcd:// after the session timeout). ``on_wait(holder)`` is called once if it must wait.
    Raises :class:`LockBusyError` naming the holder if it is still held after ``wait``."""
    path = lock_path(tenant, namespace, name)
    content = lock_content(worker_id)
    try:
        return coordination.acquire_lock(path, content)
    except LockBusyError:
        if wait <= 0:
            raise
    holder = function_runner(coordination.store, tenant, namespace, name)
    if on_wait is not None:
        on_wait(holder)
    future = coordination.become_leader(path, content)
    try:
        return future.result(timeout=wait)
    except TimeoutError:
        future.cancel()
        if future.done() and not future.cancelled() and future.exception() is None:
            return future.result()  # won just as we gave up
        holder = function_runner(coordination.store, tenant, namespace, name) or holder
        raise LockBusyError(f"function {tenant}/{namespace}/{name} runs on worker {holder}: stop it there "
                            f"(or delete it) first") from None


def function_status(store: MetadataStore, tenant: str, namespace: str, name: str) -> dict[str, Any]:
    """A function's status: its query's last recorded totals (``processed``, ``skipped``, ``outputs``,
    ``batches``, ``last_batch``, ``error``, ``updated_ms``) with ``workerId``, the worker (or
    localrun) holding its lock now, None if nobody. ``running`` is true only while the recorded
    runner still holds the lock: a runner killed mid-run leaves a status that says running, but its
    lock goes with its session. Does not check that the function exists."""
    from statekeep.functions.driver.spark import read_status

    holder = function_runner(store, tenant, namespace, name)
    status = read_status(store, tenant, namespace, name) or {
        "running": False, "error": None, "processed": 0, "skipped": 0, "outputs": 0, "batches": 0,
        "last_batch": None, "updated_ms": None}
    status["running"] = bool(status.get("running")) and holder is not None and status.get("workerId") == holder
    status["workerId"] = holder
    return status


@dataclass
class _Running:
    query: FunctionQuery
    lock: ResourceLock
    config: tuple[str, int, int]  # (incarnation, config version, restarts): a change restarts the query


class SparkWorker:
    """Runs registered functions on Spark (``master``), each under its lock, with checkpoints under
    ``checkpoint_root`` (a directory or Hadoop-compatible URL; shared by every worker of a cluster).
    ``worker_id`` names this worker in locks and status (default ``HOST:PID``); ``spark_conf``: more
    Spark settings for its session, which starts with its first function."""

    def __init__(self, metadata_url: str, checkpoint_root: str, master: str = "local[*,4]",
                 interval: float = 5.0, worker_id: str | None = None,
                 spark_conf: dict[str, str] | None = None) -> None:
        self.metadata_url = metadata_url
        self.checkpoint_root = checkpoint_root
        self.master = master
        self.spark_conf = dict(spark_conf or {})
        self.interval = interval
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"  # unique among live processes
        self._running: dict[tuple[str, str, str], _Running] = {}
        # incarnation being deleted -> until when it is not restarted while the registry still lists it
        # (a delete that failed leaves it listed: it runs again after DELETE_GRACE_S)
        self._deleting: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._mutex = threading.RLock()
        # a pass at start, every interval, and at once when the registry or a lock changes
        self._loop = Periodic("statekeep-worker", interval, self._reconcile, what="functions worker pass", log=log,
                              immediately=True)
        self._spark: SparkSession | None = None  # started with the first function to run

    def start(self, registry: FunctionRegistry) -> None:
        from statekeep.functions.config.service import FunctionService

        self.registry = registry
        self.service = FunctionService(registry)
        self.coordination = CoordinationService(registry.store)
        self._subscription = registry.store.add_listener(self._on_notification)
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop(timeout=60)
        with self._mutex:
            for fqfn in list(self._running):
                self._stop_function(fqfn)
        self._subscription.close()
        self.coordination.close()

    def _on_notification(self, n: Notification) -> None:
        # registry changes, and locks deleted by a release or a dead worker's session: a function may
        # be free to take over now, not only at the next interval
        if n.path.startswith(self.registry.root + "/") or (
                n.type is NotificationType.Deleted and n.path.startswith(LOCK_ROOT + "/")):
            self._loop.wake()

    def function_deleting(self, tenant: str, namespace: str, name: str) -> None:
        """Stop the function's query before its state is deleted, and keep it stopped until it is gone."""
        fqfn = (tenant, namespace, name)
        with self._mutex:
            with contextlib.suppress(NotFoundError):
                self._deleting[fqfn] = (self.registry.incarnation(*fqfn), time.monotonic() + DELETE_GRACE_S)
            self._stop_function(fqfn)

    def status(self) -> dict[str, dict[str, Any]]:
        """``T/N/F`` -> query status of each function this worker runs now."""
        with self._mutex:
            return {"/".join(k): {**r.query.status(), "workerId": self.worker_id} for k, r in self._running.items()}

    # ---- the reconcile loop ------------------------------------------------------------------

    def _wanted(self) -> dict[tuple[str, str, str], tuple[str, int, int]]:
        """The functions that should run (not stopped), each with (incarnation, config version,
        restart count): a change of any restarts its query."""
        from statekeep.functions.admin.lifecycle import is_stopped, restart_count

        store, root = self.registry.store, self.registry.root
        wanted = {}
        for tenant in store.get_children(root):
            for namespace in store.get_children(f"{root}/{tenant}"):
                for name in store.get_children(f"{root}/{tenant}/{namespace}"):
                    result = store.get(f"{root}/{tenant}/{namespace}/{name}")
                    # not a function, or stopped (persisted): its query stops, and stays stopped
                    if result is None or not result.value or is_stopped(self.registry, tenant, namespace, name):
                        continue
                    try:
                        incarnation = self.registry.incarnation(tenant, namespace, name)
                    except NotFoundError:
                        continue  # deleted meanwhile
                    wanted[(tenant, namespace, name)] = (incarnation, result.stat.version,
                                                         restart_count(self.registry, tenant, namespace, name))
        return wanted

    def _reconcile(self) -> None:
        wanted = self._wanted()
        claimed: dict[tuple[str, str, str], ResourceLock] = {}
        if self._spark is None and not self._loop.stopping:
            # the JVM starts only once this worker holds a function's lock: on a shared Spark cluster an
            # idle driver still holds cores, so a worker that lost the race for every function starts none;
            # outside the mutex, since a delete must not wait for a JVM to start
            claimed = {fqfn: lock for fqfn in wanted if fqfn not in self._running
                       for lock in [self._claim(fqfn)] if lock is not None}
            if claimed:
                from statekeep.functions.driver.session import spark_session

                try:
                    self._spark = spark_session(self.master, conf=self.spark_conf)
                except BaseException:
                    for lock in claimed.values():
                        lock.release()
                    raise
        try:
            self._apply(wanted, claimed)
        finally:
            for lock in claimed.values():  # claimed but not started (deleted or stopping meanwhile)
                lock.release()

    def _apply(self, wanted: dict[tuple[str, str, str], tuple[str, int, int]],
               claimed: dict[tuple[str, str, str], ResourceLock]) -> None:
        with self._mutex:
            for fqfn, (incarnation, until) in list(self._deleting.items()):
                listed = wanted.get(fqfn)
                if listed is None or listed[0] != incarnation or time.monotonic() > until:
                    del self._deleting[fqfn]  # deleted (and maybe created again), or the delete failed
                else:
                    del wanted[fqfn]
            for fqfn, running in list(self._running.items()):
                stale = wanted.get(fqfn) != running.config
                query = running.query.query
                assert query is not None  # run_registered started it
                if stale or running.lock.expired.done() or not query.isActive:
                    self._stop_function(fqfn)
            for fqfn, config in wanted.items():
                if fqfn not in self._running and not self._loop.stopping:
                    self._start_function(fqfn, config, claimed.pop(fqfn, None))

    def _claim(self, fqfn: tuple[str, str, str]) -> ResourceLock | None:
        """The function's lock for this worker, or None if another worker holds it."""
        held = self.registry.store.get(lock_path(*fqfn))
        if held is not None and not held.stat.created_by_self:
            return None  # another worker runs it (a read, not a failing create, on every pass)
        try:
            return self.coordination.acquire_lock(lock_path(*fqfn), lock_content(self.worker_id))
        except LockBusyError:
            return None  # another worker runs it; its lock's deletion wakes us

    def _start_function(self, fqfn: tuple[str, str, str], config: tuple[str, int, int],
                        lock: ResourceLock | None = None) -> None:
        """Run the function here, with its ``lock`` if this worker already claimed it."""
        from statekeep.functions.driver.session import spark_session
        from statekeep.functions.driver.spark import run_registered

        lock = lock or self._claim(fqfn)
        if lock is None:
            return
        try:
            if self._spark is None:
                self._spark = spark_session(self.master, conf=self.spark_conf)
            query = run_registered(self.service, self.metadata_url, *fqfn, checkpoint_root=self.checkpoint_root,
                                   master=self.master, spark=self._spark, worker_id=self.worker_id)
        except StatekeepError as e:
            log.warning("cannot start function %s: %s", "/".join(fqfn), e)
            lock.release()
            return
        except BaseException:
            lock.release()  # e.g. Spark failed to start: let another worker try
            raise
        self._running[fqfn] = _Running(query, lock, config)
        # lost (session expired, key removed): stop at once rather than at the next interval,
        # since another worker may already be taking the function over
        lock.expired.add_done_callback(lambda _: self._loop.wake())
        log.info("function %s started on worker %s", "/".join(fqfn), self.worker_id)

    def _stop_function(self, fqfn: tuple[str, str, str]) -> None:
        running = self._running.pop(fqfn, None)
        if running is None:
            return
        try:
            running.query.stop()
        finally:
            running.lock.release()
        log.info("function %s stopped", "/".join(fqfn))
