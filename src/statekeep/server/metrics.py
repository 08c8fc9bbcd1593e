"""Prometheus metrics through ``prometheus_client``, one :class:`CollectorRegistry` per app.

- ``statekeep_http_requests_total{method,route,status}``: requests by route template (not raw path,
  so keys in URLs do not multiply series); unmatched paths count under route ``"unmatched"``.
- ``statekeep_http_request_duration_seconds{route}``: a latency histogram.
- ``statekeep_state_operations_total{op}``: state operations (get, put, delete, list) served.
- ``statekeep_follower_lag_records{function}`` (:class:`FollowerLagCollector`, when followers are
  configured): changelog records a follower has not applied yet (-1: unknown).

Add a metric with ``metrics.registry.register(collector)`` (a ``prometheus_client`` collector, read at
each scrape) or a metric object created with ``registry=metrics.registry``. :meth:`Metrics.add_collector`
still takes a callable returning exposition lines, appended as they are (kept for callers that
render their own text).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """The metrics of one app (thread-safe: prometheus_client's metrics are)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("statekeep_http_requests", "HTTP requests by method, route and status.",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("statekeep_http_request_duration_seconds", "HTTP request latency by route.",
                                 ["route"], buckets=BUCKETS, registry=self.registry)
        self.state_ops = Counter("statekeep_state_operations", "Function state operations served.", ["op"],
                                 registry=self.registry)
        self._lock = threading.Lock()
        self._text_collectors: list[Callable[[], list[str]]] = []
        # children by label values: labels() costs a lock and a dict lookup per call
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self._op_children: dict[str, Any] = {}

    def add_collector(self, collect: Callable[[], list[str]]) -> None:
        """``collect()`` returns exposition lines (HELP, TYPE, samples) to append at each scrape."""
        with self._lock:
            self._text_collectors.append(collect)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = self._children[key] = (self.requests.labels(method, route, str(status)),
                                              self.latency.labels(route))
        children[0].inc()
        children[1].observe(seconds)

    def state_op(self, op: str) -> None:
        child = self._op_children.get(op)
        if child is None:
            child = self._op_children[op] = self.state_ops.labels(op)
        child.inc()

    def render(self) -> str:
        text = generate_latest(self.registry).decode("utf-8")
        with self._lock:
            collectors = list(self._text_collectors)
        extra = [line for collect in collectors for line in collect()]
        return text + ("\n".join(extra) + "\n" if extra else "")


class FollowerLagCollector(Collector):
    """``statekeep_follower_lag_records{function}`` from ``lags()`` (fqfn -> records, -1 when
    unknown), read at each scrape; nothing when there are no followers."""

    def __init__(self, lags: Callable[[], dict[str, int]]) -> None:
        self._lags = lags

    def collect(self) -> Iterator[GaugeMetricFamily]:
        lags = self._lags()
        if not lags:
            return
        family = GaugeMetricFamily("statekeep_follower_lag_records",
                                   "Changelog records a follower has not applied yet (-1: unknown).",
                                   labels=["function"])
        for fqfn, lag in sorted(lags.items()):
            family.add_metric([fqfn], lag)
        yield family

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # the families depend on the followers configured


class MetricsMiddleware:
    """Pure ASGI middleware (no per-request task or body copy) that records every HTTP request."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.observe(scope["method"], route, status, time.perf_counter() - start)
