"""tracedb: a columnar warehouse for ML profiler traces with a SQL interface."""

from tracedb.errors import TracedbError
from tracedb.schema import SCHEMA_VERSION

__version__ = "0.1.0"

__all__ = ["TracedbError", "SCHEMA_VERSION", "Warehouse", "__version__"]


def __getattr__(name: str):
    # Lazy: `import tracedb` stays cheap for the CLI; the API pulls in duckdb on first use.
    if name == "Warehouse":
        from tracedb.api import Warehouse

        return Warehouse
    raise AttributeError(name)
