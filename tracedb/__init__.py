"""tracedb: a columnar warehouse for ML profiler traces with a SQL interface."""

from tracedb.errors import TracedbError
from tracedb.schema import SCHEMA_VERSION

__version__ = "0.1.0"

__all__ = ["TracedbError", "SCHEMA_VERSION", "__version__"]
