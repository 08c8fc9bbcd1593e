"""The errors of a function's run: a record (or a batch) that fails it, and a record taking too long."""

from __future__ import annotations

from statekeep.errors import StatekeepError


class FunctionRecordError(StatekeepError):
    """A function raised on a record; the message names the record's position, ``error`` is what the
    function raised (None: the record itself was refused)."""

    def __init__(self, message: str, error: BaseException | None = None) -> None:
        super().__init__(message)
        self.error = error


class ProcessingTimeout(StatekeepError):
    """A record's processing took longer than the function's ``timeoutMs`` (a user exception)."""
