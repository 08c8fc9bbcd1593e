"""A statekeep function as an operator on any DataFrame: :func:`apply_function`.

Spark's own stateful operators (``groupBy(key).transformWithState(...)``) take any DataFrame, batch or streaming,
and give a DataFrame to any sink. This does the same with a statekeep function: its state is exactly-once through
the (batch, partition) marker of :mod:`statekeep.functions.executor.runtime`, and its output rows are exactly-once
through Spark's own sinks, because each (batch, partition)'s rows are kept (an Arrow file, written before the state
commit) and a replay of a committed (batch, partition) gives them again instead of running the function.

    from statekeep.spark import apply_function

    counts = apply_function(events, count_words, name="public/default/wc", key="user")
    counts.writeStream.format("parquet").option("checkpointLocation", ...).start(...)

The function is registered under its name in the store's registry (created, or updated with this call's config),
so ``functions querystate``, REST, the console, followers and the changelog find its state as they find a
function the runner runs.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from statekeep.errors import InvalidArgumentError, NotFoundError
from statekeep.functions.config.loader import entry_point, validate_function_source
from statekeep.functions.config.objectsource import object_source, stub
from statekeep.functions.messaging.rows import DEFAULT_SCHEMA
from statekeep.functions.driver.plan import StatusListener, function_plan, new_stats
from statekeep.functions.messaging.sink import claim
from statekeep.functions.config.spec import TimeSpec, time_section
from statekeep.functions.windowing.timerun import with_clock_source
from statekeep.state.base import Capability
from statekeep.metadata.registry import default_store_url

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import StructType

#: the columns that give a DataFrame Kafka's shape (``spark.readStream.format("kafka")``): its records are messages
KAFKA_COLUMNS = frozenset({"key", "value", "timestamp"})
#: where a function's kept output rows go, under its state directory or its ``local://`` store
ROWS_DIR = "operator-rows"


def apply_function(df: DataFrame, function: Any, *, name: str, key: str | Column | None = None,
                   store: str | None = None, state_dir: str | None = None,
                   output_schema: str | StructType | None = None, parallelism: int = 2,
                   config: Mapping[str, Any] | None = None, class_name: str | None = None,
                   vectorized: bool | None = None, outputs_dir: str | None = None) -> DataFrame:
    """``df`` (batch or streaming) through the function ``function`` named ``name`` (``tenant/namespace/name``):
    a DataFrame of its output rows in ``output_schema`` (a DDL string or StructType; default
    :data:`~statekeep.functions.messaging.rows.DEFAULT_SCHEMA`, ``key string, value string``: see
    :mod:`statekeep.functions.messaging.rows` for what a result becomes).

    - ``function``: a callable ``process(input, context)``, ``process(input)`` or ``process_batch(records,
      context)`` (named so, or ``vectorized=True``), a ``pulsar.Function`` class (or instance), or the path of a
      function file (``class_name`` as Pulsar's ``--classname``).
    - A record reaches ``process`` as the row's dict (its columns as Python values, as ``Row.asDict`` gives
      them); ``process_batch`` gets the partition's rows as a ``pyarrow.Table``. A DataFrame of Kafka's
      shape (``key``, ``value`` binary, ``timestamp``; ``headers`` and ``topic`` if present) gives each row as a
      message: the value through the function's serde, the key, headers (as properties) and timestamp (as event
      time) through the Context.
    - ``key``: the column (name or Column) whose value is a record's key: one key's records reach one task in
      order, and its state lives there. None: no key, every record in one partition.
    - ``store``: the registry and state's metadata store URL (default ``$STATEKEEP_STORE`` or
      ``local://./.statekeep-data``); ``state_dir``: partition-owned state there instead (a path or URL, as
      ``--state-dir``). ``config``: more of the function's config, Pulsar's FunctionConfig fields
      (``userConfig``, ``maxMessageRetries``, ``deadLetterTopic``, ``logTopic``, ``timeoutMs``, ...).
    - ``outputs_dir``: where each (batch, partition)'s output rows are kept until Spark no longer replays it (a
      path or URL every executor reaches); default under ``state_dir``, else under a ``local://`` store's
      directory (another store needs it named).

    Timers, windows and state TTL run as in the runner: event time from the function's ``eventTimeField``, or the
    input's ``withWatermark`` column (its delay the watermark's lag, unless the function's config sets one; the
    column reaches the function in ms since the epoch); processing-time timers fire while the input is idle (a
    streaming query then runs a micro-batch each second).

    A streaming query keeps the function's state for its checkpoint: a query with another checkpoint is refused
    at its first task (its micro-batches, numbered from 0 again, would count as applied). A batch DataFrame is one
    run, with its own batch id: a task Spark retries, or the DataFrame computed again, gives the same rows.
    The function is registered with its source where Python has it (a function's, a class's, and its module's
    imports and classes: :mod:`statekeep.functions.config.objectsource`), so the update of an existing function
    checks the state schemas it opens against those its runs recorded, as ``functions update`` checks a file's.
    A function without source there (a lambda, one typed into a REPL) is registered with a stub: its variables'
    schemas are checked at the run's first open of each, and it is taken to keep time (timers, TTL).

    Raises :class:`InvalidArgumentError` (e.g. a malformed name, a function that cannot run, a state provider other
    than the registered one, a column named ``__...``; :class:`~statekeep.state.typed.StateSchemaError` for a state
    variable whose recorded schema cannot evolve into the one the function's source opens), before anything runs.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    from statekeep.functions.config.service import FunctionService
    from statekeep.functions.config.spec import executor_spec
    from statekeep.functions.driver.inputs import message_columns
    from statekeep.state.partitioned import state_storage

    parts = name.split("/") if isinstance(name, str) else []
    if len(parts) != 3:
        raise InvalidArgumentError(f"name must be tenant/namespace/name, not {name!r}")
    tenant, namespace, fname = parts
    if not isinstance(parallelism, int) or isinstance(parallelism, bool) or parallelism < 1:
        raise InvalidArgumentError(f"parallelism must be an int >= 1, not {parallelism!r}")
    entry, kind, code, py_name, source = None, None, b"", f"{fname}.py", None
    if isinstance(function, (str, os.PathLike)):
        try:
            with open(function, "rb") as f:
                code = f.read()
        except OSError as e:
            raise InvalidArgumentError(f"cannot read the function file {os.fspath(function)!r}: {e}") from None
        py_name = os.path.basename(os.fspath(function))
        validate_function_source(code, py_name, class_name)
    else:  # its source where Python has it, for update's checks (else a stub: see objectsource)
        entry, kind = function, entry_point(function, vectorized)[1]
        found = object_source(function, name)
        if found is not None:
            source, py_name = found
        code = (source or stub(name)).encode()
    key_name = None if key is None else key if isinstance(key, str) else "key"
    try:
        schema = (StructType.fromDDL(output_schema) if isinstance(output_schema, str)
                  else output_schema if output_schema is not None else StructType.fromDDL(DEFAULT_SCHEMA))
    except Exception as e:  # noqa: BLE001 - Spark's parse error, whatever its class
        raise InvalidArgumentError(f"output_schema {output_schema!r} is not a DDL schema: "
                                   f"{str(e).splitlines()[0]}") from None
    if not isinstance(schema, StructType):
        raise InvalidArgumentError(f"output_schema must be a DDL string or a StructType, not {type(schema).__name__}")
    reserved = [c for c in df.columns if c.startswith("__")]
    if reserved:
        raise InvalidArgumentError(f"columns starting with __ are statekeep's own: rename {reserved}")
    url = store or default_store_url()
    base = outputs_dir or (f"{state_dir.rstrip('/')}/{ROWS_DIR}" if state_dir else _local_dir(url))
    if base is None:
        raise InvalidArgumentError(f"a function on {url} needs outputs_dir=: where its output rows are kept, a "
                                   "path or URL every executor reaches")

    registered: dict[str, Any] = {**(config or {}), "tenant": tenant, "namespace": namespace, "name": fname,
                                  "inputs": ["dataframe"], "parallelism": parallelism, "py": py_name,
                                  "className": class_name}
    if key_name is not None:
        registered["keyField"] = key_name
    if state_dir is not None:
        registered["stateStorage"] = state_storage(state_dir)
    kafka = KAFKA_COLUMNS <= set(df.columns) and dict(df.dtypes).get("value") == "binary"
    topic = kafka and "topic" in df.columns
    event_column, delay = _watermark(df)

    with FunctionService.open(url) as service:
        registry = service.registry
        try:
            registry.get(tenant, namespace, fname)
            registry.update(tenant, namespace, fname, registered, code, runner_inputs=False)
        except NotFoundError:
            registry.create(registered, code)
        output = f"{base.rstrip('/')}/{tenant}/{namespace}/{fname}/{registry.incarnation(tenant, namespace, fname)}"

        def operator_fields(cfg: Any) -> dict[str, Any]:
            """The spec's fields the operator sets: its entry object and its time section from its own source (None:
            unknown, taken to keep time), the input's withWatermark (its event time and delay), formats, rows."""
            fields: dict[str, Any] = {}
            timed = time_section(cfg, source if entry is not None else code.decode())
            if entry is not None:
                fields.update(entry=entry, entry_kind=kind, time=timed)
            if timed is not None and event_column is not None:
                lag = timed.lag_ms if timed.lag_ms is not None or timed.window else delay
                fields.update(user_config={"eventTimeField": event_column, **cfg.userConfig},
                              time=TimeSpec(timed.window, timed.ttl_ms, timed.ttl_used, lag))
            fmt = "message" if kafka else "rows"
            return {**fields, "input_format": fmt, "source_format": fmt, "topic_column": topic, "output": output,
                    "output_format": "arrow", "rows_schema": to_arrow_schema(schema),
                    "run_id": None if df.isStreaming else time.time_ns() // 1000}

        spec, _ = executor_spec(registry, url, tenant, namespace, fname, fields=operator_fields)
    key_column = ((F.col(key) if isinstance(key, str) else key) if key is not None else F.lit(None)).cast("string")
    if kafka:  # each row a message record: its key, value, headers and timestamp as a Pulsar message's
        frame = df.select(*message_columns(df), key_column.alias("__key"),
                          *([F.col("topic").cast("string").alias("__topic")] if topic else []))
    else:  # the row's columns as they are (the event time column in ms): a dict per record, or a Table
        frame = df.select(*[F.unix_millis(F.col(c)).alias(c) if c == event_column and spec.time is not None
                            else F.col(c) for c in df.columns], key_column.alias("__key"))
    if spec.time is not None and df.isStreaming:  # a micro-batch each second while idle: processing-time timers
        frame = with_clock_source(frame)
    if spec.run_id is not None and Capability.PARTITIONED in spec.state_store().capabilities:
        # a partition applies batches in rising order: a run's id outranks any micro-batch's
        claim(str(spec.output), "batch runs", name)
    report = None
    if df.isStreaming:  # its status and stats, as a function the runner runs has them
        stats = new_stats(df.sparkSession)
        status = OperatorStatus(url, (tenant, namespace, fname), stats)
        df.sparkSession.streams.addListener(StatusListener(stats, status.progress, status.end, df.sparkSession.streams))
        report = stats.add
    return function_plan(frame, spec, parallelism, schema=schema, report=report)[0]


def _watermark(df: DataFrame) -> tuple[str | None, int | None]:
    """The event time column and delay (ms) of ``df``'s ``withWatermark``, (None, None) without one."""
    for field in df.schema.fields:
        delay = field.metadata.get("spark.watermarkDelayMs")
        if delay is not None:
            return field.name, int(delay)
    return None, None


def _local_dir(url: str) -> str | None:
    """The directory of a ``local://`` store URL (None for another store)."""
    if not url.startswith("local://"):
        return None
    return os.path.abspath(url.removeprefix("local://").split("?")[0]) + f"/{ROWS_DIR}"




class OperatorStatus:
    """A streaming operator's status, where ``functions status`` and ``stats`` read a function's
    (:func:`statekeep.functions.driver.spark.status_saver`'s path), saved by its query's
    :class:`~statekeep.functions.driver.plan.StatusListener`: from its first micro-batch it holds the function's
    run lock (as a runner does, so no worker runs it meanwhile) and saves the status after each micro-batch; at
    the query's end it saves it stopped, with its error, and releases the lock."""

    def __init__(self, url: str, where: tuple[str, str, str], stats: Any) -> None:
        self.url, self.where, self.stats = url, where, stats
        self.worker_id = f"operator:{socket.gethostname()}:{os.getpid()}"
        self._store: Any = None
        self._lock: Any = None

    def _save(self, running: bool, error: str | None = None, batch: int | None = None) -> None:
        from statekeep.coordination import CoordinationService
        from statekeep.functions.admin.worker import acquire_function_lock
        from statekeep.functions.driver.spark import STATUS_ROOT, status_json
        from statekeep.metadata import open_store

        value = self.stats.value
        if self._store is None:
            self._store = open_store(self.url)
            self._lock = acquire_function_lock(CoordinationService(self._store), *self.where, self.worker_id)
        status = {"running": running, "error": error, "workerId": self.worker_id,
                  "updated_ms": int(time.time() * 1000),
                  **{k: value[k] for k in ("processed", "skipped", "outputs", "batches", "last_batch", "instances")}}
        self._store.put(f"{STATUS_ROOT}/{'/'.join(self.where)}", status_json(status))

    def progress(self, batch: int) -> None:
        self._save(True, batch=batch)

    def end(self, error: str | None) -> None:
        try:
            self._save(False, error)
        finally:
            lock, store, self._lock, self._store = self._lock, self._store, None, None
            if lock is not None:
                lock.release()
            if store is not None:
                store.close()
