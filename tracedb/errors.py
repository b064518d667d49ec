"""The one error type the CLI turns into a clean exit."""


class TracedbError(Exception):
    """A user-facing error: the message is one line and says what is wrong."""


class TraceFormatError(TracedbError):
    """A trace file could not be read: corrupt, truncated, unknown or missing fields."""


class WarehouseError(TracedbError):
    """The warehouse could not be written or read (disk full, permissions, a damaged
    lake): not the source trace's fault."""
