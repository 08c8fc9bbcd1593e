"""Nexmark, step one of the joins, vectorized: the combined event stream re-keyed in Arrow.

The same output as ``rekey.py``: each event of a kind named in ``userConfig.keys`` as its flat record plus
``kind`` and ``k`` (the named fields' values joined by ``-``), in the order the events came; a record's table
row holds null in the other kinds' fields.
"""

import pyarrow as pa
import pyarrow.compute as pc

KINDS = ("person", "auction", "bid")


def process_batch(events, context):
    parts = []
    order = pa.array(range(events.num_rows), pa.int64())
    for index, kind in enumerate(KINDS):
        fields = context.get_user_config_value("keys").get(kind)
        if not fields or kind not in events.column_names:
            continue
        mask = pc.equal(events["event_type"], index)
        records = events[kind].filter(mask).combine_chunks()
        if len(records) == 0:
            continue
        flat = pa.Table.from_struct_array(records)
        key = (pc.cast(flat[fields[0]], pa.string()) if len(fields) == 1 else pc.binary_join_element_wise(
            *(pc.cast(flat[f], pa.string()) for f in fields), "-"))
        columns = {"k": key, "kind": pa.array([kind] * len(flat), pa.string()), "at": order.filter(mask)}
        parts.append(pa.table({**columns, **{name: flat[name] for name in flat.column_names}}))
    if not parts:
        return None
    table = pa.concat_tables(parts, promote_options="default")
    return table.sort_by("at").drop_columns(["at"]) if len(parts) > 1 else table.drop_columns(["at"])
