"""`tracedb.Warehouse`: the library's front door, as `sqlite_utils.Database` is sqlite-utils'.

Every CLI command is a thin call to one method here, so whatever the command line can do,
a notebook or a nightly job can do in Python, returning Arrow tables (or pandas / polars
DataFrames when those are installed):

    import tracedb
    wh = tracedb.Warehouse("tracedb-warehouse")
    wh.ingest("runs/")
    wh.query("top_kernels", limit=10)                  # pyarrow.Table
    wh.query("top_kernels", output="pandas", limit=10)  # pandas.DataFrame
    wh.sql("select count(*) n from kernels where run_id = $r", r="resnet")
    wh.report(baseline=["day1"], candidate=["day2"]).has_regression

Errors are `tracedb.TracedbError` with a one-line message.

Imports are lazy (issue 12 item 6): `tracedb queries` must not load duckdb, pyarrow or the
lake, and `tracedb query` not the ingest path (measured in bench/bench_startup.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tracedb import query
    from tracedb.discover import RunSpec
    from tracedb.ingest import FileResult, IngestSummary, RunSummary
    from tracedb.report import Report

_RUNS_SQL = """
    WITH f AS (
        SELECT run_id, sum(rows_nodes) AS nodes, sum(rows_kernels) AS kernels,
               sum(rows_tensors) AS tensors, sum(rows_allocations) AS allocations,
               count(*) FILTER (WHERE status = 'error') AS failed_files
        FROM files GROUP BY run_id)
    SELECT r.run_id, r.ingested_at, len(r.source_files) AS files, r.formats,
           f.nodes, f.kernels, f.tensors, f.allocations, f.failed_files,
           r.model, r."commit", r.hardware, r.started_at
    FROM runs r LEFT JOIN f USING (run_id)
    ORDER BY coalesce(r.started_at, r.ingested_at), r.run_id"""


class Warehouse:
    """A tracedb warehouse: `path` (a folder, or an object-storage URL such as
    s3://bucket/prefix, see `tracedb.storage`), else $TRACEDB_WAREHOUSE, else ./tracedb-warehouse."""

    def __init__(self, path: str | Path | None = None):
        # A folder (Path), or an object-storage URL kept as a str: "s3://bucket/prefix".
        # = catalog.default_warehouse(), without importing duckdb for `tracedb queries`
        from tracedb.storage import location

        self.path = location(path)

    def __repr__(self) -> str:
        return f"Warehouse({str(self.path)!r})"

    # ---- writing -------------------------------------------------------------------

    def discover(self, *paths: str | Path, run_id: str | None = None,
                 exclude: tuple[str, ...] | list[str] = (), sniff: bool = False) -> list[RunSpec]:
        """The runs `ingest` would read from `paths` (files, skipped renderings, errors),
        without reading a trace or touching the warehouse: `tracedb ingest --dry-run`.
        sniff=True also reads each file's head, to skip the files no reader claims (a
        README, a log) as the ingest will."""
        from tracedb.discover import discover_runs, drop_unclaimed

        runs = discover_runs([Path(p) for p in paths], run_id, tuple(exclude))
        return drop_unclaimed(runs) if sniff else runs

    def ingest(self, *paths: str | Path, run_id: str | None = None, jobs: int = 1,
               exclude: tuple[str, ...] | list[str] = (), partial: bool = False,
               on_plan: Callable[[list[RunSpec]], None] | None = None,
               on_file: Callable[[FileResult], None] | None = None,
               on_run: Callable[[RunSummary], None] | None = None) -> IngestSummary:
        """Read runs folders, run folders or trace files into the warehouse (see the
        contract's `tracedb ingest`); each run lands whole. The callbacks report progress:
        the runs found, each file read, each run committed. Problems with single files are
        in the summary's `errors`; a run with a failing file keeps its previous version
        unless partial=True. A bad request raises TracedbError."""
        from tracedb.ingest import ingest

        return ingest([Path(p) for p in paths], self.path, run_id=run_id, jobs=jobs,
                      exclude=exclude, partial=partial, on_plan=on_plan, on_file=on_file, on_run=on_run)

    # ---- reading -------------------------------------------------------------------

    def connect(self, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with the views ready (close it when done). Not sandboxed:
        it is your own process's connection (`tracedb.query.sandbox(con, path)` locks it)."""
        from tracedb import catalog

        return catalog.connect(self.path, read_only=read_only)

    def queries(self) -> list[query.CannedQuery]:
        """The canned queries (`sql/*.sql`) with their titles and parameters."""
        from tracedb import query

        return query.list_queries()

    def query(self, name: str | query.CannedQuery, output: str = "arrow", allow_external: bool = False,
              runs: list[str] | None = None, **params: Any):
        """Run a canned query (name, .sql path or parsed query); parameters as keyword
        arguments (strings are converted to the parameter's type). `output`: arrow,
        pandas (nullable integer columns), polars, or rows (`tracedb.output.Rows` of plain
        Python values where the column types allow, else arrow: what `tracedb query`
        prints). `runs`: the data views show only these runs (as `sql`). Sandboxed like
        `sql` unless allow_external=True."""
        from tracedb import query

        return query.run_query(name, params, self.path, output=output, allow_external=allow_external, runs=runs)

    def sql(self, sql: str, output: str = "arrow", allow_external: bool = False,
            runs: list[str] | None = None, **params: Any):
        """Run ad-hoc SQL over the views; `$name` placeholders bound from keyword arguments.

        `runs=["r1", ...]`: the data views (nodes, kernels, tensors, ...; not runs, files,
        ingest_log) show only these runs' rows, and only their files are bound, so a
        question about a few runs costs the same in a warehouse of 10 or 10,000 runs
        (`wh.sql("SELECT count(*) FROM kernels", runs=["r1"])`).
        The SQL runs sandboxed: it reads only this warehouse's data and cannot write files,
        attach databases or read other files (`/etc/passwd`, URLs); allow_external=True
        lifts that for SQL you trust (e.g. joining a CSV of your own)."""
        from tracedb import query

        return query.run_query(query.parse(sql, "sql"), params, self.path, output=output,
                               allow_external=allow_external, runs=runs)

    def transpile(self, name: str | query.CannedQuery, dialect: str, params: dict[str, Any] | None = None) -> str:
        """A canned query's SQL for another engine (spark, trino, ...), header kept: with
        `params` (a dict, may be empty) every parameter is inlined as a literal, defaults too;
        without, each stays the engine's own placeholder."""
        from tracedb import query

        return query.transpile(name if isinstance(name, query.CannedQuery) else query.load(name), dialect, params)

    def runs(self, output: str = "arrow"):
        """One row per run: files, formats, rows per table, failed files, labels."""
        from tracedb import query

        return query.run_query(query.parse(_RUNS_SQL, "runs"), {}, self.path, output=output)

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

    def report(self, baseline: list[str] = (), candidate: list[str] = (), *, baseline_labels: list[str] = (),
               candidate_labels: list[str] = (), labels: list[str] = (), history: int | None = None,
               settings=None):
        """Regression report, candidate runs against baseline runs (tracedb.report.Report:
        `.findings`, `.has_regression`, `.render("markdown" | "html" | "json")`)."""
        from tracedb.report import build_report

        return build_report(self.path, list(baseline), list(candidate), baseline_labels=list(baseline_labels),
                            candidate_labels=list(candidate_labels), labels=list(labels), history=history,
                            settings=settings)

    def export_chrome(self, run_id: str, out: str | Path | IO, devices: list[str] | None = None) -> int:
        """Write a run as Chrome-trace JSON for Perfetto UI / chrome://tracing (`.gz` path
        compresses, or an open stream); returns the number of events written."""
        from tracedb.export import export_chrome

        return export_chrome(self.path, run_id, Path(out) if isinstance(out, str) else out, devices)

    @staticmethod
    def schema(view: str | None = None) -> dict[str, pa.Schema]:
        """The views' schemas from `tracedb.schema` (columns, types, `doc` metadata): all,
        or only `view`. Needs no warehouse."""
        from tracedb import schema
        from tracedb.errors import TracedbError

        if view is None:
            return dict(schema.VIEWS)
        if view not in schema.VIEWS:
            raise TracedbError(f"no view {view!r} (views: {', '.join(schema.VIEWS)})")
        return {view: schema.VIEWS[view]}
