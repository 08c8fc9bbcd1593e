"""``k8s://[CONTEXT@]NAMESPACE[/PREFIX]``: the metadata contract on a Kubernetes API server, through the official
``kubernetes`` client. ``CONTEXT``: a kubeconfig context (default: the kubeconfig's current one); the kubeconfig is
``?kubeconfig=PATH``, else ``$KUBECONFIG``, else ``~/.kube/config``; inside a pod with none of them (or with
``?in_cluster=true``) the pod's service account is used. ``PREFIX`` keeps several stores apart in one namespace.

Layout (all in ``NAMESPACE``, labelled ``statekeep.io/store=<STORE>``, a hash of ``PREFIX``), so
``kubectl get configmaps -l statekeep.io/store=<STORE>`` shows a store:

- one ConfigMap per key, ``sk-<STORE>-<hash of the path>``: the value in ``binaryData["value"]``; annotations
  ``statekeep.io/path`` (the path itself), ``statekeep.io/version`` (the contract's version: 0 on create, one more
  per put; kept in the object because ``resourceVersion`` is a global revision, not a per-key count),
  ``statekeep.io/created-ms``, ``statekeep.io/modified-ms``, ``statekeep.io/owner`` (an ephemeral key's session);
  label ``statekeep.io/parent`` (a hash of the parent path: ``get_children`` is one list by label) and, on an
  ephemeral key, ``statekeep.io/owner``. Names are hashes because a path may hold characters object names cannot.
- one ConfigMap per parent that had sequential children, ``sk-<STORE>-s-<hash>``: the last number given out,
  never deleted, so numbers are never reused.
- one Lease per open store, ``sk-<STORE>-l-<session>``: the session. It is renewed every ``session_timeout/3``
  seconds; another store that sees it unrenewed for ``session_timeout`` (judged by its own clock: the Lease's
  ``resourceVersion`` has not changed, as client-go's leader election judges a Lease) deletes the session's
  ephemeral keys and then the Lease. So an ephemeral key goes within about ``session_timeout`` plus a
  renewal interval after its holder stops renewing, provided some store of the same ``PREFIX`` is open.
- one ConfigMap per ``multi`` under way, ``sk-<STORE>-t-<id>``: its commit record (below), deleted when done; an
  object under its intent carries the label ``statekeep.io/txn=sk-<STORE>-t-<id>`` (what :meth:`sweep` lists).

Writes. One key's update is one ``replace`` with the ``resourceVersion`` last seen as precondition: a 409
Conflict is a lost compare-and-set, read again. Anything that touches more than one object (a ``multi``, a create,
which must find its parent present and persistent, a sequential put) is a transaction in the manner of
Percolator, since Kubernetes has no multi-object transaction: the store reads what the operations need, applies
them with ``_tree.Changes`` (the code that defines the contract for memory:// and local://, so results and errors
are the same), then marks every object it read or will write with an *intent* naming a commit record (a
``replace`` with the ``resourceVersion`` it read, or the ``create`` of a placeholder for an absent key: a 409
means another writer got there first, so it starts again), and commits by *creating* the commit record, which
carries the writes. Until then nothing is visible: readers see the values before the intents. A store that finds
an intent whose record says committed applies it (so does the writer after committing); an intent of a record
that was never created is void once older than ``timeout/2``: the finder creates the record as "aborted", so the
writer's own create fails with a 409 and it starts again (create is the one atomic decision both race for).
A listing shows a transaction only if its record is no newer than the list (its ``resourceVersion``): the
writer marks in parallel, so a list taken while it marks may hold some of its intents and not others.
Hence every ``multi`` is atomic and isolated, whatever its operations; its size is bounded by the commit record:
at most ``max_request_bytes`` of values in one ``multi`` (:class:`ValueTooLargeError` before anything is written).

Limits: a ConfigMap holds at most 1 MiB of data (the API server's limit); a value at most
``backend_max_value_size`` (1 MiB less 16 KiB for the commit record's own data). Times: ``created_ms`` and
``modified_ms`` come from the writer's clock.

Notifications: one watch of the store's ConfigMaps, started with the first listener (after a list, so nothing
written once ``add_listener`` returns is missed) and resumed from the last ``resourceVersion`` seen after an
error. After a 410 Gone (the server no longer has that revision) it lists again and synthesizes the notifications
the gap hid (Created, Modified, Deleted by comparing with what it had seen), then watches on. Intents and
placeholders never notify. Errors: an unreachable server raises :class:`StoreUnavailableError`; a write whose
request may have reached the server before the connection failed raises :class:`PossibleInconsistentStateError`;
401 :class:`UnauthorizedError`, 403 :class:`ForbiddenError`.
"""

from __future__ import annotations

import base64
import concurrent.futures
import datetime
import functools
import hashlib
import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

from statekeep.background import Periodic
from statekeep.lru import remember
from statekeep.errors import (
    AlreadyExistsError, BadVersionError, ForbiddenError, InvalidArgumentError, MissingDependencyError,
    NotEmptyError, NotFoundError, PossibleInconsistentStateError, StatekeepError, StoreClosedError,
    StoreUnavailableError, UnauthorizedError, ValueTooLargeError,
)
from statekeep.metadata._tree import Changes, Record
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.types import (
    Delete, GetResult, NotificationType, Op, Put, SessionEvent, Stat, join, parent_of, validate_path,
)
from statekeep.retry import DEFAULT as RETRY, RECONNECT
from statekeep.validate import check_int, check_number

try:
    import urllib3
    from kubernetes import client as _client, config as _config
    from kubernetes.client.exceptions import ApiException
    from kubernetes.watch import watch as _watch
except ImportError as e:  # pragma: no cover - depends on the installation
    raise MissingDependencyError("k8s:// needs the 'kubernetes' package: pip install 'statekeep[kubernetes]'") from e

log = logging.getLogger(__name__)
# the client's generated signatures want its model classes; the store sends and reads plain JSON
k8s_client: Any = _client
k8s_config: Any = _config
iter_resp_lines: Callable[[Any], Iterator[str]] = _watch.iter_resp_lines

#: the API server's limit on a ConfigMap's data
CONFIGMAP_MAX_BYTES = 1024 * 1024
_RESERVED = 16 * 1024  # of a commit record, for its list of operations

_A = "statekeep.io/"
_PATH, _VERSION, _CREATED, _MODIFIED, _OWNER = (_A + n for n in ("path", "version", "created-ms", "modified-ms",
                                                                 "owner"))
_TXN, _SEQUENCE, _STATE = _A + "txn", _A + "sequence", _A + "state"
_STORE, _PARENT, _KIND = _A + "store", _A + "parent", _A + "kind"
_STARTED = _A + "started-ms"


def _hash(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Retry(Exception):
    """The attempt lost a race resolved by starting again (another writer's intent, a 409)."""


class _Conflict(Exception):
    """A 409 from the API server: a precondition failed or the object exists already."""


class _Gone(Exception):
    """A 410 from a watch: the server no longer has the revision asked for."""


def _revision(metadata: dict[str, Any]) -> int:
    """An object's ``resourceVersion`` as a number (etcd's revision, which is what the API server gives; its API
    calls it opaque, so an unexpected one counts as the newest)."""
    try:
        return int(metadata.get("resourceVersion") or 0)
    except ValueError:
        return 1 << 62


def _micro_time() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _Txn:
    """The commit record of one ``multi``: its name, when it began, and (once read) its state and writes."""

    __slots__ = ("name", "started_ms", "state", "ops", "values", "revision")

    def __init__(self, name: str, started_ms: int, state: str = "", ops: dict[str, Any] | None = None,
                 values: dict[str, bytes] | None = None) -> None:
        self.name, self.started_ms, self.state = name, started_ms, state
        self.ops, self.values = ops or {}, values or {}
        self.revision = 0  # the record's resourceVersion (when it was decided), once read


class KubernetesStore(MetadataStore):
    """``k8s://[CONTEXT@]NAMESPACE[/PREFIX]``: see the module docstring. Options (URL query or keywords):
    ``kubeconfig`` (a path), ``in_cluster`` (use the pod's service account), ``timeout`` (seconds an operation
    may take, default 10), ``session_timeout`` (whole seconds a session outlives its last renewal, default 10),
    ``sweep_after`` (seconds, default 120: see :meth:`sweep`), ``max_value_size``. Opening raises
    :class:`StoreUnavailableError` if the server does not answer within ``timeout``, :class:`NotFoundError` if
    ``NAMESPACE`` does not exist."""

    scheme = "k8s"
    capabilities = frozenset({"persistent", "multi_process", "sessions", "sequence_counters"})
    max_multi_ops = 128
    max_request_bytes = CONFIGMAP_MAX_BYTES - _RESERVED
    backend_max_value_size = CONFIGMAP_MAX_BYTES - _RESERVED

    def __init__(self, namespace: str, prefix: str = "", *, context: str | None = None,
                 kubeconfig: str | None = None, in_cluster: bool = False, timeout: float = 10.0,
                 session_timeout: int = 10, sweep_after: float = 120.0, **options: Any) -> None:
        super().__init__(**options)
        prefix = prefix.strip("/")
        if prefix:
            validate_path("/" + prefix)
        if not namespace or not all(c.isalnum() or c == "-" for c in namespace) or len(namespace) > 63:
            raise InvalidArgumentError(f"k8s:// needs a namespace name (lowercase letters, digits, '-'), got "
                                       f"{namespace!r}")
        check_number(timeout, "timeout", positive=True, unit=" of seconds")
        check_int(session_timeout, "session_timeout", minimum=1)
        check_number(sweep_after, "sweep_after", positive=True, unit=" of seconds")
        self.namespace, self.prefix = namespace, "/" + prefix if prefix else ""
        self.timeout, self.session_timeout = float(timeout), session_timeout
        self._retry = RETRY.bounded(seconds=self.timeout)
        self._stale_ms = int(self.timeout * 500)  # an intent older than this whose record is missing is void
        self.sweep_after = float(sweep_after)
        self._commit_deadline_ms = int(self.sweep_after * 250)  # a writer no longer commits a multi this old
        self._next_sweep = 0.0  # monotonic time of the next sweep() by the session keeper
        self.store_id = _hash(self.prefix or "/", 12)
        self._base = f"sk-{self.store_id}"
        self._api = self._client(context, kubeconfig, in_cluster)
        self.server = self._api.configuration.host
        self._core = k8s_client.CoreV1Api(self._api)
        self._coord = k8s_client.CoordinationV1Api(self._api)
        self._session = 0  # this store's session id (its Lease names it); 0 while it has none
        self._has_session = threading.Event()  # set while _session is not 0
        self._lease_rv = ""
        self._renewed = 0.0  # monotonic time of the last renewal that worked
        self._connected = True
        self._session_lock = threading.Lock()
        self._seen_leases: dict[str, tuple[str, float]] = {}  # others' Lease -> (resourceVersion, first seen)
        self._watch_lock = threading.Lock()
        self._watch_thread: threading.Thread | None = None
        self._watch_stop = threading.Event()
        self._watch_rv = ""
        self._watch_response: Any = None
        #: path -> (resourceVersion, version, created_ms, owner) as this store last read or wrote it
        self._versions: dict[str, tuple[str, int, int, int]] = {}
        self._known: dict[str, tuple[int, int]] = {}  # path -> (version, resourceVersion) the watch last saw
        self._closing = False
        try:  # the session's Lease is the first write: a namespace that does not exist answers 404
            RECONNECT.bounded(seconds=self.timeout).repeat(self._new_session)
        except NotFoundError as e:
            self._api.close()
            raise NotFoundError(f"k8s://: namespace {namespace!r} does not exist on {self.server}") from e
        except BaseException:
            self._api.close()
            raise
        self._keeper = Periodic(f"statekeep-k8s-session-{self._session:x}", self.session_timeout / 3,
                                self._keep_session, what="k8s:// session renewal", log=log)
        #: marks and applies a transaction's objects at once, and deletes finished commit records
        self._pool = concurrent.futures.ThreadPoolExecutor(8, thread_name_prefix="statekeep-k8s")
        self._keeper.start()

    @classmethod
    def from_url(cls, rest: str, options: dict[str, Any]) -> KubernetesStore:
        where, _, prefix = rest.partition("/")
        context, at, namespace = where.rpartition("@")
        if at and "context" not in options:
            options = {**options, "context": context}
        return cls(namespace, prefix, **options)

    def _client(self, context: str | None, kubeconfig: str | None, in_cluster: bool) -> Any:
        configuration = k8s_client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        try:
            if in_cluster or (not kubeconfig and not os.path.exists(path.split(os.pathsep)[0])
                              and "KUBERNETES_SERVICE_HOST" in os.environ):
                k8s_config.load_incluster_config(client_configuration=configuration)
            else:
                k8s_config.load_kube_config(config_file=path, context=context or None,
                                            client_configuration=configuration, persist_config=False)
        except (k8s_config.ConfigException, OSError, ValueError) as e:
            raise InvalidArgumentError(f"k8s://: no usable Kubernetes configuration ({e})") from e
        configuration.retries = False  # the store's own retry policy decides; a POST is never resent blindly
        configuration.connection_pool_maxsize = 32
        return k8s_client.ApiClient(configuration)

    # ---- names -------------------------------------------------------------------------------

    def _key_name(self, path: str) -> str:
        return f"{self._base}-{_hash(path, 32)}"

    def _seq_name(self, parent: str) -> str:
        return f"{self._base}-s-{_hash(parent, 32)}"

    def _lease_name(self, session: int) -> str:
        return f"{self._base}-l-{session:016x}"

    def _parent_label(self, path: str) -> str:
        return _hash(path, 40)

    # ---- the API server and errors -----------------------------------------------------------

    def _call(self, request: Callable[[], Any], *, write: bool = False) -> Any:
        """``request()`` (a client call with ``_preload_content=False``) as parsed JSON; errors become the
        contract's: a 409 raises :class:`_Conflict` for the caller to judge, a 404 :class:`NotFoundError`."""
        if self._closed and not self._closing:
            raise StoreClosedError("the store is closed")
        try:
            response = request()
        except ApiException as e:
            raise self._error(e.status, e.reason or "", e.body, write) from e
        except urllib3.exceptions.HTTPError as e:
            never_sent = isinstance(e, urllib3.exceptions.MaxRetryError) and isinstance(
                e.reason, urllib3.exceptions.NewConnectionError) or isinstance(e, urllib3.exceptions.NewConnectionError)
            if write and not never_sent:
                raise PossibleInconsistentStateError(f"Kubernetes API at {self.server}: {e}; the write may or may "
                                                     "not have been applied") from e
            raise StoreUnavailableError(f"Kubernetes API at {self.server} is unavailable: {e}") from e
        data = response.data
        return json.loads(data) if data else {}

    def _error(self, status: int, reason: str, body: Any, write: bool) -> Exception:
        if self._closed and not self._closing:
            return StoreClosedError("the store is closed")
        message = reason
        try:
            message = json.loads(body).get("message", reason)
        except (TypeError, ValueError, AttributeError):
            pass
        if status == 409:
            return _Conflict(message)
        if status == 404:
            return NotFoundError(message)
        if status == 410:
            return _Gone(message)
        if status == 401:
            return UnauthorizedError(f"Kubernetes API at {self.server}: {message}")
        if status == 403:
            return ForbiddenError(f"Kubernetes API at {self.server}: {message}")
        if status in (413, 422) and ("Too long" in message or "too large" in message.lower()):
            return ValueTooLargeError(f"the Kubernetes API refused the object ({message}); keep large state in blob "
                                      "storage with statekeep.handles.StateHandleStore and only its handle here")
        if status == 422 or status == 400:
            return InvalidArgumentError(f"Kubernetes API at {self.server}: {message}")
        if write and status >= 500 and status != 503:
            return PossibleInconsistentStateError(f"Kubernetes API at {self.server}: {status} {message}; the write "
                                                  "may or may not have been applied")
        return StoreUnavailableError(f"Kubernetes API at {self.server} is unavailable: {status} {message}")

    def _read_cm(self, name: str) -> dict[str, Any] | None:
        try:
            return cast(dict[str, Any], self._call(lambda: self._core.read_namespaced_config_map(
                name, self.namespace, _request_timeout=self.timeout, _preload_content=False)))
        except NotFoundError:
            return None

    def _list_cm(self, selector: str) -> dict[str, Any]:
        return cast(dict[str, Any], self._call(lambda: self._core.list_namespaced_config_map(
            self.namespace, label_selector=selector, _request_timeout=self.timeout, _preload_content=False)))

    def _create_cm(self, body: dict[str, Any]) -> dict[str, Any]:
        return cast(dict[str, Any], self._call(lambda: self._core.create_namespaced_config_map(
            self.namespace, body, _request_timeout=self.timeout, _preload_content=False), write=True))

    def _replace_cm(self, body: dict[str, Any]) -> dict[str, Any]:
        name = body["metadata"]["name"]
        return cast(dict[str, Any], self._call(lambda: self._core.replace_namespaced_config_map(
            name, self.namespace, body, _request_timeout=self.timeout, _preload_content=False), write=True))

    def _delete_cm(self, name: str, resource_version: str | None) -> None:
        options = {"preconditions": {"resourceVersion": resource_version}} if resource_version else {}
        self._call(lambda: self._core.delete_namespaced_config_map(
            name, self.namespace, body=options, _request_timeout=self.timeout, _preload_content=False), write=True)

    # ---- objects <-> records -----------------------------------------------------------------

    def _key_body(self, path: str, record: Record, rv: str | None = None) -> dict[str, Any]:
        annotations = {_PATH: path, _VERSION: str(record.version), _CREATED: str(record.created_ms),
                       _MODIFIED: str(record.modified_ms)}
        labels = {_STORE: self.store_id, _KIND: "key", _PARENT: self._parent_label(parent_of(path))}
        if record.owner:
            annotations[_OWNER] = labels[_OWNER] = f"{record.owner:016x}"
        metadata: dict[str, Any] = {"name": self._key_name(path), "labels": labels, "annotations": annotations}
        if rv:
            metadata["resourceVersion"] = rv
        return {"metadata": metadata, "binaryData": {"value": base64.b64encode(record.value).decode()}}

    def _placeholder(self, name: str, path: str, kind: str, txn: str) -> dict[str, Any]:
        """An object that holds an intent on a key (or counter) that does not exist: readers see it as absent."""
        labels = {_STORE: self.store_id, _KIND: kind, _TXN: txn.partition("@")[0]}
        if kind == "key":
            labels[_PARENT] = self._parent_label(parent_of(path))
        return {"metadata": {"name": name, "labels": labels, "annotations": {_PATH: path, _TXN: txn}}}

    @staticmethod
    def _record(obj: dict[str, Any]) -> Record | None:
        """The key an object holds, ignoring any intent (None: a placeholder)."""
        annotations = obj["metadata"].get("annotations") or {}
        if _VERSION not in annotations:
            return None
        owner = annotations.get(_OWNER)
        value = (obj.get("binaryData") or {}).get("value")
        return Record(int(annotations[_VERSION]), int(annotations.get(_CREATED, 0)),
                      int(annotations.get(_MODIFIED, 0)), int(owner, 16) if owner else 0,
                      base64.b64decode(value) if value else b"")

    def _stat(self, path: str, record: Record) -> Stat:
        return record.stat(path, self._session)

    # ---- intents and commit records ----------------------------------------------------------

    def _txn_name(self) -> str:
        return f"{self._base}-t-{uuid.uuid4().hex[:20]}"

    def _read_txn(self, intent: str) -> _Txn:
        name, _, started = intent.partition("@")
        txn = _Txn(name, int(started or 0))
        obj = self._read_cm(name)
        if obj is None:
            txn.state = "pending" if _now_ms() - txn.started_ms < self._stale_ms else "void"
            return txn
        txn.state = obj["metadata"]["annotations"].get(_STATE, "aborted")
        txn.revision = _revision(obj["metadata"])
        if txn.state == "committed":
            txn.ops = json.loads((obj.get("data") or {}).get("ops", "{}"))
            txn.values = {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
        return txn

    def _abort(self, txn: _Txn) -> _Txn:
        """Make ``txn`` (found void) aborted for good: its writer can no longer commit it."""
        body = {"metadata": {"name": txn.name, "labels": {_STORE: self.store_id, _KIND: "txn"},
                             "annotations": {_STATE: "aborted", _STARTED: str(txn.started_ms)}}}
        try:
            self._create_cm(body)
            txn.state = "aborted"
            return txn
        except _Conflict:  # its writer (or another finder) decided first
            return self._read_txn(f"{txn.name}@{txn.started_ms}")

    def _settle(self, obj: dict[str, Any], txn: _Txn | None = None) -> tuple[dict[str, Any] | None, bool]:
        """``obj`` with its intent resolved where its record has decided: (the object now or None if gone,
        whether an undecided intent remains). Applies a committed write, drops an aborted one. ``txn``: its
        record as already read (a listing decides each transaction once, so it never shows half of one)."""
        intent = obj["metadata"].get("annotations", {}).get(_TXN)
        if not intent:
            return obj, False
        if txn is None or not intent.startswith(txn.name):
            txn = self._read_txn(intent)
        if txn.state in ("pending", "void"):
            # no record: never committed, or committed, applied and deleted since ``obj`` was read (its writer
            # deletes a record only after applying every intent): read the object again to tell
            again = self._read_cm(obj["metadata"]["name"])
            if again is None:
                return None, False
            if again["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
                return self._settle(again)
        if txn.state == "void":
            txn = self._abort(txn)
        if txn.state == "pending":
            return obj, True
        try:
            return self._apply_intent(obj, txn), False
        except (_Conflict, NotFoundError):  # another store resolved it meanwhile: read it again
            again = self._read_cm(obj["metadata"]["name"])
            return (None, False) if again is None else self._settle(again)

    def _settle_listing(self, list_objects: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
        """The items of ``list_objects()`` (one list: one moment, its ``resourceVersion``) as readers saw them at
        that moment, every transaction in it decided once: all of one transaction's writes shown, or none.

        A transaction is shown only if its commit record was created at or before the list's revision. One that
        committed after the list (its record newer) is shown as before its intents, although its record now says
        committed: its writer marks its objects in parallel, so the list may hold some of its intents and not yet
        others (a changelog's later record without an earlier one), and showing the marked ones would show half of
        it. None of its intents had been applied at the list's revision (applying follows the commit)."""
        for _ in self._retry.attempts():
            listed = list_objects()
            items = list(listed.get("items") or [])
            at = _revision(listed.get("metadata") or {})
            txns: dict[str, _Txn] = {}
            undecided: list[dict[str, Any]] = []
            for item in items:
                intent = (item["metadata"].get("annotations") or {}).get(_TXN)
                if intent and intent not in txns:
                    txns[intent] = txn = self._read_txn(intent)
                    if txn.state == "committed" and txn.revision > at:
                        txn.state = "later"  # committed after the list: not at the list's moment
                if intent and txns[intent].state in ("pending", "void"):
                    undecided.append(item)
            # no record: not committed yet, or committed, applied and its record deleted since the list (a writer
            # deletes its record only after applying every intent): if none of those objects changed since the
            # list, none of those transactions had committed by now, so showing none of them is one moment
            if any((self._read_cm(item["metadata"]["name"]) or {}).get("metadata", {}).get("resourceVersion")
                   != item["metadata"]["resourceVersion"] for item in undecided):
                continue
            shown: list[dict[str, Any]] = []
            for item in items:
                intent = (item["metadata"].get("annotations") or {}).get(_TXN) or ""
                decided = txns.get(intent)
                if decided is not None and decided.state in ("pending", "void", "later"):
                    shown.append(item)  # as before the intent (a void one is cleared by the next writer)
                    continue
                settled, _ = self._settle(item, decided)
                if settled is not None:
                    shown.append(settled)
            return shown
        raise StoreUnavailableError(f"Kubernetes API at {self.server}: transactions kept committing under a "
                                    f"listing for {self.timeout}s")

    def _apply_intent(self, obj: dict[str, Any], txn: _Txn) -> dict[str, Any] | None:
        """Resolve ``obj``'s intent of ``txn`` (committed or aborted); the object after it, None if deleted."""
        metadata = obj["metadata"]
        annotations = dict(metadata.get("annotations") or {})
        name, rv, path = metadata["name"], metadata["resourceVersion"], annotations.get(_PATH, "")
        op = txn.ops.get(name) if txn.state == "committed" else None
        placeholder = _VERSION not in annotations and _SEQUENCE not in annotations
        if op is None or op[0] == "check":
            if placeholder:
                self._delete_cm(name, rv)
                return None
            annotations.pop(_TXN, None)
            labels = {k: v for k, v in (metadata.get("labels") or {}).items() if k != _TXN}
            return self._replace_cm({**obj, "metadata": {**metadata, "labels": labels, "annotations": annotations}})
        if op[0] == "delete":
            self._delete_cm(name, rv)
            return None
        if op[0] == "sequence":
            labels = {_STORE: self.store_id, _KIND: "sequence"}
            return self._replace_cm({"metadata": {"name": name, "resourceVersion": rv, "labels": labels,
                                                  "annotations": {_PATH: path, _SEQUENCE: str(op[1])}}})
        _, version, created, modified, owner = op
        record = Record(version, created, modified, owner, txn.values.get(name, b""))
        return self._replace_cm(self._key_body(path, record, rv))

    def _effective(self, obj: dict[str, Any] | None) -> dict[str, Any] | None:
        """``obj`` as a reader sees it: a decided intent applied; an undecided one ignored."""
        if obj is None:
            return None
        settled, _ = self._settle(obj)
        return settled

    # ---- reads -------------------------------------------------------------------------------

    def _get(self, path: str) -> GetResult | None:
        obj = self._effective(self._read_cm(self._key_name(path)))
        record = self._record(obj) if obj is not None else None
        if record is None or obj is None or obj["metadata"]["annotations"].get(_PATH) != path:
            return None
        if obj["metadata"]["annotations"].get(_TXN) is None:  # an object under an intent is not updated alone
            self._remember(path, record, obj)
        return GetResult(record.value, self._stat(path, record))

    def _children_objects(self, path: str) -> list[tuple[str, dict[str, Any]]]:
        selector = f"{_STORE}={self.store_id},{_KIND}=key,{_PARENT}={self._parent_label(path)}"
        found = []
        for obj in self._settle_listing(lambda: self._list_cm(selector)):
            if self._record(obj) is None:
                continue
            child = obj["metadata"]["annotations"].get(_PATH, "")
            if parent_of(child) == path and child != path:
                found.append((child.rpartition("/")[2], obj))
        return sorted(found, key=lambda item: item[0])

    def _get_children(self, path: str) -> list[str]:
        return [name for name, _ in self._children_objects(path)]

    def _last_sequence(self, parent: str) -> int:
        obj = self._effective(self._read_cm(self._seq_name(parent)))
        return int(obj["metadata"]["annotations"].get(_SEQUENCE, 0)) if obj is not None else 0

    # ---- writes ------------------------------------------------------------------------------

    def _retrying(self, attempt: Callable[[], Any]) -> Any:
        for _ in self._retry.attempts():
            try:
                result = attempt()
                if result is not _Retry:
                    return result
            except (_Retry, _Conflict):
                pass
        raise StoreUnavailableError(f"Kubernetes API at {self.server}: other writers kept this write from "
                                    f"committing for {self.timeout}s; nothing was written")

    def _put(self, op: Put) -> Stat:
        if op.sequential:
            return super()._put(op)
        return cast(Stat, self._retrying(lambda: self._put_once(op)))

    def _put_once(self, op: Put) -> Any:
        """One key's update is one replace, conditional on the ``resourceVersion`` this store last saw of it (read
        first when it has seen none, or that one is stale: a 409); a create (its parent must exist and be
        persistent) is a multi."""
        seen = self._versions.get(op.path)
        if seen is not None and op.expected_version in (None, seen[1]):
            rv, version, created, owner = seen
            record = Record(version + 1, created, _now_ms(), owner, op.value)
            try:
                self._remember(op.path, record, self._replace_cm(self._key_body(op.path, record, rv)))
                return self._stat(op.path, record)
            except (_Conflict, NotFoundError):
                self._versions.pop(op.path, None)  # changed since: read it
        obj, undecided = self._settle_or_none(self._key_name(op.path))
        if undecided:
            return _Retry
        current = self._record(obj) if obj is not None else None
        if current is None:
            if op.expected_version is not None and op.expected_version >= 0:
                raise BadVersionError(f"{op.path} does not exist (expected version {op.expected_version})")
            created = self._multi_once([op], {self._key_name(op.path): (obj, op.path, "key")})
            return _Retry if created is _Retry else created[0]
        assert obj is not None
        if op.expected_version == -1:
            raise AlreadyExistsError(f"{op.path} already exists")
        if op.expected_version is not None and current.version != op.expected_version:
            raise BadVersionError(f"{op.path} is at version {current.version}, not {op.expected_version}")
        record = Record(current.version + 1, current.created_ms, _now_ms(), current.owner, op.value)
        replaced = self._replace_cm(self._key_body(op.path, record, obj["metadata"]["resourceVersion"]))  # 409: again
        self._remember(op.path, record, replaced)
        return self._stat(op.path, record)

    def _remember(self, path: str, record: Record, obj: dict[str, Any]) -> None:
        """Keep ``obj``'s ``resourceVersion`` as the one ``path`` had at ``record``: the next update of it by
        this store is then one request (a 409 if it changed meanwhile, and it reads again)."""
        remember(self._versions, path, (obj["metadata"]["resourceVersion"], record.version, record.created_ms,
                                        record.owner), 10_000)

    def _settle_or_none(self, name: str) -> tuple[dict[str, Any] | None, bool]:
        obj = self._read_cm(name)
        return (None, False) if obj is None else self._settle(obj)

    def _delete(self, op: Delete) -> None:
        self._retrying(lambda: self._delete_once(op))

    def _delete_once(self, op: Delete) -> Any:
        obj, undecided = self._settle_or_none(self._key_name(op.path))
        if undecided:
            return _Retry
        current = self._record(obj) if obj is not None else None
        if current is None or obj is None:
            raise NotFoundError(f"{op.path} does not exist")
        if op.expected_version is not None and current.version != op.expected_version:
            raise BadVersionError(f"{op.path} is at version {current.version}, not {op.expected_version}")
        # a child's create marks this key with an intent first, so the precondition fails if one raced the listing
        if self._children_objects(op.path):
            raise NotEmptyError(f"{op.path} has children; use delete_recursive")
        try:
            self._delete_cm(obj["metadata"]["name"], obj["metadata"]["resourceVersion"])
        except NotFoundError:
            return _Retry
        return None

    def _multi(self, ops: list[Op]) -> list[Stat | None]:
        if len(ops) > self.max_multi_ops:
            raise InvalidArgumentError(f"a k8s:// multi takes at most {self.max_multi_ops} operations; split it")
        size = sum(len(op.value) for op in ops if isinstance(op, Put))
        if size > self.max_request_bytes:
            raise ValueTooLargeError(f"a k8s:// multi carries at most {self.max_request_bytes} bytes of values (its "
                                     f"commit record is one ConfigMap), this one {size}; split it")
        return cast(list[Stat | None], self._retrying(lambda: self._multi_once(ops)))

    def _multi_once(self, ops: list[Op], known: dict[str, tuple[dict[str, Any] | None, str, str]] | None = None
                    ) -> Any:
        ephemeral = any(isinstance(op, Put) and op.ephemeral for op in ops)
        if ephemeral and not self._session:  # lost: wait for the next Lease as long as a call may take
            self._keeper.wake()
            self._has_session.wait(self.timeout)
        if ephemeral and not self._session:
            raise StoreUnavailableError(f"Kubernetes API at {self.server}: no session (its Lease could not be "
                                        "renewed); an ephemeral key cannot be written now")
        snapshot = _Snapshot(self)
        snapshot.seen.update(known or {})  # what the caller read already (settled)
        changes = Changes(snapshot, self._session, _now_ms())
        try:
            results = [changes.apply(op) for op in ops]  # raises the contract's error of the first failing op
        except StatekeepError:
            # the objects were read one by one: the error holds only if they all still are as read
            if not snapshot.unchanged():
                return _Retry
            raise
        if not changes.writes and not changes.sequences:
            return results if snapshot.unchanged() else _Retry  # nothing to write: checks of one moment
        txn = _Txn(self._txn_name(), _now_ms())
        intent = f"{txn.name}@{txn.started_ms}"
        ops_out: dict[str, Any] = {}
        values: dict[str, str] = {}
        for path, record in changes.writes.items():
            name = self._key_name(path)
            if record is None:
                ops_out[name] = ["delete"]
            else:
                ops_out[name] = ["put", record.version, record.created_ms, record.modified_ms, record.owner]
                values[name] = base64.b64encode(record.value).decode()
        for parent, last in changes.sequences.items():
            ops_out[self._seq_name(parent)] = ["sequence", last]
        # every object read is marked with the intent (all at once: a conflict aborts, nobody waits on a mark)
        marked: dict[str, dict[str, Any]] = {}  # name -> the object as marked
        committing = False
        try:
            names = sorted(snapshot.seen.keys() | ops_out.keys())
            if any(name not in snapshot.seen for name in names):  # Changes reads everything it writes
                raise _Conflict("an object written was not read")
            for name in names:
                ops_out.setdefault(name, ["check"])
            self._in_parallel([functools.partial(self._mark, name, snapshot.seen[name], intent, marked)
                               for name in names])
            # no child appeared since the listing: a creator marks the parent, so a parent marked here (read before
            # its listing) could not have gained one without a 409 on one of the two marks; listed again only the
            # parents that are no object (the root). (Listing every deleted key again, one at a time, made a
            # compaction's multi of 100 deletes outlast timeout/2 under load, and readers then voided it.)
            unmarked = [path for path in snapshot.listed if self._key_name(path) not in marked]

            def unchanged(path: str) -> None:
                if [n for n, _ in self._children_objects(path)] != snapshot.listed[path]:
                    raise _Conflict(f"the children of {path} changed")

            self._in_parallel([functools.partial(unchanged, path) for path in unmarked])
            if _now_ms() - txn.started_ms >= self._commit_deadline_ms:  # see sweep(): start again
                raise _Conflict("the transaction took longer than a commit may")
            body = {"metadata": {"name": txn.name, "labels": {_STORE: self.store_id, _KIND: "txn"},
                                 "annotations": {_STATE: "committed", _STARTED: str(txn.started_ms)}},
                    "data": {"ops": json.dumps(ops_out, separators=(",", ":"))}, "binaryData": values}
            committing = True
            self._create_cm(body)  # the commit point: a 409 means a reader aborted this transaction first
        except (_Conflict, NotFoundError, StatekeepError) as e:
            self._undo(txn, marked)  # decides the record: aborted, unless the commit did go through
            if txn.state == "committed":
                pass  # an ambiguous commit that had been applied: finish it below
            elif committing and txn.state != "aborted" and isinstance(e, PossibleInconsistentStateError):
                raise  # the commit may have been applied, and the server cannot tell now
            elif isinstance(e, (_Conflict, NotFoundError)):
                return _Retry  # another writer got there first (a 404: an object it read is gone)
            elif isinstance(e, PossibleInconsistentStateError):
                raise StoreUnavailableError(f"{e} (before the commit: nothing was written)") from e
            else:
                raise
        if txn.state != "committed" or not txn.ops:
            txn.state, txn.ops = "committed", ops_out
            txn.values = {k: base64.b64decode(v) for k, v in values.items()}
        self._finish(txn, marked)
        return results

    def _mark(self, name: str, seen: tuple[dict[str, Any] | None, str, str], intent: str,
              marked: dict[str, dict[str, Any]]) -> None:
        obj, path, kind = seen
        if obj is None:
            marked[name] = self._create_cm(self._placeholder(name, path, kind, intent))
        else:
            meta = obj["metadata"]
            annotations = {**(meta.get("annotations") or {}), _TXN: intent}
            labels = {**(meta.get("labels") or {}), _TXN: intent.partition("@")[0]}  # what sweep() lists
            marked[name] = self._replace_cm({**obj, "metadata": {**meta, "labels": labels,
                                                                 "annotations": annotations}})

    def _in_parallel(self, calls: list[Callable[[], Any]]) -> None:
        """Run ``calls`` at once on the store's pool; when all are done, raise the first error any raised."""
        if len(calls) == 1:
            calls[0]()
            return
        futures = [self._pool.submit(call) for call in calls]
        errors = [f.exception() for f in futures]
        for error in errors:
            if error is not None:
                raise error

    def _undo(self, txn: _Txn, marked: dict[str, dict[str, Any]]) -> None:
        """Abort ``txn`` (nothing of it becomes visible) and take its intents away, best effort: an intent left
        behind is void for any reader once its record says aborted."""
        try:
            self._abort(txn)  # sets txn.state: "aborted", or "committed" if the commit had gone through
            if txn.state != "aborted":
                return
            for name in marked:
                obj = self._read_cm(name)
                if obj is not None and obj["metadata"].get("annotations", {}).get(_TXN, "").startswith(txn.name):
                    self._apply_intent(obj, txn)
            self._delete_cm(txn.name, None)
        except (StatekeepError, _Conflict) as e:
            log.info("k8s:// %s: an aborted transaction's intents stay until a reader clears them (%s)",
                     self.server, e)

    def _finish(self, txn: _Txn, marked: dict[str, dict[str, Any]]) -> None:
        """Apply a committed ``txn`` to the objects it marked (all at once), then delete its record in the
        background (a reader that finds an intent without a record reads the object again: see _settle).
        What is not applied here, the next reader of the object applies."""
        def apply(obj: dict[str, Any]) -> None:
            with _suppress_conflict(), _suppress(NotFoundError):  # 409/404: a reader applied it first
                self._apply_intent(obj, txn)

        try:
            self._in_parallel([functools.partial(apply, obj) for obj in marked.values()])
        except StatekeepError as e:
            log.info("k8s:// %s: a committed transaction is applied by its next reader (%s)", self.server, e)
            return  # its record stays: the intents left need it

        def delete() -> None:
            try:
                self._delete_cm(txn.name, None)
            except StatekeepError as e:
                log.info("k8s:// %s: commit record %s left behind (%s)", self.server, txn.name, e)

        self._pool.submit(delete)

    def _raise_sequence(self, parent: str, at_least: int) -> int:
        name = self._seq_name(parent)

        def attempt() -> Any:
            obj, undecided = self._settle_or_none(name)
            if undecided:
                return _Retry
            last = int(obj["metadata"]["annotations"].get(_SEQUENCE, 0)) if obj is not None else 0
            if last >= at_least:
                return last
            body = {"metadata": {"name": name, "labels": {_STORE: self.store_id, _KIND: "sequence"},
                                 "annotations": {_PATH: parent, _SEQUENCE: str(at_least)}}}
            if obj is None or _SEQUENCE not in obj["metadata"]["annotations"]:
                if obj is not None:
                    return _Retry
                self._create_cm(body)
            else:
                body["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
                self._replace_cm(body)
            return at_least

        return cast(int, self._retrying(attempt))

    # ---- abandoned transactions ---------------------------------------------------------------

    def sweep(self) -> tuple[int, int]:
        """Clean up after writers that died (or gave up) in a ``multi`` between marking objects with intents
        and finishing; returns (intents resolved, commit records deleted). Readers never need it: they resolve
        each intent they meet as the contract says (a committed one applied, one whose record is missing after
        ``timeout/2`` aborted). This removes what no reader may come back to:

        - intents older than ``timeout/2`` (objects carry their transaction as a label, so one list finds them),
          resolved as a reader would;
        - committed records older than ``timeout/2``, once no object carries their intent (applied first);
        - aborted records older than ``sweep_after``, once no object carries their intent. An aborted record is
          what keeps a slow writer from committing after readers gave up on it, so it stays that long: a writer
          does not commit a ``multi`` begun more than ``sweep_after/4`` ago (it starts again), and the API server
          ends any request within its own timeout (60 s by default), well inside the rest.

        The session keeper runs it when the store opens and every ``sweep_after/2`` seconds after."""
        self._check_open()
        resolved = deleted = 0
        now = _now_ms()
        for obj in self._list_cm(f"{_STORE}={self.store_id},{_TXN}").get("items") or []:
            intent = (obj["metadata"].get("annotations") or {}).get(_TXN, "")
            if now - int(intent.partition("@")[2] or 0) < self._stale_ms:
                continue  # its writer may be at work
            with _suppress(NotFoundError):
                _, undecided = self._settle(obj)
                resolved += not undecided
        for record in self._list_cm(f"{_STORE}={self.store_id},{_KIND}=txn").get("items") or []:
            meta = record["metadata"]
            annotations = meta.get("annotations") or {}
            state, started = annotations.get(_STATE, "aborted"), int(annotations.get(_STARTED, 0))
            if now - started < (self._stale_ms if state == "committed" else self.sweep_after * 1000):
                continue
            txn = self._read_txn(f"{meta['name']}@{started}")
            if txn.state not in ("committed", "aborted"):
                continue  # deleted meanwhile
            carrying = self._list_cm(f"{_STORE}={self.store_id},{_TXN}={meta['name']}").get("items") or []
            for obj in carrying:  # left by a writer that died after committing, or cleared by no reader yet
                with _suppress(NotFoundError, _Conflict):
                    self._apply_intent(obj, txn)
            if carrying and self._list_cm(f"{_STORE}={self.store_id},{_TXN}={meta['name']}").get("items"):
                continue  # an object changed meanwhile: the next sweep
            with _suppress(NotFoundError, _Conflict):
                self._delete_cm(meta["name"], meta["resourceVersion"])
                deleted += 1
        return resolved, deleted

    # ---- sessions ----------------------------------------------------------------------------

    def _lease_body(self, session: int, rv: str | None = None) -> dict[str, Any]:
        now = _micro_time()
        metadata: dict[str, Any] = {"name": self._lease_name(session), "labels": {_STORE: self.store_id}}
        if rv:
            metadata["resourceVersion"] = rv
        return {"metadata": metadata, "spec": {"holderIdentity": f"{session:016x}", "renewTime": now,
                                               "acquireTime": now, "leaseDurationSeconds": self.session_timeout}}

    def _new_session(self) -> None:
        session = random.getrandbits(63) or 1
        body = self._lease_body(session)
        created = self._call(lambda: self._coord.create_namespaced_lease(
            self.namespace, body, _request_timeout=self.timeout, _preload_content=False), write=True)
        self._session, self._lease_rv, self._renewed = session, created["metadata"]["resourceVersion"], \
            time.monotonic()
        self._has_session.set()

    def _keep_session(self) -> None:
        """Renew the Lease; report ConnectionLost when a renewal fails, Reconnected when one works again,
        SessionLost when the Lease is gone (or was left unrenewed for ``session_timeout``: others may have
        removed its keys), SessionReestablished once a new one exists. Then reap others' expired sessions."""
        with self._session_lock:
            if self._closed:
                return
            try:
                if not self._session:
                    self._new_session()
                    self._emit_session(SessionEvent.SessionReestablished)
                elif time.monotonic() - self._renewed > self.session_timeout:
                    old = self._session  # others may have removed its keys already: end it for good
                    self._lost()
                    with _suppress(StatekeepError, _Conflict):
                        self._expire(old, None)
                    return
                else:
                    body = self._lease_body(self._session, self._lease_rv)
                    name = self._lease_name(self._session)
                    renewed = self._call(lambda: self._coord.replace_namespaced_lease(
                        name, self.namespace, body, _request_timeout=self.session_timeout / 3,
                        _preload_content=False), write=True)
                    self._lease_rv, self._renewed = renewed["metadata"]["resourceVersion"], time.monotonic()
                if not self._connected:
                    self._connected = True
                    self._emit_session(SessionEvent.Reconnected)
            except (NotFoundError, _Conflict):
                self._lost()
                return
            except StatekeepError as e:
                if self._connected:
                    log.warning("k8s:// %s: connection lost (%s)", self.server, e)
                    self._connected = False
                    self._emit_session(SessionEvent.ConnectionLost)
                return
        try:
            self._reap()
        except (StatekeepError, _Conflict) as e:
            log.info("k8s:// %s: expired sessions not reaped this time (%s)", self.server, e)
        if time.monotonic() >= self._next_sweep:  # at session start, then every sweep_after / 2
            self._next_sweep = time.monotonic() + self.sweep_after / 2
            with _suppress(RuntimeError):  # the pool is shut down: the store is closing
                self._pool.submit(self._sweep_quietly)  # not in this thread: the Lease's renewals must not wait

    def _sweep_quietly(self) -> None:
        try:
            self.sweep()
        except (StatekeepError, _Conflict) as e:
            log.info("k8s:// %s: abandoned transactions not swept this time (%s)", self.server, e)

    def _lost(self) -> None:
        if self._session:
            self._session = 0
            self._has_session.clear()
            self._emit_session(SessionEvent.SessionLost)
            self._keeper.wake()

    def _reap(self) -> None:
        """Delete the ephemeral keys of sessions whose Lease this store saw unrenewed for their duration, then
        the Lease. Judged by this process's monotonic clock, never by the holder's."""
        listed = self._call(lambda: self._coord.list_namespaced_lease(
            self.namespace, label_selector=f"{_STORE}={self.store_id}", _request_timeout=self.timeout,
            _preload_content=False))
        now, seen = time.monotonic(), {}
        for lease in listed.get("items") or []:
            name, rv = lease["metadata"]["name"], lease["metadata"]["resourceVersion"]
            if name == self._lease_name(self._session):
                continue
            first = self._seen_leases.get(name)
            since = first[1] if first is not None and first[0] == rv else now
            seen[name] = (rv, since)
            if now - since > (lease["spec"].get("leaseDurationSeconds") or self.session_timeout):
                self._expire(int(name.rpartition("-")[2], 16), rv)
                seen.pop(name)
        self._seen_leases = seen

    def _expire(self, session: int, lease_rv: str | None) -> None:
        """Remove session ``session``'s ephemeral keys and its Lease (with ``lease_rv`` as precondition: a
        renewal meanwhile keeps it alive)."""
        name = self._lease_name(session)
        if lease_rv is not None:  # mark it taken over first: its holder's next renewal then fails with a 409
            body = self._lease_body(session, lease_rv)
            body["spec"]["holderIdentity"] = "expired"
            try:
                self._call(lambda: self._coord.replace_namespaced_lease(
                    name, self.namespace, body, _request_timeout=self.timeout, _preload_content=False), write=True)
            except (_Conflict, NotFoundError):
                return  # renewed meanwhile, or another store took it over
        owned_by = f"{_STORE}={self.store_id},{_KIND}=key,{_OWNER}={session:016x}"
        for _ in range(2):  # twice: a create under way when the first list ran
            for obj in self._list_cm(owned_by).get("items") or []:
                delete = Delete(obj["metadata"]["annotations"].get(_PATH, ""))
                with _suppress_conflict(), _suppress(NotFoundError, NotEmptyError, BadVersionError):
                    self._retrying(lambda: self._delete_once(delete))
        with _suppress(NotFoundError):
            self._call(lambda: self._coord.delete_namespaced_lease(
                name, self.namespace, _request_timeout=self.timeout, _preload_content=False), write=True)

    def expire_session(self) -> None:
        """Test hook: end this store's session as if its Lease had expired: its ephemeral keys go, session
        listeners get SessionLost, then SessionReestablished when a new Lease exists."""
        self._check_open()
        with self._session_lock:
            session = self._session
            self._session = 0
            self._has_session.clear()
            if session:
                self._expire(session, None)
                self._emit_session(SessionEvent.SessionLost)
        self._keeper.wake()

    # ---- notifications -----------------------------------------------------------------------

    def _on_listener_added(self) -> None:
        with self._watch_lock:
            if self._watch_thread is not None or self._closed:
                return
            try:
                self._relist(notify=False)
            except StatekeepError as e:
                log.warning("k8s:// %s: notifications start once the server answers (%s)", self.server, e)
            self._watch_thread = threading.Thread(target=self._watch, name="statekeep-k8s-watch", daemon=True)
            self._watch_thread.start()

    def _selector(self) -> str:
        return f"{_STORE}={self.store_id},{_KIND}=key"

    def _relist(self, notify: bool) -> None:
        """List the store's keys; with ``notify``, report what changed since the last list or event."""
        listed = self._list_cm(self._selector())
        now: dict[str, tuple[int, int]] = {}
        for obj in listed.get("items") or []:
            record, path = self._record(obj), obj["metadata"].get("annotations", {}).get(_PATH)
            if record is not None and path:
                now[path] = (record.version, _revision(obj["metadata"]))
        if notify:
            for path in sorted(self._known.keys() - now.keys()):
                self._emit_change(NotificationType.Deleted, path)
            for path, (version, _) in sorted(now.items()):
                if path not in self._known:
                    self._emit_change(NotificationType.Created, path)
                elif self._known[path][0] != version:
                    self._emit_change(NotificationType.Modified, path)
        self._known = now
        self._watch_rv = listed["metadata"]["resourceVersion"]

    def _watch(self) -> None:
        failures = 0
        while not self._watch_stop.is_set():
            try:
                if not self._watch_rv:
                    self._relist(notify=True)
                for event in self._events():
                    failures = 0
                    self._on_event(event)
            except _Gone:
                log.info("k8s:// %s: the watch's revision is gone; listing again", self.server)
                self._watch_rv = ""
                continue
            except Exception as e:  # never let a surprise end notifications for good
                if self._watch_stop.is_set():
                    return
                log.debug("k8s:// %s: watch interrupted (%s); resuming at %s", self.server, e, self._watch_rv)
            failures += 1
            self._watch_stop.wait(RECONNECT.delay(failures))

    def _events(self) -> Iterator[dict[str, Any]]:
        """The watch's events from ``_watch_rv`` (a server-side timeout ends it; the loop starts another)."""
        try:
            response: Any = self._core.list_namespaced_config_map(
                self.namespace, label_selector=self._selector(), watch=True, resource_version=self._watch_rv,
                allow_watch_bookmarks=True, timeout_seconds=60, _request_timeout=(self.timeout, 90),
                _preload_content=False)
        except ApiException as e:
            raise self._error(e.status, e.reason or "", e.body, False) from e
        self._watch_response = response
        try:
            for line in iter_resp_lines(response):
                if self._watch_stop.is_set():
                    return
                yield json.loads(line)
        finally:
            self._watch_response = None
            response.release_conn()

    def _on_event(self, event: dict[str, Any]) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone(obj.get("message", "gone"))
            raise StoreUnavailableError(f"watch error: {obj.get('message')}")
        metadata = obj.get("metadata") or {}
        if metadata.get("resourceVersion"):
            self._watch_rv = metadata["resourceVersion"]
        if kind == "BOOKMARK":
            return
        path = (metadata.get("annotations") or {}).get(_PATH)
        if not path:
            return
        revision, known = _revision(metadata), self._known.get(path)
        if known is not None and revision <= known[1]:
            return  # older than what a list showed (a watch resumed from an older revision replays history)
        record = None if kind == "DELETED" else self._record(obj)
        if record is None:  # deleted, or a placeholder (an intent on an absent key): absent
            if known is not None:
                del self._known[path]
                self._emit_change(NotificationType.Deleted, path)
            return
        self._known[path] = (record.version, revision)
        if known is None:
            self._emit_change(NotificationType.Created, path)
        elif known[0] != record.version:
            self._emit_change(NotificationType.Modified, path)

    # ---- closing -----------------------------------------------------------------------------

    def _close(self) -> None:
        """End the session (its Lease and ephemeral keys go at once), stop the watch, close the connections."""
        self._closing = True
        try:
            self._keeper.stop(timeout=self.timeout)
            self._watch_stop.set()
            response = self._watch_response
            if response is not None:
                with _suppress(Exception):
                    response.shutdown() if hasattr(response, "shutdown") else response.close()
            with self._session_lock:
                if self._session:
                    try:
                        self._expire(self._session, None)
                    except (StatekeepError, _Conflict) as e:
                        log.info("k8s:// %s: session not ended (%s); it expires in %ss", self.server, e,
                                 self.session_timeout)
                    self._session = 0
                    self._has_session.clear()
            if self._watch_thread is not None:
                self._watch_thread.join(timeout=2)
            self._pool.shutdown(wait=True)
        finally:
            self._closing = False
            self._api.close()


class _Snapshot:
    """The TreeReader a transaction computes on: every object it reads is remembered (``seen``: name ->
    (object or None, path, kind)) so the commit marks exactly those; ``listed``: the children it listed."""

    def __init__(self, store: KubernetesStore) -> None:
        self.store = store
        self.seen: dict[str, tuple[dict[str, Any] | None, str, str]] = {}
        self.listed: dict[str, list[str]] = {}

    def _object(self, name: str, path: str, kind: str) -> dict[str, Any] | None:
        if name not in self.seen:
            obj, undecided = self.store._settle_or_none(name)
            if undecided:
                raise _Retry(f"{path}: another transaction is under way")
            self.seen[name] = (obj, path, kind)
        return self.seen[name][0]

    def read(self, path: str) -> Record | None:
        if path == "/":
            return None
        obj = self._object(self.store._key_name(path), path, "key")
        return self.store._record(obj) if obj is not None else None

    def children(self, path: str) -> list[str]:
        if path not in self.listed:
            self.listed[path] = self.store._get_children(path)
        return self.listed[path]

    def has_children(self, path: str) -> bool:
        return bool(self.children(path))

    def unchanged(self) -> bool:
        """Whether every object read and every listing is still as read: then what was read held at one moment
        (the reads are one by one, not one snapshot)."""
        for name, (obj, _, _) in self.seen.items():
            now = self.store._read_cm(name)
            if (now or {}).get("metadata", {}).get("resourceVersion") != (obj or {}).get("metadata", {}).get(
                    "resourceVersion"):
                return False
        return all(self.store._get_children(path) == names for path, names in self.listed.items())

    def last_sequence(self, parent: str) -> int:
        obj = self._object(self.store._seq_name(parent), parent, "sequence")
        return int(obj["metadata"]["annotations"].get(_SEQUENCE, 0)) if obj is not None else 0


class _suppress:
    """``contextlib.suppress`` (kept local so the module reads as one unit)."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> bool:
        return kind is not None and issubclass(kind, self.kinds)


def _suppress_conflict() -> _suppress:
    return _suppress(_Conflict)


__all__ = ["CONFIGMAP_MAX_BYTES", "KubernetesStore", "join"]
