"""The ``statekeep-pulsar`` data source: its stream reader (:mod:`statekeep.pulsar.source`) and its stream writer
(:mod:`statekeep.pulsar.sink`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from statekeep.errors import MissingDependencyError
from statekeep.pulsar.sink import PulsarStreamWriter
from statekeep.pulsar.source import SCHEMA, PulsarStreamReader

try:
    from pyspark.sql.datasource import DataSource
except ImportError as e:
    raise MissingDependencyError(f"the statekeep-pulsar source needs PySpark: pip install 'statekeep[spark]' ({e})"
                                 ) from e

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


class StatekeepPulsarSource(DataSource):
    """``spark.readStream`` / ``writeStream`` ``.format("statekeep-pulsar")``: :mod:`statekeep.pulsar.source`,
    :mod:`statekeep.pulsar.sink`."""

    @classmethod
    def name(cls) -> str:
        return "statekeep-pulsar"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> PulsarStreamReader:
        return PulsarStreamReader(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> PulsarStreamWriter:
        """The effectively-once sink (:mod:`statekeep.pulsar.sink`)."""
        return PulsarStreamWriter(self.options, schema)
