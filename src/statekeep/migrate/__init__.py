"""Moving a whole store between backends: ``migrate`` (store to store), ``export_store`` and
``import_file`` (through a portable file). See :mod:`statekeep.migrate.core` for the guarantees."""

from statekeep.migrate.core import Report, export_store, import_file, migrate
from statekeep.migrate.portable import CorruptFileError
from statekeep.migrate.sink import MigrationError, TargetNotEmptyError

__all__ = ["CorruptFileError", "MigrationError", "Report", "TargetNotEmptyError", "export_store", "import_file",
           "migrate"]
