"""tracedb: a columnar warehouse for ML profiler traces with a SQL interface."""

from tracedb._version import __version__
from tracedb.errors import TracedbError

__all__ = ["TracedbError", "SCHEMA_VERSION", "QueryLimits", "Warehouse", "__version__"]


def __getattr__(name: str):
    # Lazy: `import tracedb` stays cheap for the CLI (issue 12 item 6); the API pulls in
    # duckdb on first use, SCHEMA_VERSION pyarrow (tracedb.schema).
    if name == "Warehouse":
        from tracedb.api import Warehouse

        return Warehouse
    if name == "QueryLimits":
        from tracedb.query import QueryLimits

        return QueryLimits
    if name == "SCHEMA_VERSION":
        from tracedb.schema import SCHEMA_VERSION

        return SCHEMA_VERSION
    raise AttributeError(name)
