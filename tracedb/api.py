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

import functools
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

from tracedb.errors import TracedbError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tracedb import query, sqllib
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

    def __init__(self, path: str | Path | None = None, limits: query.QueryLimits | None = None):
        from tracedb import storage

        # The location is normalised here, once, and its storage (a folder, or object
        # storage) is what every method hands down: the lake, the catalog, the query runner
        # and the ingest take it as it is. Opening it reads nothing (no duckdb, no fsspec
        # import for `tracedb queries`).
        self.storage = storage.open_storage(path)
        # Time, memory and temp-space limits of `query` / `sql` / `runs`
        # (tracedb.QueryLimits; None: no timeout, DuckDB's memory default).
        self.limits = limits

    @property
    def path(self) -> Path | str:
        """The warehouse: a folder (Path), or an object-storage URL (str, "s3://bucket/prefix")."""
        return self.storage.root

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

        return ingest([Path(p) for p in paths], self.storage, run_id=run_id, jobs=jobs,
                      exclude=exclude, partial=partial, on_plan=on_plan, on_file=on_file, on_run=on_run)

    # ---- reading -------------------------------------------------------------------

    def connect(self, read_only: bool = True) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with the views ready (close it when done). Not sandboxed:
        it is your own process's connection (`tracedb.query.sandbox(con, path)` locks it)."""
        from tracedb import catalog

        return catalog.connect(self.storage, read_only=read_only)

    def sqlalchemy_engine(self, **kwargs: Any):
        """A SQLAlchemy engine (duckdb-engine: `pip install duckdb-engine`) for pandas,
        notebooks and dashboard apps, whose every new connection sees the newest snapshot.

        `create_engine("duckdb:///.../catalog.duckdb")` does not: DuckDB keeps one database
        instance per path and process, and while any connection of the process (a pooled
        one) holds it, every new connection gets that instance, the snapshot it opened.
        Here each connection is `connect()`'s own in-memory DuckDB with the newest snapshot
        attached, and a pooled connection whose snapshot has since been replaced is
        dropped at checkout (a disconnect to SQLAlchemy, which opens a new one).
        kwargs go to `sqlalchemy.create_engine` (e.g. poolclass)."""
        import os

        import sqlalchemy
        from duckdb_engine import ConnectionWrapper

        folder = self.storage.local_path()  # on object storage the snapshot is a cache file
        local = folder is not None
        snapshot = folder / "catalog.duckdb" if local else None

        def stamp():
            try:
                st = os.stat(snapshot)
                return st.st_ino, st.st_mtime_ns
            except (OSError, TypeError):
                return None

        def connect():
            return ConnectionWrapper(self.connect())

        # a pool of separate connections (for ":memory:" duckdb-engine would pick one shared per
        # thread: a dashboard's open connection would then serve every later query too); on
        # object storage the snapshot is a cache file: no pooling, each connection opens it afresh
        kwargs.setdefault("poolclass", sqlalchemy.pool.QueuePool if local else sqlalchemy.pool.NullPool)
        engine = sqlalchemy.create_engine("duckdb:///:memory:", creator=connect, **kwargs)

        @sqlalchemy.event.listens_for(engine, "connect")
        def _opened(_dbapi_connection, record):
            record.info["tracedb_snapshot"] = stamp()

        @sqlalchemy.event.listens_for(engine, "checkout")
        def _checkout(_dbapi_connection, record, _proxy):
            if local and record.info.get("tracedb_snapshot") != stamp():
                raise sqlalchemy.exc.DisconnectionError("a newer tracedb snapshot was published")

        return engine

    def queries(self) -> list[sqllib.CannedQuery]:
        """The canned queries (`sql/*.sql`) with their titles and parameters."""
        from tracedb import sqllib

        return sqllib.list_queries()

    def query(self, name: str | sqllib.CannedQuery, output: str = "arrow", allow_external: bool = False,
              runs: list[str] | None = None, sink: Callable | None = None, **params: Any):
        """Run a canned query (name, .sql path or parsed query); parameters as keyword
        arguments (strings are converted to the parameter's type). `output`: arrow,
        pandas (nullable integer columns), polars, or rows (`tracedb.output.Rows` of plain
        Python values where the column types allow, else arrow: what `tracedb query`
        prints). `runs`: the data views show only these runs (as `sql`). Sandboxed like
        `sql` unless allow_external=True. `sink`: a callable handed the result a batch of
        at most 100,000 rows at a time instead (arrow or rows), e.g. `with
        tracedb.output.Writer("csv", Path("out.csv")) as w: wh.query(name, sink=w)`;
        returns the row count: a fleet-wide result of millions of rows then needs a
        batch's memory."""
        from tracedb import query

        return query.run_query(name, params, self.storage, output=output, allow_external=allow_external, runs=runs,
                               limits=self.limits, sink=sink)

    def sql(self, sql: str, output: str = "arrow", allow_external: bool = False,
            runs: list[str] | None = None, sink: Callable | None = None, **params: Any):
        """Run ad-hoc SQL over the views; `$name` placeholders bound from keyword arguments.

        `runs=["r1", ...]`: the data views (nodes, kernels, tensors, ...; not runs, files,
        ingest_log) show only these runs' rows, and only their files are bound, so a
        question about a few runs costs the same in a warehouse of 10 or 10,000 runs
        (`wh.sql("SELECT count(*) FROM kernels", runs=["r1"])`).
        The SQL runs sandboxed: it reads only this warehouse's data and cannot write files,
        attach databases or read other files (`/etc/passwd`, URLs); allow_external=True
        lifts that for SQL you trust (e.g. joining a CSV of your own).
        Limits: `Warehouse(path, limits=tracedb.QueryLimits(timeout_s=60, memory_limit="4GB",
        temp_limit="10GiB"))`; Ctrl-C (KeyboardInterrupt) stops a query within a second.
        `sink`: the result a batch at a time, as `query`."""
        from tracedb import query, sqllib

        return query.run_query(sqllib.parse(sql, "sql"), params, self.storage, output=output,
                               allow_external=allow_external, runs=runs, limits=self.limits, sink=sink)

    def transpile(self, name: str | sqllib.CannedQuery, dialect: str, params: dict[str, Any] | None = None) -> str:
        """A canned query's SQL for another engine (spark, trino, ...), header kept: with
        `params` (a dict, may be empty) every parameter is inlined as a literal, defaults too;
        without, each stays the engine's own placeholder."""
        from tracedb import dialects, sqllib

        return dialects.transpile(name if isinstance(name, sqllib.CannedQuery) else sqllib.load(name), dialect, params)

    def ddl(self, engine: str, location: str | None = None, schema: str = "tracedb", catalog: str = "delta") -> str:
        """The statements that define the lake's Delta tables and live-ingest views for
        `engine` (spark, trino, duckdb, ...): `tracedb ddl`. `location` is the lake's root
        as the engine sees it (default: the warehouse's URL or absolute path)."""
        from tracedb import ddl

        where = location or self.storage.home()
        return ddl.ddl(engine, where, schema, catalog)

    def runs(self, output: str = "arrow"):
        """One row per run: files, formats, rows per table, failed files, labels."""
        from tracedb import query, sqllib

        return query.run_query(sqllib.parse(_RUNS_SQL, "runs"), {}, self.storage, output=output, limits=self.limits)

    def rm(self, *run_ids: str) -> list[str]:
        """Delete runs (one Delta commit unpublishes them); returns the run ids removed."""
        from tracedb import catalog

        lake = catalog.open_lake(self.storage)
        with lake.lock():
            gone = lake.delete_runs(list(run_ids))
            catalog.publish(lake)
        return gone

    def vacuum(self, retention_hours: int = 168) -> list[str]:
        """Delete files no live table version references, older than the retention."""
        from tracedb import catalog

        lake = catalog.open_lake(self.storage)
        with lake.lock():
            removed = lake.vacuum(retention_hours)
            catalog.publish(lake)
        return removed

    def optimize(self) -> dict[str, int]:
        """Compact the lake's small files (the merges an ingest leaves: `Lake.ingest_compaction`);
        returns files compacted per table. The data tables' merges are written outside the
        commit lock, each committed under it (`Lake.optimize_merges`): ingests run meanwhile."""
        import time

        from tracedb import catalog, lake as lake_mod

        lake = catalog.open_lake(self.storage)
        tag = f"optimize-{int(time.time() * 1000)}"
        with self.storage.ingest_mark(lake_mod.INGESTS_DIR, tag):
            done = lake.optimize_merges(tag)
            with lake.lock():
                for table, n in lake.optimize().items():
                    done[table] = done.get(table, 0) + n
                catalog.publish(lake)
        return done

    def check(self) -> list[tuple[str, str, str]]:
        """Verify every live data file (present, size, SHA-256 recorded at write time, Parquet
        page checksums); returns (run_id, path, problem) for each damaged one."""
        from tracedb import catalog

        return catalog.open_lake(self.storage).check()

    def migrate(self) -> list[str]:
        """Apply pending migrations; returns their names."""
        from tracedb import migrate

        return migrate.migrate_warehouse(self.storage)

    def report(self, baseline: list[str] = (), candidate: list[str] = (), *, baseline_labels: list[str] = (),
               candidate_labels: list[str] = (), labels: list[str] = (), history: int | None = None,
               settings=None):
        """Regression report, candidate runs against baseline runs (tracedb.report.Report:
        `.findings`, `.has_regression`, `.render("markdown" | "html" | "json")`)."""
        from tracedb.report import build_report

        return build_report(self.storage, list(baseline), list(candidate), baseline_labels=list(baseline_labels),
                            candidate_labels=list(candidate_labels), labels=list(labels), history=history,
                            settings=settings)

    def accept(self, run_id: str, *, note: str, metrics: list[str] = (), by: str | None = None):
        """Accept the change that started at `run_id` (all metrics, or those `metrics` name:
        keys, kinds or globs): `report --history` then starts their baseline there.
        Returns the recorded `tracedb.report.acceptance.Acceptance`."""
        from tracedb import catalog
        from tracedb.report import acceptance

        lake = catalog.open_lake(self.storage)
        with lake.lock():
            acc = acceptance.accept(lake, run_id, list(metrics), note, by)
            catalog.publish(lake)
        return acc

    def revoke(self, target: str, *, note: str, by: str | None = None):
        """Withdraw the acceptance with id `target`, or every live one at run `target`;
        returns the acceptances withdrawn."""
        from tracedb import catalog
        from tracedb.report import acceptance

        lake = catalog.open_lake(self.storage)
        with lake.lock():
            gone = acceptance.revoke(lake, target, note, by)
            catalog.publish(lake)
        return gone

    def acceptances(self):
        """The live (not revoked) acceptances, oldest first."""
        from tracedb import catalog
        from tracedb.report import acceptance

        con = catalog.connect(self.storage)
        try:
            return acceptance.read(con)
        finally:
            con.close()

    def export_chrome(self, run_id: str, out: str | Path | IO, devices: list[str] | None = None) -> int:
        """Write a run as Kineto-shaped Chrome-trace JSON for Perfetto UI / chrome://tracing /
        HTA, which `ingest` reads back to the same rows (`.gz` path compresses, or an open
        stream); returns the number of events written."""
        from tracedb.export import export_chrome

        return export_chrome(self.storage, run_id, Path(out) if isinstance(out, str) else out, devices)

    def export_perfetto(self, run_id: str, out: str | Path | IO, devices: list[str] | None = None) -> int:
        """Write a run as a native Perfetto protobuf trace (TrackEvent: a track per GPU stream
        and host thread, launch -> kernel flows, memory counters, overlapping slices kept) to
        a path (`.gz` compresses) or a binary stream; returns the slices, instants and
        counter values written."""
        from tracedb.export_perfetto import export_perfetto

        return export_perfetto(self.storage, run_id, Path(out) if isinstance(out, str) else out, devices)

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


def _one_line_errors(method):
    """A Warehouse method whose object-storage set-up errors (missing credentials, a bad
    profile, an unreachable endpoint), raised by any layer below (s3fs, delta-rs, DuckDB's
    reads), become `tracedb.storage`'s one-line WarehouseError naming what to set."""
    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except TracedbError:
            raise
        except Exception as e:  # noqa: BLE001 - only the set-up errors are translated
            from tracedb.storage import object_store_error

            err = object_store_error(e)
            if err is None:
                raise
            raise err from e

    return wrapper


for _name in ("discover", "ingest", "connect", "query", "sql", "runs", "rm", "vacuum", "optimize", "check",
              "migrate", "report", "accept", "revoke", "acceptances", "export_chrome", "export_perfetto"):
    setattr(Warehouse, _name, _one_line_errors(getattr(Warehouse, _name)))
