"""Where a ``statekeep functions`` command goes, and the HTTP client that takes it to a server.

Like pulsar-admin, the commands talk to a server by default. The first of these that is set decides:

1. ``--url URL`` (a server), ``--data-dir DIR`` (the store ``local://DIR``, directly) or ``--store URL``
   (that store, directly);
2. ``$STATEKEEP_URL``: a server;
3. ``$STATEKEEP_STORE``: that store, directly (as the other statekeep commands use it);
4. ``webServiceUrl`` in the client config file;
5. ``http://localhost:8080``.

The client config file is ``$STATEKEEP_CLIENT_CONF`` if set (it must then exist), else
``$XDG_CONFIG_HOME/statekeep/client.conf`` (``~/.config/statekeep/client.conf``) if it exists. It is
written like Pulsar's ``client.conf`` (``key=value`` lines, ``#`` comments), and statekeep reads two
of its keys: ``webServiceUrl`` and ``authParams`` (``token:TOKEN`` or ``file:///path/to/token``, as
Pulsar's token authentication takes them); other keys of a Pulsar ``client.conf`` are ignored. The
bearer token, for whichever server, is ``--token``, else ``$STATEKEEP_TOKEN``, else ``authParams``.

The HTTP client is httpx (the ``client`` extra), imported only when a server is used, so direct
access (``--data-dir``/``--store``) works on the core install.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from statekeep import errors
from statekeep.errors import InvalidArgumentError, MissingDependencyError
from statekeep.metadata.base import Closing

DEFAULT_URL = "http://localhost:8080"

class ServerUnreachableError(errors.StoreUnavailableError):
    """No server answered at the URL a command was sent to. Its message is the whole one-line advice."""


class ServerError(errors.StatekeepError):
    """The server answered with an error of its own (HTTP 500, or another 5xx but 503): its status and
    reason, as it said them; never taken for an unavailable store."""


@dataclass(frozen=True)
class Target:
    """Where a command goes: ``url`` (a server, with ``token``) or ``store`` (a store URL, directly).
    ``source`` says where that choice came from, for messages."""

    url: str | None
    store: str | None
    token: str | None
    source: str


def client_conf_path() -> tuple[Path, bool]:
    """The client config file and whether it was named explicitly (``$STATEKEEP_CLIENT_CONF``)."""
    explicit = os.environ.get("STATEKEEP_CLIENT_CONF")
    if explicit:
        return Path(explicit), True
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "statekeep" / "client.conf", False


def read_client_conf() -> tuple[dict[str, str], Path]:
    """The client config file's ``key=value`` pairs (empty if there is none) and its path.

    Raises :class:`InvalidArgumentError` if ``$STATEKEEP_CLIENT_CONF`` names a file that cannot be read."""
    path, explicit = client_conf_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        if explicit:
            raise InvalidArgumentError(f"$STATEKEEP_CLIENT_CONF names {path}, which does not exist") from None
        return {}, path
    except OSError as e:
        raise InvalidArgumentError(f"cannot read the client config {path}: {e.strerror}") from None
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        # Java properties: key=value, key: value or key value
        for i, ch in enumerate(line):
            if ch in "=: \t":
                key, value = line[:i], line[i + 1:].strip().lstrip("=:").strip()
                break
        else:
            key, value = line, ""
        values[key] = value
    return values, path


def _token_from_auth_params(params: str, path: Path) -> str:
    """Pulsar's token ``authParams``: ``token:TOKEN`` or ``file:///path`` (the token is the file's content)."""
    if params.startswith("token:"):
        return params[len("token:"):].strip()
    if params.startswith("file:"):
        token_path = urllib.parse.unquote(urllib.parse.urlparse(params).path)
        try:
            return Path(token_path).read_text().strip()
        except OSError as e:
            raise InvalidArgumentError(f"authParams in {path}: cannot read the token file {token_path}: "
                                       f"{e.strerror}") from None
    raise InvalidArgumentError(f"authParams in {path} must be token:TOKEN or file:///path/to/token, not {params!r}")


def resolve_target(args: argparse.Namespace) -> Target:
    """Where the command in ``args`` goes (``url``, ``data_dir``, ``store``, ``token`` attributes), by the
    precedence in this module's docstring. Raises :class:`InvalidArgumentError` for a bad client config."""
    if getattr(args, "data_dir", None):
        return Target(None, f"local://{os.path.abspath(args.data_dir)}", None, "--data-dir")
    if getattr(args, "store", None):
        return Target(None, args.store, None, "--store")
    if not getattr(args, "url", None) and not os.environ.get("STATEKEEP_URL") and os.environ.get("STATEKEEP_STORE"):
        return Target(None, os.environ["STATEKEEP_STORE"], None, "$STATEKEEP_STORE")
    conf, path = read_client_conf()
    token = getattr(args, "token", None) or os.environ.get("STATEKEEP_TOKEN") or None
    if token is None and conf.get("authParams"):
        token = _token_from_auth_params(conf["authParams"], path)
    if getattr(args, "url", None):
        return Target(args.url, None, token, "--url")
    if os.environ.get("STATEKEEP_URL"):
        return Target(os.environ["STATEKEEP_URL"], None, token, "$STATEKEEP_URL")
    if conf.get("webServiceUrl"):
        return Target(conf["webServiceUrl"], None, token, f"webServiceUrl in {path}")
    return Target(DEFAULT_URL, None, token, "the default")


def quote(segment: str) -> str:
    """One URL path segment. '.' is escaped too, so keys like "." or ".." are never taken for dot segments."""
    return urllib.parse.quote(segment, safe="").replace(".", "%2E")


def _httpx() -> ModuleType:
    try:
        import httpx
    except ImportError as e:
        raise MissingDependencyError(
            "talking to a statekeep server needs the client extra: pip install 'statekeep[client]' "
            "(or work on a store directly with --data-dir DIR or --store URL)") from e
    return httpx


class Http(Closing):
    """Pulsar's ``/admin/v3/functions`` REST API of the server at ``url``, through httpx.

    Every method raises, for an HTTP error, the statekeep error of that status (404 ->
    :class:`NotFoundError`, 503 -> :class:`StoreUnavailableError`, another 5xx -> :class:`ServerError`,
    ...) with the server's JSON ``reason``; :class:`ServerUnreachableError` when
    nothing answers at ``url``."""

    def __init__(self, url: str, token: str | None, source: str = "--url", timeout: float = 60.0) -> None:
        httpx = _httpx()
        self.url = url.rstrip("/")
        self.source = source
        self.base = self.url + "/admin/v3/functions"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._httpx = httpx
        self._client = httpx.Client(headers=headers, timeout=timeout)

    def close(self) -> None:
        self._client.close()

    def request(self, method: str, path: list[str], *, files: dict[str, tuple[Any, ...]] | None = None,
                data: dict[str, str] | None = None, query: dict[str, Any] | None = None) -> Any:
        """Send one request to ``base/quoted/path``; the decoded JSON answer (a text answer as a str, None if empty)."""
        url = self.base + "".join("/" + quote(str(p)) for p in path)
        httpx = self._httpx
        try:
            response = self._client.request(method, url, files=files, data=data, params=query)
        except httpx.TimeoutException:
            raise errors.StoreUnavailableError(f"the server at {self.url} did not answer in time") from None
        except httpx.TransportError as e:  # refused, reset, no route, ...
            raise ServerUnreachableError(self._advice(e)) from None
        if response.status_code >= 400:
            try:
                reason = response.json()["reason"]
            except (ValueError, KeyError, TypeError):
                reason = response.text or response.reason_phrase
            code = response.status_code
            # 503 is the server saying its store is unavailable; any other 5xx is the server's own error
            cls = ServerError if code >= 500 and code != 503 else errors.error_for_status(code)
            raise cls(f"HTTP {code}: {reason}")
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            return response.text

    def upload(self, method: str, path: list[str], config: dict[str, Any], code: bytes | None, filename: str) -> Any:
        """Create or update a function as pulsar-admin does: multipart ``functionConfig`` (JSON) and ``data``."""
        files: dict[str, tuple[Any, ...]] = {"functionConfig": (None, json.dumps(config).encode(), "application/json")}
        if code is not None:
            files["data"] = (filename, code, "application/octet-stream")
        return self.request(method, path, files=files)

    def _advice(self, error: Exception) -> str:
        reason = str(error) or type(error).__name__
        reason = "connection refused" if "refused" in reason.lower() else reason
        where = "" if self.source == "--url" else f" ({self.source})"
        return (f"cannot reach a statekeep server at {self.url}{where}: {reason}. Start one with "
                "'statekeep standalone --data-dir DIR', name another with --url or $STATEKEEP_URL, or work on "
                "a store directly with --data-dir DIR or --store URL")


def open_remote(args: argparse.Namespace) -> Http | None:
    """The server the command in ``args`` goes to, or None if it works on a store directly."""
    target = resolve_target(args)
    return Http(target.url, target.token, target.source) if target.url else None


def direct_store_url(args: argparse.Namespace) -> str:
    """The store a direct-only command (localrun, snapshot, ...) works on: ``--data-dir``, ``--store``,
    else ``$STATEKEEP_STORE``, else ``local://./.statekeep-data``."""
    from statekeep.metadata.registry import default_store_url

    if getattr(args, "data_dir", None):
        return f"local://{os.path.abspath(args.data_dir)}"
    return getattr(args, "store", None) or default_store_url()
