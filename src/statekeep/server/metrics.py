"""Prometheus metrics in the text exposition format (version 0.0.4), without a client library.

- ``statekeep_http_requests_total{method,route,status}``: requests by route template (not raw path,
  so keys in URLs do not multiply series); unmatched paths count under route ``"unmatched"``.
- ``statekeep_http_request_duration_seconds{route}``: a latency histogram.
- ``statekeep_state_operations_total{op}``: state operations (get, put, delete, list) served.
- whatever collectors added with :meth:`Metrics.add_collector` render (e.g. follower lag gauges).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import defaultdict
from collections.abc import Callable

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = defaultdict(int)
        self.latency: dict[str, list[float]] = {}  # route -> per-bucket counts, then +Inf count, then sum
        self.state_ops: dict[str, int] = defaultdict(int)
        self.collectors: list[Callable[[], list[str]]] = []

    def add_collector(self, collect: Callable[[], list[str]]) -> None:
        """``collect()`` returns exposition lines (HELP, TYPE, samples) to append at each scrape."""
        self.collectors.append(collect)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(method, route, status)] += 1
            row = self.latency.get(route)
            if row is None:
                row = self.latency[route] = [0.0] * (len(BUCKETS) + 2)
            row[bisect.bisect_left(BUCKETS, seconds)] += 1
            row[-1] += seconds

    def state_op(self, op: str) -> None:
        with self._lock:
            self.state_ops[op] += 1

    def render(self) -> str:
        with self._lock:
            requests = dict(self.requests)
            latency = {k: list(v) for k, v in self.latency.items()}
            ops = dict(self.state_ops)
        out = ["# HELP statekeep_http_requests_total HTTP requests by method, route and status.",
               "# TYPE statekeep_http_requests_total counter"]
        for (method, route, status), n in sorted(requests.items()):
            out.append(f'statekeep_http_requests_total{{method="{method}",route="{_label(route)}",'
                       f'status="{status}"}} {n}')
        out += ["# HELP statekeep_http_request_duration_seconds HTTP request latency by route.",
                "# TYPE statekeep_http_request_duration_seconds histogram"]
        for route, row in sorted(latency.items()):
            name, cumulative = _label(route), 0.0
            for bound, count in zip([*map(str, BUCKETS), "+Inf"], row[:-1]):
                cumulative += count
                out.append(f'statekeep_http_request_duration_seconds_bucket{{route="{name}",le="{bound}"}} '
                           f"{int(cumulative)}")
            out.append(f'statekeep_http_request_duration_seconds_sum{{route="{name}"}} {row[-1]:.6f}')
            out.append(f'statekeep_http_request_duration_seconds_count{{route="{name}"}} {int(cumulative)}')
        out += ["# HELP statekeep_state_operations_total Function state operations served.",
                "# TYPE statekeep_state_operations_total counter"]
        for op, n in sorted(ops.items()):
            out.append(f'statekeep_state_operations_total{{op="{op}"}} {n}')
        for collect in self.collectors:
            out += collect()
        return "\n".join(out) + "\n"


class MetricsMiddleware:
    """Pure ASGI middleware (no per-request task or body copy) that records every HTTP request."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe(scope["method"], route, status, time.perf_counter() - start)
