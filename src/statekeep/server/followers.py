"""Read-only followers over REST (KIP-813), and their lag in ``/metrics``.

Followers are configured with the server (``ServerConfig.followers``: a list of
``{"tenant", "namespace", "name", "leader": URL}``, optionally ``"local_dir"`` (else a temporary copy,
removed at stop), ``"provider"``, ``"blobs"``, ``"functions_root"`` (where the leader's registry keeps
functions; default: the server's own ``functions_root``) and ``"key_prefix"`` (follow only the keys
starting with it: reads of other keys find nothing)); each tails its leader from the server's start
to its stop. Their routes are in :mod:`statekeep.server.routes.followers`.

``/metrics`` gains ``statekeep_follower_lag_records{function="T/N/F"}`` (from :meth:`Followers.lags`): changelog
records not yet applied (-1 when unknown, e.g. the leader is unreachable or the function was deleted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, NotFoundError, StatekeepError
from statekeep.state.catalog import DEFAULT_ROOT

if TYPE_CHECKING:
    from statekeep.changelog import FollowerStore

_SPEC_KEYS = {"tenant", "namespace", "name", "leader", "local_dir", "provider", "blobs", "functions_root",
              "key_prefix"}


class Followers:
    """The followers a server serves, by ``T/N/F``."""

    def __init__(self, specs: Sequence[Mapping[str, Any]] | None, *, functions_root: str = DEFAULT_ROOT) -> None:
        from statekeep.changelog import FollowerStore

        self.by_name: dict[str, FollowerStore] = {}
        try:
            for spec in specs or []:
                if not isinstance(spec, Mapping) or set(spec) - _SPEC_KEYS or \
                        not {"tenant", "namespace", "name", "leader"} <= set(spec):
                    raise InvalidArgumentError(f"a follower is {{tenant, namespace, name, leader [, local_dir, "
                                               f"provider, blobs, functions_root, key_prefix]}}, not {spec!r}")
                fqfn = f"{spec['tenant']}/{spec['namespace']}/{spec['name']}"
                self.by_name[fqfn] = FollowerStore.open(
                    spec["leader"], spec["tenant"], spec["namespace"], spec["name"], local_dir=spec.get("local_dir"),
                    provider=spec.get("provider"), blobs=spec.get("blobs"),
                    functions_root=spec.get("functions_root") or functions_root,
                    key_prefix="" if spec.get("key_prefix") is None else spec["key_prefix"])
        except BaseException:
            self.close()
            raise

    def get(self, tenant: str, namespace: str, name: str) -> FollowerStore:
        follower = self.by_name.get(f"{tenant}/{namespace}/{name}")
        if follower is None:
            raise NotFoundError(f"this server follows no function {tenant}/{namespace}/{name}")
        return follower

    def lags(self) -> dict[str, int]:
        out = {}
        for fqfn, follower in self.by_name.items():
            try:
                out[fqfn] = follower.lag
            except StatekeepError:
                out[fqfn] = -1
        return out

    def close(self) -> None:
        followers, self.by_name = list(self.by_name.values()), {}
        for follower in followers:
            follower.close()

