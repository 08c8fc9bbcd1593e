"""statekeep in your own Spark query: a function and its state as an operator on any DataFrame.

    from statekeep.spark import apply_function

    out = apply_function(df, process, name="public/default/counts", key="user")

See :func:`statekeep.functions.admin.operator.apply_function`.
"""

from statekeep.functions.admin.operator import apply_function
from statekeep.functions.messaging.rows import DEFAULT_SCHEMA

__all__ = ["DEFAULT_SCHEMA", "apply_function"]
