"""The Python API for notebooks: the same library the CLI uses, returning Arrow tables
(or pandas / polars DataFrames when those are installed).

    import tracedb
    wh = tracedb.Warehouse("tracedb-warehouse")
    wh.ingest("runs/")
    wh.query("top_kernels", limit=10)                  # pyarrow.Table
    wh.query("top_kernels", output="pandas", limit=10)  # pandas.DataFrame
    wh.sql("select count(*) n from kernels where run_id = $r", r="resnet")
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import duckdb

from tracedb import catalog, query
from tracedb.ingest import IngestSummary, ingest


class Warehouse:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else catalog.default_warehouse()

    def __repr__(self) -> str:
        return f"Warehouse({str(self.path)!r})"

    def ingest(self, *paths: str | Path, run_id: str | None = None, jobs: int = 1, partial: bool = False) -> IngestSummary:
        """Ingest runs; a run with a failing file keeps its previous version unless partial=True."""
        return ingest([Path(p) for p in paths], self.path, run_id=run_id, jobs=jobs, partial=partial)

    def connect(self, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with the views ready (close it when done). Not sandboxed:
        it is your own process's connection (`tracedb.query.sandbox(con, path)` locks it)."""
        return catalog.connect(self.path, read_only=read_only)

    def queries(self) -> list[query.CannedQuery]:
        return query.list_queries()

    def query(self, name: str, output: str = "arrow", allow_external: bool = False, **params: Any):
        """Run a canned query (name or .sql path); parameters as keyword arguments.

        Sandboxed like `sql` unless allow_external=True."""
        return query.run_query(name, params, self.path, output=output, allow_external=allow_external)

    def sql(self, sql: str, output: str = "arrow", allow_external: bool = False, **params: Any):
        """Run ad-hoc SQL over the views; `$name` placeholders bound from keyword arguments.

        The SQL runs sandboxed: it reads only this warehouse's data and cannot write files,
        attach databases or read other files (`/etc/passwd`, URLs); allow_external=True
        lifts that for SQL you trust (e.g. joining a CSV of your own)."""
        return query.run_query(query.parse(sql, "sql"), params, self.path, output=output,
                               allow_external=allow_external)

    def rm(self, *run_ids: str) -> list[str]:
        """Delete runs (one Delta commit unpublishes them); returns the run ids removed."""
        from tracedb import catalog

        lake = catalog.open_lake(self.path)
        with lake.lock():
            gone = lake.delete_runs(list(run_ids))
            catalog.publish(lake)
        return gone

    def vacuum(self, retention_hours: int = 168) -> list[str]:
        """Delete files no live table version references, older than the retention."""
        from tracedb import catalog

        lake = catalog.open_lake(self.path)
        with lake.lock():
            removed = lake.vacuum(retention_hours)
            catalog.publish(lake)
        return removed

    def optimize(self) -> dict[str, int]:
        """Compact small files per run and device; returns files compacted per table."""
        from tracedb import catalog

        lake = catalog.open_lake(self.path)
        with lake.lock():
            done = lake.optimize()
            catalog.publish(lake)
        return done

    def check(self) -> list[tuple[str, str, str]]:
        """Verify every live data file (present, size, SHA-256 recorded at write time, Parquet
        page checksums); returns (run_id, path, problem) for each damaged one."""
        from tracedb import catalog

        return catalog.open_lake(self.path).check()

    def migrate(self) -> list[str]:
        """Apply pending migrations; returns their names."""
        from tracedb import migrate

        return migrate.migrate_warehouse(self.path)

    def export_chrome(self, run_id: str, out: str | Path | IO, devices: list[str] | None = None) -> int:
        from tracedb.export import export_chrome

        return export_chrome(self.path, run_id, Path(out) if isinstance(out, str) else out, devices)
