"""A ``process_batch`` function's records and results as Arrow tables: :func:`records_table` (a partition's records,
decoded by its input format) and :func:`batch_output` (what it returned)."""

from __future__ import annotations

import json
from typing import Any

from statekeep.functions.config.spec import RecordFormat
from statekeep.functions.executor.errors import FunctionRecordError
from statekeep.functions.messaging.messages import batch_lines


def records_table(values: Any, fmt: RecordFormat) -> Any:
    """A partition's records (a pyarrow string array, or a list of str; messages: their
    :class:`~statekeep.functions.messaging.columns.MessageColumns`) as the ``pyarrow.Table``
    ``process_batch`` receives: JSON lines as one column per field (objects only; a line holding
    another JSON value becomes a row with that value in a ``value`` column), text as one ``value``
    column. Raises :class:`FunctionRecordError` naming the first malformed record's position."""
    import pyarrow as pa

    if fmt.rows:  # a DataFrame's or a file's columns, already a Table (a trigger's one row: a dict)
        return values if isinstance(values, pa.Table) else pa.Table.from_pylist(list(values))
    json_lines = fmt.json
    if fmt.message:  # Pulsar messages (MessageColumns): a JSON file's line as JSON, other payloads as a str
        values = batch_lines(values)
        json_lines = True
    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = pa.array(values, pa.large_string())
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], pa.large_string())
    values = values.drop_null()
    if not json_lines:
        return pa.table({"value": values.cast(pa.string())})
    if len(values) == 0:
        return pa.table({})
    import pyarrow.compute as pc
    import pyarrow.json as pj

    # all lines joined into one buffer in C++ and parsed by Arrow's JSON reader: no Python per record
    lines = values.cast(pa.large_string())
    joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array([0, len(lines)], pa.int64()), lines),
                            pa.scalar("\n", pa.large_string()))
    # Arrow's reader takes a bare scalar line as an empty row: only lines that open an object go to it
    if pc.all(pc.starts_with(lines, "{")).as_py():
        try:
            table = pj.read_json(pa.BufferReader(joined[0].as_buffer()))
            if table.num_rows == len(lines):
                return table
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # malformed, or types that do not unify: line by line, for the exact error or table
    rows = []
    for position, line in enumerate(lines.to_pylist()):
        try:
            record = json.loads(line)
        except ValueError as e:
            raise FunctionRecordError(f"record {position}: {type(e).__name__}: {e}") from None
        rows.append(record if isinstance(record, dict) else {"value": record})
    columns = dict.fromkeys(name for row in rows for name in row)  # every field seen, not only the first row's
    try:
        return pa.table({name: [row.get(name) for row in rows] for name in columns})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise FunctionRecordError(f"the records do not form one table (a field with values of different "
                                  f"types?): {e}") from None


def batch_output(result: Any) -> Any:
    """``process_batch``'s result as a pyarrow Table (None: no output); TypeError if it is none of
    Table, RecordBatch, list of dicts or None."""
    import pyarrow as pa

    if result is None:
        return None
    if isinstance(result, pa.Table):
        return result
    if isinstance(result, pa.RecordBatch):
        return pa.Table.from_batches([result])
    if isinstance(result, list) and all(isinstance(row, dict) for row in result):
        columns = dict.fromkeys(name for row in result for name in row)
        return pa.table({name: [row.get(name) for row in result] for name in columns}) if result else None
    raise TypeError(f"process_batch returned {type(result).__name__}; it must return a pyarrow.Table, a "
                    "pyarrow.RecordBatch, a list of dicts, or None")
