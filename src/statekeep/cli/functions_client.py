"""One interface for what the ``statekeep functions`` commands do to functions, and its two implementations.

:class:`FunctionsClient` names the operations (create, update, get, list, delete, querystate, putstate,
timers, status, stats, start/stop/restart, trigger); a command calls them without knowing where they go.
:class:`RemoteFunctions` sends them to a server, in Pulsar's ``/admin/v3/functions`` REST paths, and returns
the server's JSON as received; :class:`DirectFunctions` runs them on a store through
:class:`statekeep.functions.config.service.FunctionService`, the code the server's routes run, and returns the same
JSON. :func:`statekeep.cli.common.functions_client` picks one (see :mod:`statekeep.cli.client` for the order).

Both raise statekeep's errors: :class:`NotFoundError` for an unknown function or key, and so on (the remote
one through the HTTP status). start, stop, restart and trigger act on the workers that run functions, so
:class:`DirectFunctions` refuses them (:class:`InvalidArgumentError`), as does ``status``/``stats`` for one
instance directly where the server would be needed. A :class:`DirectFunctions` opens its store on first use,
so a refused command never touches the store. Commands that only work on a store (localrun, snapshot,
restore, compact) do not use this interface.
"""

from __future__ import annotations

import builtins
import json
from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from statekeep.cli.client import Http
from statekeep.errors import InvalidArgumentError
from statekeep.metadata.base import Closing

if TYPE_CHECKING:
    from statekeep.functions.config.service import FunctionService

#: the file name a function's code is uploaded under when it has none
DEFAULT_CODE_NAME = "function.py"


class FunctionsClient(Closing):
    """The functions of a server or of a store, as the ``statekeep functions`` commands use them.

    A context manager: leaving it (or :meth:`close`) releases the connection or the store. Every method takes
    the function's ``tenant``, ``namespace`` and ``name`` and returns JSON-ready data, the same for both
    implementations."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection or the store; idempotent."""

    @abstractmethod
    def create(self, tenant: str, namespace: str, name: str, config: dict[str, Any], code: bytes | None,
               code_name: str = DEFAULT_CODE_NAME) -> None:
        """Register a function: ``config`` is its FunctionConfig JSON (naming it ``tenant/namespace/name``),
        ``code`` its Python file, uploaded as ``code_name``. :class:`AlreadyExistsError` if it exists."""

    @abstractmethod
    def update(self, tenant: str, namespace: str, name: str, config: dict[str, Any], code: bytes | None,
               code_name: str = DEFAULT_CODE_NAME) -> None:
        """Change a function's config and, unless ``code`` is None, its code."""

    @abstractmethod
    def get(self, tenant: str, namespace: str, name: str) -> Any:
        """The function's FunctionConfig JSON."""

    @abstractmethod
    def delete(self, tenant: str, namespace: str, name: str) -> None:
        """Delete the function and all its state."""

    @abstractmethod
    def timers(self, tenant: str, namespace: str, name: str) -> Any:
        """The function's timers and watermark (JSON)."""

    @abstractmethod
    def query_state(self, tenant: str, namespace: str, name: str, key: str) -> Any:
        """State ``key`` as FunctionState JSON; :class:`NotFoundError` if there is none."""

    @abstractmethod
    def key_variables(self, tenant: str, namespace: str, name: str, key: str) -> Any:
        """Record key ``key``'s typed state variables decoded to JSON, ``{"key", "variables"}``;
        :class:`NotFoundError` if it has none."""

    @abstractmethod
    def put_state(self, tenant: str, namespace: str, name: str, key: str, state: Any) -> Any:
        """Write state ``key`` from FunctionState JSON ``state``; the answer (JSON)."""

    @abstractmethod
    def status(self, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> Any:
        """The function's status (a server's FunctionStatus; directly, statekeep's own status record)."""

    @abstractmethod
    def stats(self, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> Any:
        """The function's FunctionStats, or one instance's metrics."""

    @abstractmethod
    def act(self, action: str, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> None:
        """``action`` (start, stop or restart) the function (or one instance); a stopped function stays
        stopped until started."""

    @abstractmethod
    def trigger(self, tenant: str, namespace: str, name: str, value: bytes, *, file_name: str | None = None,
                topic: str | None = None) -> Any:
        """Run the function on ``value`` through its real state; its output (a str as it is, else JSON).
        ``file_name``: the value is that file's content; ``topic``: the input it is taken to come from."""

    @abstractmethod
    def list(self, tenant: str, namespace: str) -> builtins.list[str]:
        """The names of the namespace's functions."""


def _path(tenant: str, namespace: str, name: str, instance_id: int | None, action: str) -> list[str]:
    """``tenant/namespace/name[/instance_id]/action``, as Pulsar's REST paths have it."""
    path = [tenant, namespace, name]
    if instance_id is not None:
        path.append(str(instance_id))
    return path + [action]


class RemoteFunctions(FunctionsClient):
    """The functions of the server behind ``http``; answers are the server's JSON as received."""

    def __init__(self, http: Http) -> None:
        self.http = http

    def close(self) -> None:
        self.http.close()

    def create(self, tenant: str, namespace: str, name: str, config: dict[str, Any], code: bytes | None,
               code_name: str = DEFAULT_CODE_NAME) -> None:
        self.http.upload("POST", [tenant, namespace, name], config, code, code_name)

    def update(self, tenant: str, namespace: str, name: str, config: dict[str, Any], code: bytes | None,
               code_name: str = DEFAULT_CODE_NAME) -> None:
        self.http.upload("PUT", [tenant, namespace, name], config, code, code_name)

    def get(self, tenant: str, namespace: str, name: str) -> Any:
        return self.http.request("GET", [tenant, namespace, name])

    def list(self, tenant: str, namespace: str) -> builtins.list[str]:
        names: builtins.list[str] = self.http.request("GET", [tenant, namespace])
        return names

    def delete(self, tenant: str, namespace: str, name: str) -> None:
        self.http.request("DELETE", [tenant, namespace, name])

    def timers(self, tenant: str, namespace: str, name: str) -> Any:
        return self.http.request("GET", [tenant, namespace, name, "timers"])

    def query_state(self, tenant: str, namespace: str, name: str, key: str) -> Any:
        return self.http.request("GET", [tenant, namespace, name, "state", key])

    def key_variables(self, tenant: str, namespace: str, name: str, key: str) -> Any:
        return self.http.request("GET", [tenant, namespace, name, "variables", key])

    def put_state(self, tenant: str, namespace: str, name: str, key: str, state: Any) -> Any:
        return self.http.request("POST", [tenant, namespace, name, "state", key],
                                 files={"state": (None, json.dumps(state).encode(), "application/json")})

    def status(self, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> Any:
        return self.http.request("GET", _path(tenant, namespace, name, instance_id, "status"))

    def stats(self, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> Any:
        return self.http.request("GET", _path(tenant, namespace, name, instance_id, "stats"))

    def act(self, action: str, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> None:
        self.http.request("POST", _path(tenant, namespace, name, instance_id, action))

    def trigger(self, tenant: str, namespace: str, name: str, value: bytes, *, file_name: str | None = None,
                topic: str | None = None) -> Any:
        files: dict[str, tuple[Any, ...]] = {}
        if file_name is not None:  # pulsar-admin's --trigger-file: the dataStream part
            files["dataStream"] = (file_name, value, "application/octet-stream")
        else:
            files["data"] = (None, value, "text/plain")
        if topic is not None:
            files["topic"] = (None, topic.encode(), "text/plain")
        return self.http.request("POST", _path(tenant, namespace, name, None, "trigger"), files=files)


class DirectFunctions(FunctionsClient):
    """The functions of the store at ``store_url``, through :class:`FunctionService` (opened on first use)."""

    def __init__(self, store_url: str) -> None:
        self.store_url = store_url
        self._service: FunctionService | None = None

    @property
    def service(self) -> FunctionService:
        """The store's :class:`FunctionService`, opened now if it is not yet."""
        if self._service is None:
            from statekeep.functions.config.service import FunctionService

            self._service = FunctionService.open(self.store_url)
        return self._service

    def close(self) -> None:
        service, self._service = self._service, None
        if service is not None:
            service.close()

    def create(self, tenant: str, namespace: str, name: str, config: dict[str, Any], code: bytes | None,
               code_name: str = DEFAULT_CODE_NAME) -> None:
        self.service.registry.create(config, code)  # the config names the function

    def update(self, tenant: str, namespace: str, name: str, config: dict[str, Any], code: bytes | None,
               code_name: str = DEFAULT_CODE_NAME) -> None:
        self.service.registry.update(tenant, namespace, name, config, code)

    def get(self, tenant: str, namespace: str, name: str) -> Any:
        return self.service.registry.get(tenant, namespace, name).to_json()

    def list(self, tenant: str, namespace: str) -> builtins.list[str]:
        return self.service.registry.list(tenant, namespace)

    def delete(self, tenant: str, namespace: str, name: str) -> None:
        self.service.registry.delete(tenant, namespace, name)

    def timers(self, tenant: str, namespace: str, name: str) -> Any:
        return self.service.list_timers(tenant, namespace, name)

    def query_state(self, tenant: str, namespace: str, name: str, key: str) -> Any:
        return self.service.query_state(tenant, namespace, name, key)

    def key_variables(self, tenant: str, namespace: str, name: str, key: str) -> Any:
        return self.service.key_variables(tenant, namespace, name, key)

    def put_state(self, tenant: str, namespace: str, name: str, key: str, state: Any) -> Any:
        return self.service.put_state(tenant, namespace, name, key, state)

    def status(self, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> Any:
        """statekeep's own status record (``processed``, ``batches``, ``last_batch``, ``workerId``)."""
        if instance_id is not None:
            raise InvalidArgumentError("--instance-id needs a server; directly on a store, status is the function's")
        from statekeep.functions.admin.worker import function_status

        service = self.service
        service.registry.get(tenant, namespace, name)  # NotFoundError for an unknown function
        return function_status(service.registry.store, tenant, namespace, name)

    def stats(self, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> Any:
        """The same Pulsar FunctionStats the server composes, from the store."""
        from statekeep.functions.admin import lifecycle
        from statekeep.functions.driver import stats
        from statekeep.functions.admin.worker import function_status

        registry = self.service.registry
        cfg = registry.get(tenant, namespace, name)  # NotFoundError if unknown
        raw = function_status(registry.store, tenant, namespace, name)
        if lifecycle.is_stopped(registry, tenant, namespace, name):
            raw["running"] = False
        if instance_id is None:
            return stats.function_stats(raw, cfg.parallelism)
        if instance_id >= cfg.parallelism:
            raise InvalidArgumentError(f"{tenant}/{namespace}/{name} has {cfg.parallelism} instance(s); "
                                       f"there is no instance {instance_id}")
        return stats.instance_stats(raw, instance_id)

    def act(self, action: str, tenant: str, namespace: str, name: str, instance_id: int | None = None) -> None:
        raise _needs_server(action)

    def trigger(self, tenant: str, namespace: str, name: str, value: bytes, *, file_name: str | None = None,
                topic: str | None = None) -> Any:
        raise _needs_server("trigger")


def _needs_server(command: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{command} acts through a server (--url, $STATEKEEP_URL or client.conf), "
                                "not directly on a store (--data-dir, --store, $STATEKEEP_STORE)")
