"""The functions worker of ``statekeep standalone``: runs every registered function as a Spark
streaming query, and follows creates, updates and deletes.

Each function runs under a lock at ``/statekeep/workers/T/N/F`` (an ephemeral key), so when several
workers share a store each function runs once; a worker that dies releases its functions with its
session and the others take them over at their next pass. A pass runs on every registry
notification and every ``interval`` seconds. Spark starts in the background, so the REST API is
ready before the first function runs.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from statekeep.coordination import CoordinationService
from statekeep.errors import LockBusyError, NotFoundError, StatekeepError
from statekeep.functions.registry import FunctionRegistry

log = logging.getLogger(__name__)
LOCK_ROOT = "/statekeep/workers"
DELETE_GRACE_S = 60.0


@dataclass
class _Running:
    query: object
    lock: object
    config: tuple[str, int]  # (incarnation, config version): a change of either restarts the query


class SparkWorker:
    def __init__(self, metadata_url: str, checkpoint_root: str, master: str = "local[*,4]",
                 interval: float = 5.0) -> None:
        self.metadata_url = metadata_url
        self.checkpoint_root = checkpoint_root
        self.master = master
        self.interval = interval
        self._running: dict[tuple[str, str, str], _Running] = {}
        # incarnation being deleted -> until when it is not restarted while the registry still lists it
        # (a delete that failed leaves it listed: it runs again after DELETE_GRACE_S)
        self._deleting: dict[tuple[str, str, str], tuple[str, float]] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._mutex = threading.RLock()
        self._thread: threading.Thread | None = None
        self._spark = None

    def start(self, registry: FunctionRegistry) -> None:
        from statekeep.functions.service import FunctionService

        self.registry = registry
        self.service = FunctionService(registry)
        self.coordination = CoordinationService(registry.store)
        self._subscription = registry.store.add_listener(
            lambda n: self._wake.set() if n.path.startswith(registry.root) else None)
        self._thread = threading.Thread(target=self._loop, name="statekeep-worker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        with self._mutex:
            for fqfn in list(self._running):
                self._stop_function(fqfn)
        self._subscription.close()
        self.coordination.close()

    def function_deleting(self, tenant: str, namespace: str, name: str) -> None:
        """Stop the function's query before its state is deleted, and keep it stopped until it is gone."""
        fqfn = (tenant, namespace, name)
        with self._mutex:
            try:
                self._deleting[fqfn] = (self.registry.incarnation(*fqfn), time.monotonic() + DELETE_GRACE_S)
            except NotFoundError:
                pass
            self._stop_function(fqfn)

    def status(self) -> dict[str, dict]:
        with self._mutex:
            return {"/".join(k): r.query.status() for k, r in self._running.items()}

    # ---- the reconcile loop ------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self._reconcile()
            except Exception:  # keep the worker alive; the next pass tries again
                log.exception("functions worker pass failed")
            self._wake.wait(self.interval)
            self._wake.clear()

    def _wanted(self) -> dict[tuple[str, str, str], tuple[str, int]]:
        store, root = self.registry.store, self.registry.root
        wanted = {}
        for tenant in store.get_children(root):
            for namespace in store.get_children(f"{root}/{tenant}"):
                for name in store.get_children(f"{root}/{tenant}/{namespace}"):
                    result = store.get(f"{root}/{tenant}/{namespace}/{name}")
                    if result is not None and result.value:
                        try:
                            incarnation = self.registry.incarnation(tenant, namespace, name)
                        except NotFoundError:
                            continue  # deleted meanwhile
                        wanted[(tenant, namespace, name)] = (incarnation, result.stat.version)
        return wanted

    def _reconcile(self) -> None:
        wanted = self._wanted()
        with self._mutex:
            for fqfn, (incarnation, until) in list(self._deleting.items()):
                listed = wanted.get(fqfn)
                if listed is None or listed[0] != incarnation or time.monotonic() > until:
                    del self._deleting[fqfn]  # deleted (and maybe created again), or the delete failed
                else:
                    del wanted[fqfn]
            for fqfn, running in list(self._running.items()):
                stale = wanted.get(fqfn) != running.config
                if stale or running.lock.expired.done() or not running.query.query.isActive:
                    self._stop_function(fqfn)
            for fqfn, config in wanted.items():
                if fqfn not in self._running and not self._stopping.is_set():
                    self._start_function(fqfn, config)

    def _start_function(self, fqfn: tuple[str, str, str], config: tuple[str, int]) -> None:
        from statekeep.functions.spark import run_registered, spark_session

        try:
            lock = self.coordination.acquire_lock(f"{LOCK_ROOT}/{'/'.join(fqfn)}", str(os.getpid()).encode())
        except LockBusyError:
            return  # another worker runs it
        try:
            if self._spark is None:
                self._spark = spark_session(self.master)
            query = run_registered(self.service, self.metadata_url, *fqfn, checkpoint_root=self.checkpoint_root,
                                   master=self.master, spark=self._spark)
        except (NotFoundError, StatekeepError) as e:
            log.warning("cannot start function %s: %s", "/".join(fqfn), e)
            lock.release()
            return
        self._running[fqfn] = _Running(query, lock, config)
        log.info("function %s started", "/".join(fqfn))

    def _stop_function(self, fqfn: tuple[str, str, str]) -> None:
        running = self._running.pop(fqfn, None)
        if running is None:
            return
        try:
            running.query.stop()
        finally:
            running.lock.release()
        log.info("function %s stopped", "/".join(fqfn))
