"""The `tracedb` command: each command parses its arguments, calls one library function
and turns TracedbError into a one-line message and a non-zero exit."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from tracedb import catalog
from tracedb.errors import TracedbError

app = typer.Typer(
    help="tracedb: a columnar warehouse for ML profiler traces, queried with SQL.\n\n"
    "Example: tracedb ingest examples/runs && tracedb query top_kernels",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

WarehouseOpt = typer.Option(
    None, "--warehouse", "-w", envvar="TRACEDB_WAREHOUSE",
    help="Warehouse folder [default: $TRACEDB_WAREHOUSE, else ./tracedb-warehouse]",
)


def _warehouse(w: Optional[Path]) -> Path:
    return w or catalog.default_warehouse()


def _fail(e: Exception, code: int = 2) -> None:
    typer.echo(f"tracedb: error: {e}", err=True)
    raise typer.Exit(code)


@app.command()
def ingest(
    paths: List[Path] = typer.Argument(..., help="Runs folder(s), run folder (with --run-id) or trace file(s)"),
    warehouse: Optional[Path] = WarehouseOpt,
    run_id: Optional[str] = typer.Option(None, "--run-id", help="Run id for a single file or folder"),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Parallel reader processes"),
    exclude: List[str] = typer.Option([], "--exclude", "-x", help="Skip files matching this glob (name or relative path), e.g. '*.md'; repeatable"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only errors"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print a line per file as it lands"),
    partial: bool = typer.Option(False, "--partial", help="Land a run even when some of its files fail (marked status=partial); "
                                 "by default such a run keeps its previous complete version"),
):
    """Ingest traces: each subfolder of a runs folder is one run; formats are sniffed from content.

    Example: tracedb ingest examples/runs --warehouse wh --jobs 2 --exclude '*.md'
    """
    from tracedb.ingest import ingest as do_ingest

    def on_file(f):
        if f.error:
            typer.echo(f"error: {f.path}: {f.error}", err=True)
        elif warnings := getattr(f, "warnings", None) or f.metadata.get("warnings"):
            from tracedb.validate import describe

            typer.echo(f"warning: {f.path}: {describe(warnings)}", err=True)
        elif verbose:
            rows = ", ".join(f"{n} {t}" for t, n in f.rows.items() if n)
            typer.echo(f"  {f.path} [{f.format}]: {rows} ({f.seconds:.2f}s)", err=True)

    def on_run(r):
        if quiet:
            return
        rows = ", ".join(f"{n} {t}" for t, n in r.rows.items() if n)
        ok = sum(1 for f in r.files if f.ok)
        typer.echo(f"{r.run_id}: {ok}/{len(r.files)} files, {rows or 'no rows'} ({r.seconds:.2f}s)")

    try:
        summary = do_ingest(paths, _warehouse(warehouse), run_id=run_id, jobs=jobs, exclude=exclude,
                            on_run=on_run, on_file=on_file, partial=partial)
    except TracedbError as e:
        _fail(e)
    for run in summary.runs:  # file errors were printed as they happened
        if run.run_error:
            typer.echo(f"error: {run.run_error[0]}: {run.run_error[1]}", err=True)
        if not run.replaced and any(f.ok for f in run.files):
            typer.echo(f"{run.run_id}: not replaced: some of its files failed, so it keeps its previous complete "
                       "version (if any); --partial lands what is readable", err=True)
    if not summary.ok:
        typer.echo(f"{len(summary.errors)} file(s) failed; see `tracedb query - <<< \"select * from files where status='error'\"`", err=True)
        raise typer.Exit(1)


@app.command()
def query(
    sql: str = typer.Argument(..., help="Canned query name (see `tracedb queries`), path to a .sql file, or - for stdin"),
    param: List[str] = typer.Option([], "--param", "-p", help="name=value, repeatable"),
    fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json | parquet"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write to FILE instead of stdout"),
    dialect: Optional[str] = typer.Option(None, "--dialect", help="Print the SQL transpiled for spark, trino, postgres, bigquery, snowflake, ... instead of running it; --param values (and defaults) are inlined as literals, else parameters stay the engine's placeholders"),
    inline: bool = typer.Option(False, "--inline", help="With --dialect: inline the defaults even when no --param is given"),
    allow_external: bool = typer.Option(False, "--allow-external", help="Lift the sandbox: let the SQL read other files and URLs, write files (COPY), attach databases"),
    warehouse: Optional[Path] = WarehouseOpt,
):
    """Run a canned or ad-hoc SQL query over the warehouse views (sandboxed: reads only the warehouse's data).

    Example: tracedb query top_kernels --param run_id=tf_lstm_stepstats --format csv
    """
    from tracedb import output as out
    from tracedb import query as q

    try:
        canned = q.load(sql)
        params = {}
        for item in param:
            if "=" not in item:
                raise TracedbError(f"--param {item!r}: expected name=value")
            k, v = item.split("=", 1)
            params[k.strip()] = v
        if dialect:
            typer.echo(q.transpile(canned, dialect, params if params or inline else None), nl=False)
            return
        table = q.run_query(canned, params, _warehouse(warehouse), allow_external=allow_external)
        out.write(table, fmt, output)
    except TracedbError as e:
        _fail(e)


@app.command()
def queries():
    """List the canned queries with their parameters.

    Example: tracedb queries
    """
    from tracedb import query as q

    for cq in q.list_queries():
        typer.echo(f"{cq.name}: {cq.title}")
        if cq.description:
            typer.echo(f"    {cq.description}")
        for p in cq.params:
            default = "required" if p.required else f"default {p.default!r}" if p.default is not None else "default NULL"
            typer.echo(f"    --param {p.name}=<{p.type_text}>  {p.description} ({default})")


@app.command()
def formats():
    """List the trace formats tracedb detects.

    Example: tracedb formats
    """
    from tracedb.formats import all_formats

    for mod in all_formats():
        typer.echo(f"{mod.NAME}: {mod.DESCRIPTION}")


@app.command()
def export(
    run: str = typer.Option(..., "--run", help="Run id to export"),
    device: List[str] = typer.Option([], "--device", help="Only these devices (GPU:0, CPU:0); repeatable"),
    fmt: str = typer.Option("chrome", "--format", "-f", help="chrome (Chrome-trace JSON for Perfetto UI / chrome://tracing)"),
    output: Path = typer.Option(..., "--output", "-o", help="FILE (.json or .json.gz), or - for stdout"),
    warehouse: Optional[Path] = WarehouseOpt,
):
    """Write an ingested run, whatever its source format, as a trace a viewer opens.

    Example: tracedb export --run resnet50 --format chrome -o resnet50.json.gz  (then open it in ui.perfetto.dev)
    """
    from tracedb.export import export_chrome

    try:
        if fmt != "chrome":
            raise TracedbError(f"unknown export format {fmt!r} (supported: chrome)")
        target = sys.stdout if str(output) == "-" else output
        n = export_chrome(_warehouse(warehouse), run, target, device or None)
    except TracedbError as e:
        _fail(e)
    if str(output) != "-":
        typer.echo(f"wrote {n} events to {output}", err=True)


@app.command()
def runs(warehouse: Optional[Path] = WarehouseOpt,
         fmt: str = typer.Option("table", "--format", "-f", help="table | csv | json")):
    """List the runs in the warehouse: files, formats, rows per table, labels.

    Example: tracedb runs --format csv
    """
    from tracedb import output
    from tracedb.query import parse, run_query

    sql = """
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
    try:
        output.write(run_query(parse(sql, "runs"), {}, _warehouse(warehouse)), fmt)
    except TracedbError as e:
        _fail(e)


@app.command("rm")
def remove(run: List[str] = typer.Argument(..., help="Run id(s) to delete"),
           warehouse: Optional[Path] = WarehouseOpt):
    """Delete runs: unpublished in one Delta commit, their files removed from the log (the
    ingest log keeps their history; `vacuum` deletes the files after the retention).

    Example: tracedb rm nightly-2026-10-01 nightly-2026-10-02
    """
    from tracedb.api import Warehouse

    try:
        gone = Warehouse(_warehouse(warehouse)).rm(*run)
    except TracedbError as e:
        _fail(e)
    typer.echo(f"removed {len(gone)} run(s): {', '.join(gone)}")


@app.command()
def vacuum(warehouse: Optional[Path] = WarehouseOpt,
           retention_hours: int = typer.Option(168, "--retention-hours", min=0,
                                               help="Keep unreferenced files younger than this, for open snapshots and running ingests")):
    """Delete files that no live table version references and that are older than the retention
    (superseded runs, deleted runs, files of crashed ingests).

    Example: tracedb vacuum --warehouse /data/tracedb --retention-hours 24
    """
    from tracedb.api import Warehouse

    try:
        removed = Warehouse(_warehouse(warehouse)).vacuum(retention_hours=retention_hours)
    except TracedbError as e:
        _fail(e)
    typer.echo(f"removed {len(removed)} unreferenced file(s)")


@app.command()
def optimize(warehouse: Optional[Path] = WarehouseOpt):
    """Compact small files: each run and device partition into as few files as possible (Delta optimize).

    Example: tracedb optimize --warehouse /data/tracedb && tracedb vacuum --retention-hours 0
    """
    from tracedb.api import Warehouse

    try:
        done = Warehouse(_warehouse(warehouse)).optimize()
    except TracedbError as e:
        _fail(e)
    typer.echo("compacted: " + ", ".join(f"{t} {n} file(s)" for t, n in done.items() if n) if any(done.values())
               else "nothing to compact")


@app.command()
def check(warehouse: Optional[Path] = WarehouseOpt):
    """Verify the warehouse: every file the lake lists is present, with the size and SHA-256
    recorded when it was written and valid Parquet page checksums. Exit 1 names each damaged run.

    Example: tracedb check --warehouse /data/tracedb
    """
    from tracedb.api import Warehouse

    try:
        problems = Warehouse(_warehouse(warehouse)).check()
    except TracedbError as e:
        _fail(e)
    if not problems:
        typer.echo("ok: every live data file is present and intact")
        return
    for run_id, path, problem in problems:
        typer.echo(f"damaged: run {run_id}: {path}: {problem}", err=True)
    runs = sorted({r for r, _, _ in problems})
    typer.echo(f"{len(runs)} damaged run(s): {', '.join(runs)}. Repair: re-ingest each from its source "
               f"(`tracedb ingest RUN_FOLDER --run-id RUN`), or drop it (`tracedb rm RUN`)", err=True)
    raise typer.Exit(1)


@app.command()
def migrate(warehouse: Optional[Path] = WarehouseOpt):
    """Bring a warehouse made by an older tracedb up to the current schema (schema 1 is converted to Delta Lake in place).

    Example: tracedb migrate --warehouse /data/tracedb
    """
    from tracedb.api import Warehouse

    try:
        done = Warehouse(_warehouse(warehouse)).migrate()
    except TracedbError as e:
        _fail(e)
    typer.echo("applied: " + ", ".join(done) if done else "warehouse is up to date")


from tracedb.report import report_command  # noqa: E402  (a library module with its typer command)

app.command("report")(report_command)


@app.command()
def ddl(
    engine: str = typer.Option(..., "--engine", "-e", help="spark | databricks | trino | duckdb"),
    location: Optional[str] = typer.Option(None, "--location", help="The lake's root as the engine sees it, e.g. s3://bucket/prefix [default: the warehouse's absolute path]"),
    schema_name: str = typer.Option("tracedb", "--schema", help="Schema of the views; the Delta tables go in <schema>_lake"),
    catalog_name: str = typer.Option("delta", "--catalog", help="Trino catalog of the Delta Lake connector"),
    warehouse: Optional[Path] = WarehouseOpt,
):
    """Print the statements that define the lake's Delta tables and live-ingest views for an engine.

    Example: tracedb ddl --engine spark --location s3://traces/wh > lake.sql
    """
    from tracedb import ddl as d

    try:
        where = location or _warehouse(warehouse).resolve().as_posix()
        typer.echo(d.ddl(engine, where, schema_name, catalog_name), nl=False)
    except TracedbError as e:
        _fail(e)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
