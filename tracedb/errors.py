"""The error types the CLI turns into a clean one-line exit.

Two families, so a message says whose fault it is: a `TraceFormatError` is a problem of
a source trace (corrupt, truncated, impossible values; the message names the event or
byte offset and the field where it can), a `WarehouseError` a problem of the warehouse
side (disk full, a data file missing, a catalog that cannot be written): the source file
being read at the time is not to blame. `str()` of each starts with its prefix, so a
recorded file error tells them apart (`files.error`).
"""


class TracedbError(Exception):
    """A user-facing error: the message is one line and says what is wrong."""


class TraceFormatError(TracedbError):
    """A trace file could not be read: corrupt, truncated, unknown or missing fields."""

    prefix = ""  # the historical message form: the caller prefixes the file name


class NotATraceError(TraceFormatError):
    """No reader claims the file (empty, or no format tracedb reads): in a run folder it is
    skipped as a stray file (a README, a log, a config), not a trace that failed."""


class WarehouseError(TracedbError):
    """The warehouse, not the source, failed: writing, a missing data file, a full disk."""

    prefix = "warehouse error: "

    def __str__(self) -> str:
        msg = super().__str__()
        return msg if msg.startswith(self.prefix) else self.prefix + msg
