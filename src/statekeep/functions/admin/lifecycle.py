"""Stopping, starting, restarting and triggering a registered function (Pulsar's ``functions
stop|start|restart|trigger``), and reading its status and stats, on any server of a cluster.

The wanted state lives in the function registry, beside the config, so it survives server restarts
and every worker sees it (its notifications wake them): ``ROOT/T/N/F/stopped`` exists while the
function is stopped; ``ROOT/T/N/F/restarts`` counts restart requests (a worker restarts the query
when it changes). Both go with the function when it is deleted.

:func:`trigger` runs the function on one value in the calling process, against its real state: the
state changes are applied in one atomic write, ``context.publish`` messages are written to their
outputs, and the function's result is returned (not written to its output). A function keeping time
(windows, timers, TTL) runs as the record's partition of a one-record micro-batch, through the
runtime's time (:mod:`statekeep.functions.windowing.timerun`): what fires there is the function's output, so
that batch's outputs are written to its output as well as returned.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import TYPE_CHECKING, Any

from statekeep.errors import BadVersionError, InvalidArgumentError, NotFoundError
from statekeep.functions.windowing import timerun
from statekeep.functions.executor.record import RecordSource
from statekeep.functions.config.loader import BATCH, FunctionLoadError, cached_function
from statekeep.retry import DEFAULT as RETRY
from statekeep.state.transaction import KeyedTransaction

if TYPE_CHECKING:
    from statekeep.functions.config.registry import FunctionRegistry
    from statekeep.functions.executor.path import RecordPath

STOPPED, RESTARTS = "stopped", "restarts"


def _function_path(registry: FunctionRegistry, tenant: str, namespace: str, name: str) -> tuple[str, int]:
    """The function's registry path and config version; :class:`NotFoundError` if absent."""
    version = registry.catalog.require(tenant, namespace, name).stat.version
    return registry.catalog.path(tenant, namespace, name), version


def is_stopped(registry: FunctionRegistry, tenant: str, namespace: str, name: str) -> bool:
    """Whether the function was stopped (and not started since). Does not check it exists."""
    return registry.store.exists(registry.catalog.path(tenant, namespace, name) + "/" + STOPPED)


def restart_count(registry: FunctionRegistry, tenant: str, namespace: str, name: str) -> int:
    """How many restarts were requested (0 if none). Does not check the function exists."""
    result = registry.store.get(registry.catalog.path(tenant, namespace, name) + "/" + RESTARTS)
    return int(result.value) if result is not None else 0


def set_stopped(registry: FunctionRegistry, tenant: str, namespace: str, name: str, stopped: bool) -> bool:
    """Stop (``stopped=True``) or start the function; returns whether this changed anything
    (stopping a stopped function is accepted). Written only while the function exists
    (:class:`NotFoundError` otherwise), so a deleted function leaves no marker behind."""
    from statekeep.metadata import Check, Delete, Put

    for _ in RETRY.bounded(attempts=20).attempts():
        path, version = _function_path(registry, tenant, namespace, name)
        marker = path + "/" + STOPPED
        if registry.store.exists(marker) == stopped:
            return False
        op = Put(marker, str(int(time.time() * 1000)).encode(), -1) if stopped else Delete(marker)
        try:
            registry.store.multi([Check(path, version), op])
            return True
        except (BadVersionError, NotFoundError):
            continue  # the config changed, or a concurrent stop/start: look again
    raise BadVersionError(f"function {tenant}/{namespace}/{name} kept changing; try again")


def request_restart(registry: FunctionRegistry, tenant: str, namespace: str, name: str) -> int:
    """Ask the worker running the function to restart its query (from its checkpoint); returns the
    new restart count. A stopped function stays stopped (the count still rises)."""
    from statekeep.metadata import Check, Put

    for _ in RETRY.bounded(attempts=20).attempts():
        path, version = _function_path(registry, tenant, namespace, name)
        current = registry.store.get(path + "/" + RESTARTS)
        count = (int(current.value) if current is not None else 0) + 1
        expected = current.stat.version if current is not None else -1
        try:
            registry.store.multi([Check(path, version), Put(path + "/" + RESTARTS, str(count).encode(), expected)])
            return count
        except (BadVersionError, NotFoundError):
            continue
    raise BadVersionError(f"function {tenant}/{namespace}/{name} kept changing; try again")


def trigger(registry: FunctionRegistry, tenant: str, namespace: str, name: str, data: bytes | str,
            topic: str | None = None) -> Any:
    """Run the function once on ``data`` (one input record, decoded as its input format: a JSON
    line gives a dict, Pulsar messages go through the serde of ``topic``, default the first input)
    through its real state, and return its result (None: no output).
    For a function keeping time (windows, timers, TTL) the run is the record's part of a one-record
    micro-batch: the partition that batch routes the record to, with the function's committed watermark
    (see :func:`statekeep.functions.windowing.timerun.one_record`), so the record goes into its windows, timers
    and TTLs are kept, and the windows and timers that batch's watermark or clock passes fire. Its
    outputs (the record's result, then what fired) are written to the function's output as the batch's
    would be, and returned: None if none, the output if one, the list of them if several.
    Raises :class:`NotFoundError` for an unknown function, :class:`InvalidArgumentError` when the
    data is not valid for the input format or the function raises (nothing is then written)."""
    from statekeep.functions.config.spec import executor_spec
    from statekeep.functions.executor.errors import FunctionRecordError
    from statekeep.functions.executor.path import RecordPath
    from statekeep.functions.executor.checkpoint import Checkpoint

    spec, cfg = executor_spec(registry, "", tenant, namespace, name)
    value, record = _trigger_record(spec, data)
    try:
        process, kind = cached_function(spec.code, spec.py_name, spec.class_name)
    except FunctionLoadError as e:
        raise InvalidArgumentError(f"the function cannot run: {e}") from None
    store = registry.state_store(tenant, namespace, name)
    txn = KeyedTransaction.begin(store)
    # the record's key is known once it is decoded (below): the source reads it only when asked
    source = RecordSource("trigger", [record], [None], [topic] if topic else None, list(spec.inputs),
                          spec.user_config.get("eventTimeField"), spec.format)
    # the Spark runtime's path; results kept as returned: they are the answer
    path = RecordPath(spec, "trigger", 0, txn, source, process, kind, wrap=False)
    path.registry = lambda: registry.store  # typed variables' schemas: checked and recorded as a run's
    path.context.position = 0
    key = _trigger_key(path, cfg.keyField, value, record)
    source.keys = [key] if key is not None else None
    if spec.time is not None:  # the runtime's time, for the partition a micro-batch routes the record to
        try:
            path.keep_time(*timerun.one_record(spec, store, cfg.parallelism, key), [key] if key is not None else [])
        except FunctionRecordError as e:  # a windowed process_batch
            raise InvalidArgumentError(str(e)) from None
    try:
        table = path.run(source.records)
    except FunctionRecordError as e:  # user code: its error is the answer
        cause = f"{type(e.error).__name__}: {e.error}\n" if e.error is not None else ""
        raise InvalidArgumentError(f"function {spec.fqfn} raised on the trigger data: {cause}"
                                   f"{str(e).partition(chr(10))[2] if cause else e}") from None
    result, written, targets = _trigger_outputs(path, table)
    Checkpoint(path, written or None, targets).commit()
    return result


def _trigger_record(spec: Any, data: bytes | str) -> tuple[Any, Any]:
    """``(value, record)`` of the trigger's data: the value as the input format reads it (a line without its end, as
    text; the bytes of a message) and the record the run decodes (a message's record for a message input)."""
    from statekeep.functions.messaging import messages

    raw = bytes(data) if isinstance(data, (bytes, bytearray)) else data.encode("utf-8")
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    message = spec.format.message
    if isinstance(data, (bytes, bytearray)) and not message:
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidArgumentError(f"the trigger data is not UTF-8 text (byte {e.start})") from None
    value: Any = data.rstrip("\r\n") if isinstance(data, str) else raw
    if spec.format.rows:  # a CSV or Parquet input's row, given as a JSON object of its columns
        try:
            value = json.loads(value)
        except ValueError as e:
            raise InvalidArgumentError(f"the trigger data of a {spec.format.source} input is a JSON object of "
                                       f"its row's columns: {e}") from None
        if not isinstance(value, dict):
            raise InvalidArgumentError(f"the trigger data of a {spec.format.source} input is a JSON object of its "
                                       f"row's columns, not {type(value).__name__}")
    return value, messages.Message(messages.text_or_bytes(raw)).to_json() if message else value


def _trigger_key(path: RecordPath, key_field: str | None, value: Any, record: Any) -> str | None:
    """The key a micro-batch routes the trigger's record by (as its plan's ``__key``): the key field of a JSON
    record, a text record itself (with a key field), a message's value when it decodes to a str (Pulsar's way);
    None without a key field. The record is decoded on ``path`` (:class:`InvalidArgumentError` if it does not)."""
    spec = path.spec
    keyed = value
    if path.kind != BATCH:
        keyed = _decoded(path, path.source.records[0] if path.source is not None else record, spec.format.message,
                         spec.fqfn)
    elif spec.format.json:
        with contextlib.suppress(ValueError):  # only to route it by its key: records_table names the error
            keyed = json.loads(value)
    if not key_field:
        return None
    if spec.format.text or (spec.format.message and isinstance(keyed, str)):
        return keyed  # type: ignore[no-any-return]  # Pulsar's way: a str value is the key
    if not spec.format.message and isinstance(keyed, dict) and keyed.get(key_field) is not None:
        return str(keyed[key_field])
    return None


def _trigger_outputs(path: RecordPath, table: Any) -> tuple[Any, list[Any], dict[tuple[str, str], list[Any]]]:
    """``(the trigger's answer, what its one-record batch writes to the output, its published and log targets)``:
    the results (through the output serde; None: none, the one, or the list), and, for a function keeping time, its
    outputs as the runtime writes them (the record's result, then what fired). :class:`InvalidArgumentError` when
    the user's serde fails."""
    from statekeep.functions.messaging import messages
    from statekeep.functions.messaging.messages import output_sink, published_targets

    spec, context = path.spec, path.context
    wrap = messages.output_wrapper(spec, context)
    written: list[Any] = []
    try:
        if path.kind == BATCH:  # process_batch's rows go as they are
            results = path.output(table).to_pylist() if table is not None or path.fired else []
            if spec.time is not None:
                sink = output_sink(spec, spec.output)
                written = [wrap(r) for r in path.output(table, topic=True) or []] if sink.topic else results
            return results or None, written, published_targets(spec, context.published, context.get_logger())
        serde = messages.load_serde(spec.output_serde, spec.code, spec.py_name) if spec.output_serde else None
        if spec.time is not None:
            context.position = 0  # the record's result goes with its message's key, properties and event time
            written = [wrap(r) for r in path.outputs]
            context.position = -1
            written += [wrap(r) for r in path.fired]
        results = [r if serde is None else messages.serialize(r, serde) for r in path.outputs + path.fired]
        targets = published_targets(spec, context.published, context.get_logger())
        return (None if not results else results[0] if len(results) == 1 else results), written, targets
    except FunctionLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's serde: its error is the answer
        raise InvalidArgumentError(f"serializing the output of {spec.fqfn} failed: "
                                   f"{type(e).__name__}: {e}") from None


def _decoded(path: RecordPath, record: Any, message: bool, fqfn: str) -> Any:
    """What ``process`` receives for the trigger's record, decoded on the runtime's ``path``;
    :class:`InvalidArgumentError` when it does not decode (a JSON line that is not JSON, or the input
    serde's error for a message)."""
    try:
        return path.decode(record)
    except FunctionLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's serde: its error is the answer
        if message:
            raise InvalidArgumentError(f"the input serde of {fqfn} raised on the trigger data: "
                                       f"{type(e).__name__}: {e}") from None
        if isinstance(e, ValueError):  # json.loads refused the line
            raise InvalidArgumentError(f"the trigger data is not a JSON value: {e}") from None
        raise


def output_text(result: Any) -> str:
    """The trigger's response body, as Pulsar's: a str result as it is, anything else as JSON
    (``""`` for no output)."""
    if result is None:
        return ""
    if isinstance(result, str):
        return result
    if isinstance(result, (bytes, bytearray)):
        return bytes(result).decode("utf-8", "replace")
    return json.dumps(result, default=str)
