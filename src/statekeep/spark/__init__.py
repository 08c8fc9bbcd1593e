"""statekeep in your own Spark query: a function and its state as an operator on any DataFrame.

    from statekeep.spark import apply_function, spark_session

    spark = spark_session("local[2]")
    out = apply_function(df, process, name="public/default/counts", key="user")

See :func:`statekeep.spark.operator.apply_function` and, for a session set up for statekeep's Python
workers, :func:`statekeep.functions.driver.session.spark_session` (any session works).
"""

from statekeep.spark.operator import apply_function
from statekeep.functions.driver.session import spark_session
from statekeep.functions.messaging.rows import DEFAULT_SCHEMA

__all__ = ["DEFAULT_SCHEMA", "apply_function", "spark_session"]
