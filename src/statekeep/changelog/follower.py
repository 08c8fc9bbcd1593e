"""``FollowerStore``: a read-only, materialized view of a leader's function state (KIP-813).

    follower = FollowerStore.open("local:///var/lib/statekeep", "public", "default", "wc",
                                  local_dir="/var/lib/follower")   # without: a private temporary copy
    follower.wait_until_caught_up(10)      # True once everything committed before the call is applied
    follower.get_counter("hello"); follower.scan(prefix="h"); follower.lag
    follower.put("k", b"v")                # ReadOnlyStoreError: nothing is written
    follower.close()

Contract:

- Reads (``get``, ``get_entry``, ``get_counter``, ``scan``...) are served from the follower's own
  ``local://`` directory (LMDB), with the leader's values and versions, never from the leader. That is
  ``local_dir`` if given (kept at close, so a restart resumes), else a private temporary directory
  removed at close.
- The function is found through the function registry (:class:`~statekeep.state.catalog.FunctionCatalog`
  on the leader's store, under ``functions_root``: the root the registry was configured with), which
  also names its state provider.
- Every write method raises :class:`ReadOnlyStoreError` and writes nothing, locally or on the leader.
- A background thread tails the leader's changelog (a poll every ``poll_interval``), applying each
  batch and its offset in one local write: after a restart, even a SIGKILL, it resumes exactly.
- Bootstrap (first start, or a follower that fell behind compaction's ``purged_offset``): from the
  newest snapshot of the leader's current epoch (restore time grows with the state, not with the
  history), then the changelog after the snapshot's offset; an interrupted snapshot restore resumes
  where it stopped. Without a usable snapshot: a first start replays the changelog from the start;
  a re-bootstrap reads the leader's whole current state (``read_all``) and tails from the offset it
  covers. Either way readers see the previous complete copy until the new one is whole.
- ``lag`` counts changelog records not yet applied; ``lag_ms`` is 0 when none is, else the milliseconds since
  the follower last had applied everything. ``wait_until_caught_up(timeout)`` returns True once every change
  committed on the leader before the call is applied (bootstrap included), else False.
- When the function is deleted (its registry entry gone, when the follower knows the registry; or its
  state's epoch changed or vanished), reads, ``lag`` and ``wait_until_caught_up`` raise
  :class:`NotFoundError` ("... was deleted"), never serve the stale copy.
- A follower of a subset (``key_prefix``, ``key_filter``, ``transform``, ``view_id``: see
  :mod:`statekeep.changelog.view`) materializes only the keys in its view, rewritten by the
  transform; reads of other keys find nothing. Deletes of keys in the view apply. A bootstrap
  applies the view too (from a snapshot, entries outside it are not decoded or written; with a
  prefix, decoding stops after the prefix's range), so restore time and disk follow the subset.
  The copy records the view's fingerprint: opened with another view, the follower drops the old
  copy at open (reads find nothing until the new one is whole; no mix of the two views is ever
  served) and bootstraps again. An exception in the user's ``key_filter`` or ``transform`` (or a
  transform result of the wrong type) stops the follower without applying the batch: reads,
  ``lag`` and ``wait_until_caught_up`` then raise :class:`InvalidArgumentError` naming it.
- Partition-owned state (the ``partitioned`` provider, :mod:`statekeep.state.partitioned`) has no single
  changelog: :meth:`FollowerStore.open` returns a
  :class:`~statekeep.changelog.partitioned_follower.PartitionedFollowerStore`, with this API and contract,
  which follows each partition's manifest and segments in shared storage (``lag`` then counts entries of
  segments not yet applied; see that module).
"""

from __future__ import annotations

import itertools
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar, NoReturn

from statekeep.background import Periodic
from statekeep.changelog.replica import LocalReplica, Op
from statekeep.changelog.snapshots import SnapshotInfo, SnapshotStore
from statekeep.changelog.view import FollowerView, KeyFilter, Transform, ViewError
from statekeep.errors import (CorruptStateError, MissingDependencyError, NotFoundError, ReadOnlyStoreError,
                              StatekeepError)
from statekeep.retry import RECONNECT
from statekeep.state.base import (BatchLimits, Capability, ChangelogPosition, ReadableStateStore, StateEntry,
                                  StateStore, StateStoreProvider)
from statekeep.state.catalog import DEFAULT_ROOT, FunctionCatalog, function_provider
from statekeep.state.records import ChangelogRecord, entry_bytes

log = logging.getLogger(__name__)

RESTORE_CHUNK = 20_000
REGISTRY_CHECK_S = 0.5


#: a leader URL's scheme -> ("module:function" opening a follower of that log, the pip extra it needs): logs other
#: than a function's state store, followed by the same mechanism (a FollowerStore subclass of the module), imported
#: when such a URL is first opened, as the metadata registry imports its backends
LOG_SOURCES: dict[str, tuple[str, str]] = {
    "kafka": ("statekeep.kafka.follower:open_follower", "statekeep[kafka] (confluent-kafka)"),
}


def log_source(scheme: str) -> Callable[..., FollowerStore]:
    """The opener of followers of ``scheme``'s logs (:data:`LOG_SOURCES`); :class:`MissingDependencyError` naming
    the extra when its module cannot be imported."""
    import importlib

    target, extra = LOG_SOURCES[scheme]
    module_name, _, function = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        if isinstance(e, MissingDependencyError) or (e.name or "").startswith("statekeep"):
            raise
        raise MissingDependencyError(f"a follower of a {scheme}:// log needs {extra}: "
                                     f"pip install '{extra.split()[0]}' ({e})") from e
    opener: Callable[..., FollowerStore] = getattr(module, function)
    return opener


class FollowerStore(ReadableStateStore):
    """See the module docstring. Build one with :meth:`open`. Thread-safe; call :meth:`close`.

    A :class:`ReadableStateStore`, not a :class:`StateStore`: code typed for writing does not accept a
    follower. The write methods still exist, for callers that hold it untyped (the REST layer), and
    raise :class:`ReadOnlyStoreError` without writing anything."""

    #: the local copy's class (a subclass may keep more in it)
    replica_type: ClassVar[type[LocalReplica]] = LocalReplica
    #: a capability of the leader -> the follower class :meth:`open` builds for it (see :meth:`follow_with`)
    _kinds: ClassVar[dict[Capability, type[FollowerStore]]] = {}

    @classmethod
    def follow_with(cls, capability: Capability) -> None:
        """Make :meth:`open` build this class for leaders declaring ``capability`` (a state whose changelog
        is read another way, e.g. partition-owned state's manifests and segments)."""
        FollowerStore._kinds[capability] = cls

    def __init__(self, leader: StateStore, replica: LocalReplica, *, snapshots: SnapshotStore | None = None,
                 registry: FunctionCatalog | None = None, poll_interval: float = 0.005, batch_size: int = 10_000,
                 restore_chunk: int = RESTORE_CHUNK,
                 on_apply: Callable[[list[ChangelogRecord]], None] | None = None, owned: Iterable[Any] = (),
                 temporary_dir: str | None = None, view: FollowerView | None = None) -> None:
        super().__init__(leader.tenant, leader.namespace, leader.name)
        self._fqfn = f"{self.tenant}/{self.namespace}/{self.name}"
        self.leader, self.replica, self.snapshots = leader, replica, snapshots
        self.max_value_size = leader.max_value_size
        self.capabilities, self.provider_name = leader.capabilities, leader.provider_name
        self._registry = registry  # where the function's registry entry is checked (None: not checked)
        self._temporary_dir = temporary_dir  # removed at close
        self.poll_interval, self.batch_size, self.restore_chunk = poll_interval, batch_size, restore_chunk
        self.on_apply = on_apply
        self._owned = list(owned)
        self.view = view or FollowerView()
        self._meta = replica.load()
        if self._meta.view != self.view.fingerprint():  # another view's copy: never mixed with this one
            if self._meta.gen is not None or self._meta.restore is not None:
                log.info("follower of %s: the view changed; rebuilding the copy", leader.name)
            replica.reset_view(self.view.fingerprint())
            self._meta = replica.load()
        self._error: StatekeepError | None = None
        self._phase = "starting"
        self._restored = 0
        self._caught_up_at = float("-inf")  # start time of the last complete read that was applied
        self._cond = threading.Condition()
        self._next_registry_check = 0.0
        self._failures = 0  # polls failed in a row (the tailing thread's backoff)
        self._tailing = Periodic(f"statekeep-follower-{self.name}", poll_interval, self._tail,
                                 what=f"follower of {self._fqfn}", log=log,
                                 immediately=True, paced=True)

    @classmethod
    def open(cls, leader: str | StateStoreProvider | StateStore, tenant: str, namespace: str, name: str, *,
             local_dir: str | None = None, blobs: str | None = None, snapshots: bool | SnapshotStore = True,
             provider: str | None = None, provider_config: Mapping[str, Any] | None = None,
             check_registry: bool | None = None, functions_root: str = DEFAULT_ROOT, start: bool = True,
             key_prefix: str = "", key_filter: KeyFilter | None = None, transform: Transform | None = None,
             view_id: str | None = None, **options: Any) -> FollowerStore:
        """Follow ``tenant/namespace/name`` of ``leader``: a metadata store URL (the function's provider
        is the one its registry entry names, else ``provider``, else the default: ``embedded`` on
        ``local://``, ``metadata`` elsewhere), a :class:`StateStoreProvider` or a :class:`StateStore`.
        ``local_dir`` and a subset (``key_prefix``, ``key_filter``, ``transform``, ``view_id``): see the
        module docstring. ``functions_root``: where the function registry keeps functions (its configured
        root). ``check_registry`` (default: with a URL) makes a missing registry entry
        :class:`NotFoundError`, now and while following. ``options``: ``poll_interval``, ``batch_size``,
        ``restore_chunk``, ``on_apply`` (called with each applied batch: the records of keys in the view,
        as the leader wrote them). A ``kafka://HOST:PORT/TOPIC?key=..&value=..`` leader is a Kafka changelog topic
        (a Kafka Streams store's), followed as ``tenant/namespace/name``: see :mod:`statekeep.kafka.follower`.
        Raises :class:`InvalidArgumentError` for a non-str prefix or view_id or a non-callable filter or transform,
        before anything is opened or written; :class:`UnsupportedCapabilityError` for a leader that declares no
        changelog reading
        (:attr:`Capability.CHANGELOG_READ`)."""
        from statekeep.metadata import open_store
        from statekeep.state import open_provider

        if isinstance(leader, str) and leader.partition("://")[0] in LOG_SOURCES:  # another log than a store's
            return log_source(leader.partition("://")[0])(
                leader, tenant, namespace, name, local_dir=local_dir, blobs=blobs, snapshots=snapshots,
                provider=provider, provider_config=provider_config, check_registry=check_registry, start=start,
                key_prefix=key_prefix, key_filter=key_filter, transform=transform, view_id=view_id, **options)
        view = FollowerView(key_prefix, key_filter, transform, view_id)  # bad input: nothing opened yet
        owned: list[Any] = []
        temporary = None
        try:
            store = None
            if isinstance(leader, str):
                store = open_store(leader)
                owned.append(store)
                if provider is None:  # the registry's rule, from its entry
                    chosen = FunctionCatalog(store, functions_root).state_provider(tenant, namespace, name)
                else:
                    chosen = function_provider({"provider": provider, "config": dict(provider_config or {})}, store)
                opened = open_provider(*chosen)
                owned.append(opened)
                state = opened.get_state_store(tenant, namespace, name)
                check_registry = True if check_registry is None else check_registry
            elif isinstance(leader, StateStoreProvider):
                state = leader.get_state_store(tenant, namespace, name)
                store = getattr(leader, "store", None)
            else:
                state = leader
            state.require(Capability.CHANGELOG_READ, "a follower reads the leader's changelog")
            if (state.tenant, state.namespace, state.name) != (tenant, namespace, name):
                raise NotFoundError(f"the leader store is {state.tenant}/{state.namespace}/{state.name}, "
                                    f"not {tenant}/{namespace}/{name}")
            registry = None
            if check_registry and store is not None:
                registry = FunctionCatalog(store, functions_root)
                if not registry.exists(tenant, namespace, name):
                    raise NotFoundError(f"function {tenant}/{namespace}/{name} does not exist "
                                        f"(no entry under {registry.root or '/'} in the registry)")
            snapshot_store: SnapshotStore | None = snapshots if isinstance(snapshots, SnapshotStore) else None
            if snapshots is True and store is not None:
                snapshot_store = SnapshotStore(store, blobs)
            follower_type = next((kind for capability, kind in FollowerStore._kinds.items()
                                  if capability in state.capabilities), cls)
            if local_dir is None:
                local_dir = temporary = tempfile.mkdtemp(prefix=f"statekeep-follower-{name}-")
            replica = follower_type.replica_type(local_dir, tenant, namespace, name)
            owned.append(replica)
            follower = follower_type(state, replica, snapshots=snapshot_store, registry=registry, owned=owned,
                                     temporary_dir=temporary, view=view, **options)
        except BaseException:
            for resource in reversed(owned):
                resource.close()
            if temporary is not None:
                shutil.rmtree(temporary, ignore_errors=True)
            raise
        try:
            follower._check_leader(follower.leader.changelog_position())  # a deleted function fails now
            if start:
                follower.start()
        except BaseException:
            follower.close()
            raise
        return follower

    # ---- lifecycle -----------------------------------------------------------------------------

    def start(self) -> FollowerStore:
        self._tailing.start()
        return self

    def close(self) -> None:
        """Stop tailing and close what :meth:`open` opened. A ``local_dir`` copy stays for the next
        start; a temporary one (no ``local_dir``) is removed."""
        self._tailing.stop(timeout=60)
        owned, self._owned = self._owned, []
        for resource in reversed(owned):
            try:
                resource.close()
            except StatekeepError as e:
                log.warning("follower %s: closing %r failed: %s", self.name, resource, e)
        temporary, self._temporary_dir = self._temporary_dir, None
        if temporary is not None:
            shutil.rmtree(temporary, ignore_errors=True)

    # ---- the tailing thread --------------------------------------------------------------------

    def _stop_tailing(self, error: StatekeepError, phase: str, level: int) -> float:
        """End the tailing for good on ``error`` (readers see it, and ``phase``)."""
        with self._cond:
            self._error = error
            self._phase = phase
            self._cond.notify_all()
        log.log(level, "follower of %s stops: %s", self._fqfn, error)
        self._tailing.stop()
        return 0.0

    def _tail(self) -> float:
        """One turn of the tailing thread: a :meth:`step`; returns the seconds until the next (none
        after records were applied, ``poll_interval`` after none, longer after failures in a row)."""
        try:
            applied = self.step()
        except NotFoundError as e:
            return self._stop_tailing(e, "deleted", logging.WARNING)
        except ViewError as e:  # the user's filter or transform: retrying would fail again
            return self._stop_tailing(e, "failed", logging.ERROR)
        except StatekeepError as e:  # e.g. the leader's store is unreachable: try again, slower
            self._failures += 1
            log.warning("follower of %s: %s (retrying)", self._fqfn, e)
            return RECONNECT.delay(self._failures) + self.poll_interval
        except Exception:  # not a store's error: the tailing ends (logged), as it always has
            self._tailing.stop()
            raise
        self._failures = 0
        return 0.0 if applied else self.poll_interval

    def step(self) -> int:
        """One poll: bootstrap if needed, else apply the next batch of records. Returns how many
        records (or entries) it applied. Called by the tailing thread; public for tests and tools."""
        meta = self._meta
        if meta.gen is None or meta.restore is not None:
            return self._bootstrap()
        if meta.garbage and self.replica.collect_garbage(meta.garbage):
            meta.garbage = []
        started = time.monotonic()
        batch = self.leader.read_changelog(after=meta.applied, limit=self.batch_size)
        position = self.leader.changelog_position()  # after the read: it vouches for what was read
        self._check_leader(position)
        if position.purged_offset > meta.applied:
            log.info("follower of %s: compaction dropped tombstones up to offset %d, past the applied offset %d: "
                     "bootstrapping again", self.name, position.purged_offset, meta.applied)
            return self._bootstrap()
        if batch:
            epoch = meta.epoch or position.epoch
            selected = self.view.records(batch)
            # the offset moves even when no record is in the view: they need not be read again
            self.replica.apply(meta.gen, selected, batch[-1].offset, epoch)
            meta.applied, meta.epoch = batch[-1].offset, epoch
            if self.on_apply is not None and selected:
                self.on_apply(batch if selected is batch else [r for r in batch if self.view.matches(r.key)])
        with self._cond:
            self._phase = "tailing"
            if len(batch) < self.batch_size:  # everything committed before `started` is now applied
                self._caught_up_at = started
                self._cond.notify_all()
        return len(batch)

    def _check_leader(self, position: ChangelogPosition) -> None:
        """Raise :class:`NotFoundError` if the function was deleted (registry entry gone) or its state
        reset (epoch changed or gone since this follower adopted it)."""
        if self._meta.epoch is not None and position.epoch != self._meta.epoch:
            raise self._deleted(f"its state was reset (epoch {self._meta.epoch} -> {position.epoch})")
        self._check_registry()

    def _deleted(self, why: str) -> NotFoundError:
        return NotFoundError(f"function {self._fqfn} was deleted: {why}; close this follower")

    def _check_registry(self) -> None:
        """Raise :class:`NotFoundError` if the function's registry entry is gone (checked every
        ``REGISTRY_CHECK_S`` at most, when the follower knows the registry)."""
        if self._registry is not None and time.monotonic() >= self._next_registry_check:
            if not self._registry.exists(self.tenant, self.namespace, self.name):
                raise self._deleted("no registry entry")
            self._next_registry_check = time.monotonic() + REGISTRY_CHECK_S

    # ---- bootstrap -----------------------------------------------------------------------------

    def _bootstrap(self) -> int:
        meta = self._meta
        self._restored = (meta.restore or {}).get("written", 0)  # before the phase: status never goes back
        self._phase = "restoring"
        if meta.restore is not None and meta.restore.get("source") == "snapshot" and self.snapshots is not None:
            info = self.snapshots.get(self.tenant, self.namespace, self.name, meta.restore["number"])
            if info is not None and info.blob_url == meta.restore["blob"]:
                return self._from_snapshot(info, meta.restore)
        if meta.restore is not None:  # a full read cannot resume (the leader moved on): start over
            self.replica.abandon_restore()
            self._meta = meta = self.replica.load()
        position = self.leader.changelog_position()
        self._check_leader(position)
        info = None
        if self.snapshots is not None and position.epoch is not None:
            info = self.snapshots.newest(self.tenant, self.namespace, self.name, epoch=position.epoch)
        if info is not None and info.offset >= position.purged_offset and info.offset > meta.applied:
            return self._from_snapshot(info, None)
        if meta.gen is None and position.purged_offset < 0:  # nothing dropped: replay from the start
            self.replica.finish_restore(self.replica.begin_restore({"source": "replay"})["gen"], -1, position.epoch)
            self._meta = self.replica.load()
            return 1
        view = self.leader.read_all()
        progress = self.replica.begin_restore({"source": "read"})
        self._write_generation(progress, self._ops_of(self.view.entries(view.entries), select=False))
        return self._finish(progress, view.position.last_offset, view.position.epoch)

    def _from_snapshot(self, info: SnapshotInfo, resume: dict[str, Any] | None) -> int:
        if resume is None:
            resume = self.replica.begin_restore({"source": "snapshot", "number": info.number, "blob": info.blob_url})
        log.info("follower of %s: restoring snapshot %d (offset %d)%s", self.name, info.number, info.offset,
                 f", resuming after {resume['written']} entries" if resume["written"] else "")
        try:
            assert self.snapshots is not None  # a snapshot was found in them
            with self.snapshots.open(info, key_prefix=self.view.key_prefix) as (header, entries):
                skip = resume.get("read", resume["written"])  # read before: the restore resumes after them
                if not self._write_generation(resume, self._ops_of(itertools.islice(entries, skip, None)), skip):
                    return 0  # stopping: the restore resumes on the next start
        except (CorruptStateError, NotFoundError, MissingDependencyError) as e:  # blobs unreadable here
            log.warning("follower of %s: snapshot %d unusable (%s); falling back", self.name, info.number, e)
            self.replica.abandon_restore()
            self._meta = self.replica.load()
            self.snapshots = None  # this run: full read instead
            return 1
        return self._finish(resume, int(header["offset"]), header.get("epoch"))

    def _ops_of(self, entries: Iterator[StateEntry], select: bool = True) -> Iterator[Op | None]:
        """Each entry as the op writing it to the copy (rewritten; None if not in the view, when ``select``)."""
        pick = self.view.entry if select and not self.view.everything else None
        for entry in entries:
            shown = pick(entry) if pick is not None else entry
            yield None if shown is None else (shown.key.encode(), entry_bytes(shown.version, shown.kind, shown.value))

    def _write_generation(self, progress: dict[str, Any], ops: Iterator[Op | None], skip: int = 0) -> bool:
        """Write ``ops`` (None: an entry read and left out of the view), which follow ``skip`` read
        before, into the restore's generation in chunks; False if asked to stop part-way.
        ``progress["read"]`` counts the entries consumed (``written`` those written), so a resumed
        restore skips what it already read."""
        self._restored = progress["written"]
        chunk: list[Op] = []
        unflushed = 0  # ops read since progress was last written
        read = progress.get("read", skip)
        for read, op in enumerate(ops, start=skip + 1):
            unflushed += 1
            if op is not None:
                chunk.append(op)
            # a sparse view also records progress every few chunks' worth of entries read
            if len(chunk) >= self.restore_chunk or unflushed >= 10 * self.restore_chunk:
                progress["read"] = read
                self.replica.restore_chunk(progress, chunk)
                self._restored += len(chunk)
                chunk, unflushed = [], 0
                if self._tailing.stopping:
                    return False
        if chunk or unflushed:
            progress["read"] = read
            self.replica.restore_chunk(progress, chunk)
            self._restored += len(chunk)
        return True

    def _finish(self, progress: dict[str, Any], offset: int, epoch: str | None) -> int:
        self.replica.finish_restore(progress["gen"], offset, epoch)
        self._meta = self.replica.load()
        return max(1, int(progress["written"]))

    # ---- status --------------------------------------------------------------------------------

    def _raise_if_failed(self, since: float | None = None) -> None:
        """Raise what stopped the follower; ``since``: while waiting for polls started after then."""
        if self._error is not None:
            raise (ViewError if isinstance(self._error, ViewError) else NotFoundError)(str(self._error))

    @property
    def local_dir(self) -> str:
        """The directory of this follower's copy (a temporary one unless ``local_dir`` was given)."""
        return self.replica.local_dir

    @property
    def applied_offset(self) -> int:
        """The leader's changelog offset this copy reflects (-1: none yet)."""
        return self._meta.applied

    @property
    def lag(self) -> int:
        """Changelog records not yet applied (all of them while bootstrapping)."""
        self._raise_if_failed()
        return self.leader.count_changelog(after=self._meta.applied if self._meta.gen is not None else -1)

    @property
    def lag_ms(self) -> int:
        """0 when nothing is left to apply (:attr:`lag` 0), else the milliseconds since this follower last had
        applied everything (-1: not yet since it started)."""
        if self.lag == 0:
            return 0
        if self._caught_up_at == float("-inf"):
            return -1
        return int((time.monotonic() - self._caught_up_at) * 1000)

    def wait_until_caught_up(self, timeout: float | None = None) -> bool:
        """True once every change the leader committed before this call is applied here; False after
        ``timeout`` seconds. Raises :class:`NotFoundError` if the function was deleted."""
        called = time.monotonic()
        deadline = None if timeout is None else called + timeout
        with self._cond:
            while self._caught_up_at < called:
                self._raise_if_failed(since=called)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(0.1 if remaining is None else min(remaining, 0.1))
        self._raise_if_failed()
        return True

    def status(self) -> dict[str, Any]:
        """Where this follower is, as JSON-ready data (no call to the leader)."""
        meta = self._meta
        return {"tenant": self.tenant, "namespace": self.namespace, "name": self.name, "phase": self._phase,
                "appliedOffset": meta.applied, "epoch": meta.epoch, "generation": meta.gen,
                "restoredEntries": self._restored if meta.restore is not None or self._phase == "restoring" else None,
                "error": None if self._error is None else str(self._error),
                "view": None if self.view.everything else self.view.describe()}

    # ---- reads: the local copy -----------------------------------------------------------------

    def get_entry(self, key: str) -> StateEntry | None:
        self._raise_if_failed()
        return self.replica.get_entry(key)

    def get_entries(self, keys: Iterable[str]) -> dict[str, StateEntry]:
        self._raise_if_failed()
        return self.replica.get_entries(keys)

    def scan_entries(self, prefix: str = "", start_after: str | None = None,
                     limit: int | None = None) -> Iterator[StateEntry]:
        self._raise_if_failed()
        return self.replica.scan_entries(prefix, start_after, limit)

    def has_marker(self, marker: str) -> bool:
        return self.leader.has_marker(marker)

    def read_changelog(self, after: int = -1, limit: int | None = None) -> list[ChangelogRecord]:
        return self.leader.read_changelog(after, limit)

    def changelog_position(self) -> ChangelogPosition:
        return self.leader.changelog_position()

    def changelog_partitions(self) -> int:
        return self.leader.changelog_partitions()

    def read_partition_changelog(self, partition: int, after: int = -1,
                                 limit: int | None = None) -> list[ChangelogRecord]:
        return self.leader.read_partition_changelog(partition, after, limit)

    def partition_position(self, partition: int) -> ChangelogPosition:
        return self.leader.partition_position(partition)

    @property
    def batch_limits(self) -> BatchLimits:
        return self.leader.batch_limits

    # ---- writes: refused -----------------------------------------------------------------------

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise ReadOnlyStoreError(f"{self._fqfn} here is a read-only follower: "
                                 "write to the leader (the function's own state store)")

    put = set_counter = delete = incr = apply_batch = replace_state = compact_changelog = _refuse
