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
runtime's time (:mod:`statekeep.functions.timerun`): what fires there is the function's output, so
that batch's outputs are written to its output as well as returned.
"""

from __future__ import annotations

import contextlib
import json
import time
import traceback
from typing import TYPE_CHECKING, Any

from statekeep.errors import BadVersionError, InvalidArgumentError, NotFoundError
from statekeep.functions import timerun
from statekeep.functions.context import RecordSource, is_valid_key
from statekeep.state.buffer import BufferedState
from statekeep.functions.loader import BATCH, FunctionLoadError, cached_function
from statekeep.retry import DEFAULT as RETRY

if TYPE_CHECKING:
    from statekeep.functions.registry import FunctionRegistry
    from statekeep.functions.runtime import RecordPath

STOPPED, RESTARTS = "stopped", "restarts"


def _function_path(registry: FunctionRegistry, tenant: str, namespace: str, name: str) -> tuple[str, int]:
    """The function's registry path and config version; :class:`NotFoundError` if absent."""
    result = registry.catalog.get(tenant, namespace, name)
    if result is None:
        raise NotFoundError(f"function {tenant}/{namespace}/{name} does not exist")
    return registry.catalog.path(tenant, namespace, name), result.stat.version


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
    (see :func:`statekeep.functions.timerun.one_record`), so the record goes into its windows, timers
    and TTLs are kept, and the windows and timers that batch's watermark or clock passes fire. Its
    outputs (the record's result, then what fired) are written to the function's output as the batch's
    would be, and returned: None if none, the output if one, the list of them if several.
    Raises :class:`NotFoundError` for an unknown function, :class:`InvalidArgumentError` when the
    data is not valid for the input format or the function raises (nothing is then written)."""
    from statekeep.functions import messages
    from statekeep.functions.runtime import RecordPath, batch_output, records_table, with_fired
    from statekeep.functions.sink import output_sink, published_targets, write_targets
    from statekeep.functions.spark import executor_spec

    spec, cfg = executor_spec(registry, "", tenant, namespace, name)
    fqfn = f"{tenant}/{namespace}/{name}"
    raw = bytes(data) if isinstance(data, (bytes, bytearray)) else data.encode("utf-8")
    if raw.endswith(b"\n"):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
    if isinstance(data, (bytes, bytearray)) and spec["input_format"] != "message":
        try:
            data = bytes(data).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidArgumentError(f"the trigger data is not UTF-8 text (byte {e.start})") from None
    try:
        process, kind = cached_function(spec["code"], spec.get("py_name", "<function>"), spec.get("class_name"))
    except FunctionLoadError as e:
        raise InvalidArgumentError(f"the function cannot run: {e}") from None
    store = registry.state_store(tenant, namespace, name)
    state = BufferedState(store.fetch_many, store.max_value_size)
    message = spec["input_format"] == "message"
    value: Any = data.rstrip("\r\n") if isinstance(data, str) else raw
    record: Any = messages.Message(messages.text_or_bytes(raw)).to_json() if message else data
    # the record's key is known once it is decoded (below): the source reads it only when asked
    source = RecordSource("trigger", [record], [None], [topic] if topic else None, spec["inputs"],
                          spec["user_config"].get("eventTimeField"), spec["source_format"])
    path = RecordPath(spec, state, 0, source, process, kind)  # the Spark runtime's path to the function
    path.at(0)
    keyed = value
    if kind != BATCH:
        value = keyed = _decoded(path, record if message else value, message, fqfn)
    elif spec["input_format"] == "json":
        with contextlib.suppress(ValueError):  # only to route it by its key: records_table names the error
            keyed = json.loads(value)
    if cfg.keyField and (spec["input_format"] == "text" or message and isinstance(keyed, str)):
        source.keys = [keyed]  # Pulsar's way: a str value is the key
    elif cfg.keyField and not message and isinstance(keyed, dict) and keyed.get(cfg.keyField) is not None:
        source.keys = [str(keyed[cfg.keyField])]
    fired: list[Any] = []  # what the windows and timers that fire return
    timed = None
    if spec.get("time"):  # the runtime's time, for the partition a micro-batch routes the record to
        key = source.keys[0] if source.keys else None
        time_spec, partition = timerun.one_record(spec, store, cfg.parallelism, key)
        timed = timerun.start(time_spec, state, partition, path.context, process, fired.append)
        assert timed is not None  # the spec keeps time
        if kind == BATCH and timed.windows is not None:
            raise InvalidArgumentError(f"{fqfn}: {timerun.BATCH_WINDOWS}")
        if isinstance(key, str) and is_valid_key(key):
            timed.prefetch([key])
    rows: list[Any] = []  # process_batch's own rows
    try:
        if kind == BATCH:
            table = records_table([record if message else value], spec["input_format"])
            output = batch_output(path.process(table, path.context))
            rows = output.to_pylist() if output is not None else []
            if timed is not None:
                timed.observe_table(table)
                path.at(-1)
                timed.finish()
                output = with_fired(output, fired)
            result = output.to_pylist() if output is not None else None
        else:
            result = (timed.process if timed is not None else path.process)(value, path.context)
            if timed is not None:
                path.at(-1)  # as after a batch's records: windows and on_timer see no current record
                timed.finish()
    except Exception as e:  # noqa: BLE001 - user code: its error is the answer
        detail = traceback.format_exc(limit=3)
        raise InvalidArgumentError(f"function {fqfn} raised on the trigger data: "
                                   f"{type(e).__name__}: {e}\n{detail}") from None
    context = path.context
    sink = output_sink(spec, spec.get("output"))
    written: list[Any] = []  # a function keeping time: its one-record batch's outputs, written as the runtime does
    try:
        output_serde = spec.get("output_serde") if kind != BATCH else None  # process_batch's rows go as they are
        serde = messages.load_serde(output_serde, spec["code"], spec["py_name"]) if output_serde else None
        if timed is not None and kind == BATCH:
            wrap = messages.output_wrapper(spec, context)
            written = [wrap(r) for r in [*rows, *fired]] if sink.topic else result or []
        elif timed is not None:
            wrap = messages.output_wrapper(spec, context)
            path.at(0)  # the record's result goes with its message's key, properties and event time
            written = [wrap(result)] if result is not None else []
            path.at(-1)
            written += [wrap(r) for r in fired]
            outputs = [r if serde is None else messages.serialize(r, serde)
                       for r in ([result] if result is not None else []) + fired]
            result = None if not outputs else outputs[0] if len(outputs) == 1 else outputs
        elif result is not None and serde is not None:  # the answer is the output message
            result = messages.serialize(result, serde)
        targets = published_targets(spec, context.published, context.get_logger())
    except FunctionLoadError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's serde: its error is the answer
        raise InvalidArgumentError(f"serializing the output of {fqfn} failed: "
                                   f"{type(e).__name__}: {e}") from None
    write_targets(spec, targets)
    if written:
        sink.write_new(written, "trigger")
    store.apply_batch(state.puts, state.counter_deltas)
    return result


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
