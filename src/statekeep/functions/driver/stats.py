"""A function's statistics: collected per micro-batch on the driver, kept with its status in the
metadata store (so any server of a cluster can answer for any function), and shaped as Pulsar's
``FunctionStatus`` and ``FunctionStats`` JSON.

An instance is one Spark partition of the function's query (``instanceId`` = ``context.get_instance_id()``,
``numInstances`` = the config's ``parallelism``). Counts are per record: ``received`` (records given
to the function), ``processed`` (successfully), ``userExceptions`` (failed attempts: a record retried
twice counts up to 3), ``deadLetters``, ``latency`` (seconds spent in the function; the average
latency is per received record, in ms, as Pulsar's). System exceptions are failures of the query
itself (its ``error``). The ``1min`` figures cover the micro-batches that ended within the last
60 s before the status was saved. As Pulsar's instance counters, the totals count from the query's
start: a restart (or a move to another worker) starts them again. A trigger (``POST .../trigger``)
runs outside the query and is not counted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

WINDOW_MS = 60_000
MAX_EXCEPTIONS = 10
COUNTS = ("received", "processed", "userExceptions", "deadLetters", "latency")


def _empty_instance() -> dict[str, Any]:
    return {"received": 0, "processed": 0, "userExceptions": 0, "deadLetters": 0, "latency": 0.0,
            "lastInvocation": None, "userMetrics": {}, "latestUserExceptions": [], "recent": []}


def add_batch(instances: dict[str, dict[str, Any]], rows: Iterable[Mapping[str, Any]],
              now_ms: int | None = None) -> None:
    """Add one micro-batch's stats rows (``executor.task.STATS_SCHEMA``) to ``instances`` (partition as
    str -> totals, JSON-ready, changed in place). A row of a replayed, already applied partition
    (``applied`` false and nothing received) changes nothing."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    for row in rows:
        received = int(row.get("received") or 0)
        if not received and not row.get("user_exceptions"):
            continue
        item = instances.setdefault(str(int(row["partition"])), _empty_instance())
        delta = {"received": received, "processed": int(row.get("processed") or 0),
                 "userExceptions": int(row.get("user_exceptions") or 0),
                 "deadLetters": int(row.get("dead_letters") or 0), "latency": float(row.get("latency") or 0.0)}
        for name, value in delta.items():
            item[name] += value
        item["lastInvocation"] = now
        item["recent"] = [r for r in item["recent"] if r[0] > now - WINDOW_MS] + [[now, *delta.values()]]
        for name, (total, count, last) in json.loads(row.get("metrics") or "{}").items():
            metric = item["userMetrics"].setdefault(name, [0.0, 0.0, 0.0])
            metric[0] += total
            metric[1] += count
            metric[2] = last
        exceptions = json.loads(row.get("exceptions") or "[]")
        item["latestUserExceptions"] = (item["latestUserExceptions"] + exceptions)[-MAX_EXCEPTIONS:]


def _avg_ms(latency_s: float, received: int) -> float | None:
    return latency_s * 1000.0 / received if received else None


def _instance(status: Mapping[str, Any], instance_id: int) -> dict[str, Any]:
    return dict(status.get("instances", {}).get(str(instance_id)) or _empty_instance())


def _window(item: Mapping[str, Any], now_ms: int) -> dict[str, float]:
    sums = dict.fromkeys(COUNTS, 0.0)
    for entry in item.get("recent", []):
        if entry[0] > now_ms - WINDOW_MS:
            for name, value in zip(COUNTS, entry[1:]):
                sums[name] += value
    return sums


def _exceptions(items: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    return [{"exceptionString": message, "timestampMs": int(ms)} for message, ms in items]


def instance_status(status: Mapping[str, Any], instance_id: int, *, num_restarts: int = 0) -> dict[str, Any]:
    """Pulsar's ``FunctionInstanceStatusData`` of one instance (a Spark partition)."""
    item = _instance(status, instance_id)
    error = status.get("error") or ""
    return {"running": bool(status.get("running")), "error": error, "numRestarts": num_restarts,
            "numReceived": item["received"], "numSuccessfullyProcessed": item["processed"],
            "numUserExceptions": item["userExceptions"],
            "latestUserExceptions": _exceptions(item["latestUserExceptions"]),
            "numSystemExceptions": 1 if error else 0,
            "latestSystemExceptions": _exceptions([[error, status.get("updated_ms") or 0]]) if error else [],
            "averageLatency": _avg_ms(item["latency"], item["received"]) or 0.0,
            "lastInvocationTime": int(item["lastInvocation"] or 0), "workerId": status.get("workerId") or ""}


def function_status(status: Mapping[str, Any], num_instances: int, *, num_restarts: int = 0) -> dict[str, Any]:
    """Pulsar's ``FunctionStatus``: one entry per instance, ``numRunning`` those running."""
    statuses = [instance_status(status, i, num_restarts=num_restarts) for i in range(num_instances)]
    instances = [{"instanceId": i, "status": s} for i, s in enumerate(statuses)]
    return {"numInstances": num_instances, "numRunning": sum(s["running"] for s in statuses),
            "instances": instances}


def instance_stats(status: Mapping[str, Any], instance_id: int, now_ms: int | None = None) -> dict[str, Any]:
    """Pulsar's ``FunctionInstanceStatsData`` (an instance's ``metrics``), with ``userMetrics``
    (name -> the mean of the values recorded; ``userMetricsDetail`` gives sum, count and last)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    item = _instance(status, instance_id)
    window = _window(item, now)
    system = 1 if status.get("error") else 0
    return {"receivedTotal": item["received"], "processedSuccessfullyTotal": item["processed"],
            "systemExceptionsTotal": system, "userExceptionsTotal": item["userExceptions"],
            "avgProcessLatency": _avg_ms(item["latency"], item["received"]),
            "1min": {"receivedTotal": int(window["received"]),
                     "processedSuccessfullyTotal": int(window["processed"]), "systemExceptionsTotal": 0,
                     "userExceptionsTotal": int(window["userExceptions"]),
                     "avgProcessLatency": _avg_ms(window["latency"], int(window["received"]))},
            "lastInvocation": item["lastInvocation"],
            "userMetrics": {name: total / count if count else 0.0
                            for name, (total, count, _) in item["userMetrics"].items()},
            "userMetricsDetail": {name: {"sum": total, "count": int(count), "last": last}
                                  for name, (total, count, last) in item["userMetrics"].items()}}


def function_stats(status: Mapping[str, Any], num_instances: int, now_ms: int | None = None) -> dict[str, Any]:
    """Pulsar's ``FunctionStats``: totals over the instances, and each instance's ``metrics``."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    per = [instance_stats(status, i, now) for i in range(num_instances)]
    raw = [_instance(status, i) for i in range(num_instances)]
    windows = [_window(item, now) for item in raw]
    received = sum(item["received"] for item in raw)
    received_1 = int(sum(w["received"] for w in windows))
    last = [m["lastInvocation"] for m in per if m["lastInvocation"]]
    return {"receivedTotal": received, "processedSuccessfullyTotal": sum(item["processed"] for item in raw),
            "systemExceptionsTotal": 1 if status.get("error") else 0,
            "userExceptionsTotal": sum(item["userExceptions"] for item in raw),
            "avgProcessLatency": _avg_ms(sum(item["latency"] for item in raw), received),
            "1min": {"receivedTotal": received_1,
                     "processedSuccessfullyTotal": int(sum(w["processed"] for w in windows)),
                     "systemExceptionsTotal": 0,
                     "userExceptionsTotal": int(sum(w["userExceptions"] for w in windows)),
                     "avgProcessLatency": _avg_ms(sum(w["latency"] for w in windows), received_1)},
            "lastInvocation": max(last) if last else None,
            "instances": [{"instanceId": i, "metrics": m} for i, m in enumerate(per)]}


def metrics_lines(statuses: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Prometheus lines for ``/metrics``: per function (``T/N/F``) totals and user metrics."""
    out = ["# HELP statekeep_function_received_total Records given to a function.",
           "# TYPE statekeep_function_received_total counter"]
    user = ["# HELP statekeep_function_user_metric_sum Sum of a function's record_metric values.",
            "# TYPE statekeep_function_user_metric_sum counter",
            "# HELP statekeep_function_user_metric_count Number of a function's record_metric values.",
            "# TYPE statekeep_function_user_metric_count counter"]
    exceptions = ["# HELP statekeep_function_user_exceptions_total Failed record attempts of a function.",
                  "# TYPE statekeep_function_user_exceptions_total counter"]
    for fqfn, status in statuses:
        label = fqfn.replace("\\", "\\\\").replace('"', '\\"')
        items = list(status.get("instances", {}).values())
        out.append(f'statekeep_function_received_total{{function="{label}"}} '
                   f'{sum(i["received"] for i in items)}')
        exceptions.append(f'statekeep_function_user_exceptions_total{{function="{label}"}} '
                          f'{sum(i["userExceptions"] for i in items)}')
        merged: dict[str, list[float]] = {}
        for item in items:
            for name, (total, count, _) in item.get("userMetrics", {}).items():
                entry = merged.setdefault(name, [0.0, 0.0])
                entry[0] += total
                entry[1] += count
        for name, (total, count) in sorted(merged.items()):
            metric = name.replace("\\", "\\\\").replace('"', '\\"')
            user.append(f'statekeep_function_user_metric_sum{{function="{label}",metric="{metric}"}} {total}')
            user.append(f'statekeep_function_user_metric_count{{function="{label}",metric="{metric}"}} {int(count)}')
    return out + exceptions + user
