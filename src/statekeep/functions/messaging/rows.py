"""The DataFrame operator's output rows: what a function's results become in its output schema.

The default schema, :data:`DEFAULT_SCHEMA` (``key string, value string``), fits any sink and is Kafka's sink
shape: a result becomes a row whose ``key`` is the record's key (its message key, or the operator's key column)
and whose ``value`` is the result, as it is if a ``str``, else as JSON text. A result that is a dict of exactly
``key`` and ``value`` sets both. In another schema a result is a dict of columns by name, a tuple or list of
them in order, or, for a one-column schema, the column's value; a missing column is null.
``process_batch``'s table gives its columns by name (the default schema: a table without ``key`` and ``value``
columns gives each row as JSON text in ``value``).

A result that does not fit raises :class:`InvalidArgumentError` naming the schema (the run reports it as the
record's failure).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.functions.messaging.jsonscan import dumps

DEFAULT_SCHEMA = "key string, value string"
_KEY_VALUE = ("key", "value")


def is_key_value(schema: Any) -> bool:
    """Whether a pyarrow schema is the default one's shape: string columns ``key`` and ``value``."""
    import pyarrow as pa

    return tuple(schema.names) == _KEY_VALUE and all(pa.types.is_string(t) or pa.types.is_large_string(t)
                                                    for t in schema.types)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return dumps(value)


def row_maker(schema: Any, key: Callable[[], Any]) -> Callable[[Any], dict[str, Any]]:
    """What one result becomes: a row (a dict by column) of ``schema`` (a pyarrow schema). ``key()``: the key of
    the record being processed, for the default schema."""
    names = list(schema.names)
    if is_key_value(schema):
        def key_value(result: Any) -> dict[str, Any]:
            if isinstance(result, dict) and result.keys() == {"key", "value"}:
                return {"key": _text(result["key"]), "value": _text(result["value"])}
            return {"key": _text(key()), "value": _text(result)}
        return key_value

    def row(result: Any) -> dict[str, Any]:
        if isinstance(result, dict):
            unknown = result.keys() - set(names)
            if unknown:
                raise InvalidArgumentError(f"the result has fields {sorted(unknown)} that the output schema "
                                           f"({', '.join(names)}) has not")
            return result
        if isinstance(result, (tuple, list)):
            if len(result) != len(names):
                raise InvalidArgumentError(f"the result has {len(result)} values; the output schema has "
                                           f"{len(names)} columns ({', '.join(names)})")
            return dict(zip(names, result))
        if len(names) == 1:
            return {names[0]: result}
        raise InvalidArgumentError(f"a result of type {type(result).__name__} does not fit the output schema "
                                   f"({', '.join(names)}): return a dict, a tuple or a list")
    return row


def rows_table(output: Any, schema: Any) -> Any:
    """The run's output (a list of rows made by :func:`row_maker`, or ``process_batch``'s Table) as a pyarrow
    Table of ``schema``; None for no output. :class:`InvalidArgumentError` for a value of the wrong type."""
    import pyarrow as pa

    if output is None:
        return None
    try:
        if isinstance(output, list):
            return pa.Table.from_pylist(output, schema) if output else None
        if output.num_rows == 0:
            return None
        if is_key_value(schema) and not set(_KEY_VALUE) <= set(output.column_names):
            values = [_text(row) for row in output.to_pylist()]
            return pa.table({"key": pa.nulls(len(values), pa.string()), "value": pa.array(values, pa.string())},
                            schema=schema)
        missing = [n for n in schema.names if n not in output.column_names]
        for name in missing:
            output = output.append_column(name, pa.nulls(output.num_rows, schema.field(name).type))
        return output.select(schema.names).cast(schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError) as e:
        raise InvalidArgumentError(f"the function's results do not fit the output schema {schema}: {e}") from None
