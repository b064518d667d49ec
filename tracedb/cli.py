"""The `tracedb` command. Each command parses its arguments and makes one call to a
`tracedb.Warehouse` method; `@_errors` turns a TracedbError into `tracedb: error: ...`
on stderr and exit 2 (exit 1 is kept for "ran, but found problems": failed files, a
regression). Help is plain text (`tracedb.clihelp`) with an example per command."""

import functools
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from tracedb._version import __version__
from tracedb.clihelp import PlainCommand, PlainGroup
from tracedb.errors import TracedbError

app = typer.Typer(
    cls=PlainGroup,
    help="tracedb: a columnar warehouse for ML profiler traces, queried with SQL.\n\n"
    "Example: tracedb ingest examples/runs && tracedb query top_kernels",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# The one --warehouse option of every command.
WarehouseOpt = typer.Option(
    None, "--warehouse", "-w", envvar="TRACEDB_WAREHOUSE", metavar="DIR|URL", show_default=False,
    help="Warehouse folder or object-storage URL (s3://bucket/prefix) [default: $TRACEDB_WAREHOUSE, else ./tracedb-warehouse]",
)


def _wh(path: Optional[str]):
    from tracedb.api import Warehouse

    return Warehouse(path)


def _errors(fn):
    """Run a command; a TracedbError becomes a one-line message and exit 2 (an object
    store's set-up error is one already: `tracedb.Warehouse` translates it), Ctrl-C
    (KeyboardInterrupt) the line `tracedb: interrupted` and exit 130, as a shell reports
    SIGINT. The system refusing (OSError: a full disk, a permission) is a one-line message
    and exit 2; a closed stdout pipe (`tracedb query ... | head`) exits 1 without a word."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TracedbError as e:
            typer.echo(f"tracedb: error: {e}", err=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            typer.echo("tracedb: interrupted", err=True)
            raise typer.Exit(130) from None
        except BrokenPipeError:  # the reader of stdout left (`| head`): stop quietly
            _stdout_to_devnull()
            raise typer.Exit(1) from None
        except OSError as e:  # the system refused: a full disk, a permission, a lost mount
            _stdout_to_devnull()
            where = f": {e.filename}" if e.filename else ""
            typer.echo(f"tracedb: error: {e.strerror or e}{where}", err=True)
            raise typer.Exit(2) from None

    return wrapper


def _stdout_to_devnull() -> None:
    """Point stdout at /dev/null, so that the exit's flush of what is still buffered for
    a closed pipe or a full disk fails no second time (the Python docs' advice for
    SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout (CliRunner): nothing to flush
        pass


def command(*args, **kwargs):
    """`app.command` with plain help and the error decorator."""

    def register(fn):
        return app.command(*args, cls=PlainCommand, **kwargs)(_errors(fn))

    return register


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tracedb {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit"),
):
    """tracedb: a columnar warehouse for ML profiler traces, queried with SQL.

    Example: tracedb ingest examples/runs && tracedb query top_kernels
    """


@command()
def ingest(
    paths: List[Path] = typer.Argument(..., metavar="PATH...", help="Runs folder(s), run folder (with --run-id) or trace file(s)"),
    warehouse: Optional[str] = WarehouseOpt,
    run_id: Optional[str] = typer.Option(None, "--run-id", metavar="ID", help="Run id for a single file or folder"),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", metavar="N", show_default=False,
                                       help="Parallel reader processes [default: the number of cores]"),
    exclude: List[str] = typer.Option([], "--exclude", "-x", metavar="GLOB", show_default=False,
                                      help="Skip files matching this glob (name or a trailing part of the path), e.g. '*.md'; repeatable"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only print the runs and files found (and what is skipped: renderings, files that are no trace); read nothing but each file's head"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only errors (no progress, no summary)"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print a line per file as it lands"),
    partial: bool = typer.Option(False, "--partial", help="Land a run even when some of its files fail (marked status=partial); "
                                 "by default such a run keeps its previous complete version"),
):
    """Ingest traces: every folder that directly holds trace files is a run (id = its path
    below PATH); XProf sessions are runs, or part of the run folder (run.json) around their
    log dir; formats are sniffed from content, and a file no reader claims (a
    README, a log) is skipped with a warning. Shows a progress bar on a terminal, a line
    per run otherwise, then a summary. Exit 1 when a file failed.

    Example: tracedb ingest runs/ --warehouse wh --jobs 4 --exclude '*.md'
    Example: tracedb ingest logdir/ --dry-run
    """
    if jobs is None:  # the cores this process may use
        from tracedb import workers

        jobs = workers.cores()
    if jobs > 1 and not dry_run and (len(paths) > 1 or paths[0].is_dir()):  # likely several files
        from tracedb import workers

        workers.ForkPoint.prepare()  # the workers' imports, before any thread: they fork from here
    if not dry_run:
        from tracedb import workers

        workers.arrow_without_pandas()  # never needs pandas or numpy: ~0.3-0.5 s less CPU
        workers.preload_forkserver()  # workers forked from the forkserver start with the readers imported
    from tracedb.progress import IngestReporter, found_lines

    wh = _wh(warehouse)
    if dry_run:
        for line in found_lines(wh.discover(*paths, run_id=run_id, exclude=exclude, sniff=True)):
            typer.echo(line)
        return
    rep = IngestReporter(quiet=quiet, verbose=verbose)
    try:
        summary = wh.ingest(*paths, run_id=run_id, jobs=jobs, exclude=exclude, partial=partial,
                            on_plan=rep.on_plan, on_file=rep.on_file, on_run=rep.on_run)
    finally:
        if rep.progress:
            rep.progress.stop()
    rep.finish(summary)
    for run in summary.runs:
        if not run.replaced and any(f.ok for f in run.files):
            typer.echo(f"{run.run_id}: not replaced: some of its files failed, so it keeps its previous complete "
                       "version (if any); --partial lands what is readable", err=True)
    if summary.compaction_error:
        typer.echo(f"warning: {summary.compaction_error}", err=True)
    if summary.compaction_hint and not quiet:
        typer.echo(f"note: {summary.compaction_hint}", err=True)
    if not summary.ok:
        typer.echo(f"{len(summary.errors)} error(s); see `tracedb query - <<< \"select * from files where status='error'\"`", err=True)
        raise typer.Exit(1)


@command()
def query(
    sql: str = typer.Argument(..., metavar="QUERY", help="Canned query name (see `tracedb queries`), path to a .sql file, the SQL itself (\"SELECT ...\"), or - for stdin"),
    param: List[str] = typer.Option([], "--param", "-p", metavar="NAME=VALUE", show_default=False, help="Query parameter; repeatable"),
    fmt: str = typer.Option("table", "--format", "-f", metavar="FORMAT", help="table | csv | json | ndjson | parquet"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="FILE", help="Write to FILE instead of stdout"),
    safe_csv: bool = typer.Option(False, "--safe-csv", help="CSV for spreadsheets: a text cell starting with = + - @ (a formula to Excel, LibreOffice, Sheets) gets a leading ' and shows as text"),
    dialect: Optional[str] = typer.Option(None, "--dialect", metavar="DIALECT", help="Print the SQL transpiled for spark, trino, postgres, bigquery, snowflake, ... instead of running it; --param values (and defaults) are inlined as literals, else parameters stay the engine's placeholders"),
    inline: bool = typer.Option(False, "--inline", help="With --dialect: inline the defaults even when no --param is given"),
    allow_external: bool = typer.Option(False, "--allow-external", help="Lift the sandbox: let the SQL read other files and URLs, write files (COPY), attach databases"),
    run: List[str] = typer.Option([], "--run", "-r", metavar="RUN_ID", show_default=False, help="Only this run's rows in the data views (nodes, kernels, ...), its files alone read; repeatable"),
    # Defaults: a command should neither hang for hours nor take the machine's memory or
    # disk from other processes (README, "Time, memory and disk limits").
    timeout: float = typer.Option(3600, "--timeout", min=0, metavar="SECONDS", envvar="TRACEDB_QUERY_TIMEOUT",
                                  help="Stop the query after this long (0: no limit; Ctrl-C stops it at once)"),
    memory_limit: str = typer.Option("50%", "--memory-limit", metavar="SIZE", envvar="TRACEDB_QUERY_MEMORY_LIMIT",
                                     help="DuckDB's memory for the query: a size (4GB, 512MiB) or a share of the RAM (50%)"),
    temp_limit: str = typer.Option("10GiB", "--temp-limit", metavar="SIZE", envvar="TRACEDB_QUERY_TEMP_LIMIT",
                                   help="At most this much spilled to disk, in a private folder under $TMPDIR (never the working folder)"),
    warehouse: Optional[str] = WarehouseOpt,
):
    """Run a canned or ad-hoc SQL query over the warehouse views (sandboxed: reads only the warehouse's data).

    Example: tracedb query top_kernels --param run_id=resnet50 --format csv
    Example: tracedb query "select run_id, count(*) from kernels group by all" --format csv
    Example: echo "select count(*) from kernels" | tracedb query - --format ndjson
    Example: echo "select name, count(*) from kernels group by all" | tracedb query - --run resnet50
    """
    from tracedb import output as out
    import tracedb
    from tracedb import sqllib

    canned = sqllib.load(sql)
    params = {}
    for item in param:
        if "=" not in item:
            raise TracedbError(f"--param {item!r}: expected name=value")
        k, v = item.split("=", 1)
        params[k.strip()] = v
    if fmt not in out.FORMATS:  # before running anything
        raise TracedbError(f"unknown format {fmt!r} (one of: {', '.join(out.FORMATS)})")
    wh = _wh(warehouse)
    if dialect:
        typer.echo(wh.transpile(canned, dialect, params if params or inline else None), nl=False)
        return
    wh.limits = tracedb.QueryLimits(timeout_s=timeout or None, memory_limit=memory_limit, temp_limit=temp_limit)
    # Text formats print DuckDB's own Python values where they print the same (no pyarrow
    # import: ~110 ms of start-up, issue 12 item 6); Parquet needs Arrow. Every format but
    # the text table (which sizes its columns from every row) is written a batch at a
    # time, so a result of millions of rows needs the memory of one batch.
    kind = "arrow" if fmt == "parquet" else "rows"
    if fmt not in out.STREAMED:
        out.write(wh.query(canned, output=kind, allow_external=allow_external, runs=run or None, **params),
                  fmt, output, safe_csv=safe_csv)
        return
    with out.Writer(fmt, output, safe_csv=safe_csv) as writer:
        wh.query(canned, output=kind, allow_external=allow_external, runs=run or None, sink=writer, **params)


@command()
def queries():
    """List the canned queries with their parameters.

    Example: tracedb queries
    """
    for cq in _wh(None).queries():
        typer.echo(f"{cq.name}: {cq.title}")
        if cq.description:
            typer.echo(f"    {cq.description}")
        for p in cq.params:
            default = "required" if p.required else f"default {p.default}" if p.default is not None else "default NULL"
            if p.choices:
                kind = "one of " + ", ".join(p.choices)
            elif p.minimum is not None:
                kind = f"{p.type} {'>' if p.exclusive else '>='} {p.minimum:g}"
            else:
                kind = p.type
            typer.echo(f"    --param {p.name}=VALUE  {p.description} ({kind}; {default})")


@command()
def formats():
    """List the trace formats tracedb detects.

    Example: tracedb formats
    """
    from tracedb.formats import all_formats

    for mod in all_formats():
        typer.echo(f"{mod.NAME}: {mod.DESCRIPTION}")


@command()
def schema(
    view: Optional[str] = typer.Argument(None, metavar="VIEW", help="Only this view (runs, nodes, kernels, tensors, allocations, files, ingest_log)"),
    fmt: str = typer.Option("table", "--format", "-f", metavar="FORMAT", help="table | csv | json | ndjson"),
):
    """Print the views, their columns, types, units and meanings (from tracedb.schema).

    Example: tracedb schema kernels
    """
    import pyarrow as pa

    from tracedb import output as out
    from tracedb import schema as sch

    rows = []
    for name, s in _wh(None).schema(view).items():
        for f in s:
            rows.append({"view": name, "column": f.name, "type": sch.duckdb_type(f.type), "unit": sch.unit(f),
                         "description": (f.metadata or {}).get(b"doc", b"").decode()})
    if fmt == "parquet":
        raise TracedbError("--format parquet is for query results; use table, csv, json or ndjson")
    out.write(pa.Table.from_pylist(rows), fmt)


@command()
def export(
    run: str = typer.Option(..., "--run", metavar="ID", help="Run id to export"),
    device: List[str] = typer.Option([], "--device", metavar="DEVICE", show_default=False, help="Only these devices (GPU:0, CPU:0); repeatable"),
    fmt: str = typer.Option("chrome", "--format", "-f", metavar="FORMAT",
                            help="chrome (Kineto-shaped Chrome-trace JSON: Perfetto UI, chrome://tracing, HTA; "
                                 "re-ingests to the same rows) | perfetto (native Perfetto protobuf trace)"),
    output: Path = typer.Option(..., "--output", "-o", metavar="FILE",
                                help="FILE (.json / .pftrace, .gz to compress), or - for stdout"),
    warehouse: Optional[str] = WarehouseOpt,
):
    """Write an ingested run, whatever its source format, as a trace a viewer opens: GPU
    streams, host threads with ops and the runtime calls, launch->kernel arrows, memory as
    counter tracks.

    Example: tracedb export --run resnet50 -o resnet50.json.gz  (then open it in ui.perfetto.dev)
    """
    exporters = {"chrome": "export_chrome", "perfetto": "export_perfetto"}
    if fmt not in exporters:
        raise TracedbError(f"unknown export format {fmt!r} (supported: {', '.join(exporters)})")
    target = sys.stdout if str(output) == "-" else output
    n = getattr(_wh(warehouse), exporters[fmt])(run, target, device or None)
    if str(output) != "-":
        typer.echo(f"wrote {n} events to {output}", err=True)


@command()
def runs(warehouse: Optional[str] = WarehouseOpt,
         fmt: str = typer.Option("table", "--format", "-f", metavar="FORMAT", help="table | csv | json | ndjson")):
    """List the runs in the warehouse: files, formats, rows per table, labels.

    Example: tracedb runs --format csv
    """
    from tracedb import output

    table = _wh(warehouse).runs()
    output.write(output.runs_for_terminal(table) if fmt == "table" else table, fmt)


def _lean() -> None:
    """For the lake's maintenance commands (rm, vacuum, optimize, check), which never hand
    Arrow data to pandas: pyarrow's first `pa.table()` of the log imported pandas (1.4 s of
    an `rm`'s 6.7 at load 12, 5,000 runs; ~1 s of CPU a `check`)."""
    from tracedb import workers

    workers.arrow_without_pandas()


@command("rm")
def remove(run: List[str] = typer.Argument(..., metavar="RUN...", help="Run id(s) to delete"),
           warehouse: Optional[str] = WarehouseOpt):
    """Delete runs: unpublished in one Delta commit, their files removed from the log (the
    ingest log keeps their history; `vacuum` deletes the files after the retention).

    Example: tracedb rm nightly-2026-10-01 nightly-2026-10-02
    """
    _lean()
    gone = _wh(warehouse).rm(*run)
    typer.echo(f"removed {len(gone)} run(s): {', '.join(gone)}")


@command()
def vacuum(warehouse: Optional[str] = WarehouseOpt,
           retention_hours: int = typer.Option(168, "--retention-hours", min=0, metavar="HOURS",
                                               help="Keep unreferenced files younger than this, for open snapshots and running ingests")):
    """Delete files that no live table version references and that are older than the retention
    (superseded runs, deleted runs, files of crashed ingests).

    Example: tracedb vacuum --warehouse /data/tracedb --retention-hours 24
    """
    _lean()
    removed = _wh(warehouse).vacuum(retention_hours=retention_hours)
    typer.echo(f"removed {len(removed)} unreferenced file(s)")


@command()
def optimize(warehouse: Optional[str] = WarehouseOpt):
    """Compact the lake's files: the merges an ingest leaves (larger than its own rows) and every
    small file, in run order, dropping rows no run's live version holds. Run it after the
    nightly ingests (or weekly); ingests may run meanwhile.

    Example: tracedb optimize --warehouse /data/tracedb && tracedb vacuum --retention-hours 0
    """
    _lean()
    done = _wh(warehouse).optimize()
    typer.echo("compacted: " + ", ".join(f"{t} {n} file(s)" for t, n in done.items() if n) if any(done.values())
               else "nothing to compact")


@command()
def check(warehouse: Optional[str] = WarehouseOpt):
    """Verify the warehouse: every file the lake lists is present, with the size and SHA-256
    recorded when it was written (valid Parquet page checksums where no SHA-256 was recorded).
    Exit 1 names each damaged run.

    Example: tracedb check --warehouse /data/tracedb
    """
    _lean()
    problems = _wh(warehouse).check()
    if not problems:
        typer.echo("ok: every live data file is present and intact")
        return
    for run_id, path, problem in problems:
        typer.echo(f"damaged: run {run_id}: {path}: {problem}", err=True)
    runs = sorted({r for r, _, _ in problems})
    typer.echo(f"{len(runs)} damaged run(s): {', '.join(runs)}. Repair: re-ingest each from its source "
               f"(`tracedb ingest RUN_FOLDER --run-id RUN`), or drop it (`tracedb rm RUN`)", err=True)
    raise typer.Exit(1)


@command()
def migrate(warehouse: Optional[str] = WarehouseOpt):
    """Bring a warehouse made by an older tracedb up to the current schema (schema 1 is converted to Delta Lake in place).

    Example: tracedb migrate --warehouse /data/tracedb
    """
    done = _wh(warehouse).migrate()
    typer.echo("applied: " + ", ".join(done) if done else "warehouse is up to date")


@command()
def report(
    baseline: List[str] = typer.Option([], "--baseline", "-b", help="Baseline run id (repeatable)"),
    candidate: List[str] = typer.Option([], "--candidate", "-c", help="Candidate run id (repeatable)"),
    baseline_label: List[str] = typer.Option([], "--baseline-label", help="Baseline runs have this run.json label, KEY=VALUE (repeatable, all must match)"),
    candidate_label: List[str] = typer.Option([], "--candidate-label", help="Candidate runs have this label, KEY=VALUE (repeatable)"),
    label: List[str] = typer.Option([], "--label", help="Both sides have this label, KEY=VALUE, e.g. model=resnet50 (repeatable)"),
    history: Optional[int] = typer.Option(None, "--history", help="Baseline = the N runs before the candidate (by started_at, else ingested_at); candidate defaults to the newest run; change points over those runs are reported"),
    fmt: str = typer.Option("markdown", "--format", "-f", help="markdown | html | json"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report to FILE (the headline still goes to stdout)"),
    confidence: Optional[float] = typer.Option(None, "--confidence", show_default=False, help="Confidence level of the headline and device metrics: a change must lie outside the baseline noise at this level [default: 0.99]"),
    fdr: Optional[float] = typer.Option(None, "--fdr", show_default=False, help="False-discovery rate of the per-kernel, per-op and per-rank metrics, tested together (Benjamini-Hochberg) [default: 0.01]"),
    test: Optional[str] = typer.Option(None, "--test", metavar="t|mann-whitney", show_default=False, help="The test: Student's t on run means and steps, or Mann-Whitney U on the per-step samples [default: t]"),
    min_effect_pct: Optional[float] = typer.Option(None, "--min-effect-pct", show_default=False, help="Times: minimum practical change, in % of the device step time [default: 0.5]"),
    min_effect_ns: Optional[int] = typer.Option(None, "--min-effect-ns", show_default=False, help="Times: ... and at least this many ns per step [default: 5000]"),
    min_memory_pct: Optional[float] = typer.Option(None, "--min-memory-pct", show_default=False, help="Sizes (memory, copy bytes): minimum practical change in % [default: 1]"),
    min_bytes: Optional[int] = typer.Option(None, "--min-bytes", show_default=False, help="Sizes: ... and at least this many bytes [default: 16 MiB]"),
    min_kernel_share: Optional[float] = typer.Option(None, "--min-kernel-share", show_default=False, help="New/vanished kernels are named above this % of GPU kernel time [default: 0.1]"),
    top: Optional[int] = typer.Option(None, "--top", show_default=False, help="At most this many kernels per device gate (the largest) [default: 20]"),
    top_share: Optional[float] = typer.Option(None, "--top-share", show_default=False, help="The gating kernels make up this % of GPU kernel time [default: 90]"),
    gate_host: bool = typer.Option(False, "--gate-host", help="CPU-bound jobs: CPU op times, host step time and GPU idle gate too"),
    lookback: Optional[int] = typer.Option(None, "--lookback", metavar="N", show_default=False, help="With --history: runs before those searched for the baseline's regime, so a change nobody accepted stays red after it fills the window [default: 30]"),
    config: Optional[Path] = typer.Option(None, "--config", metavar="FILE", show_default=False, help="Settings file: [tool.tracedb.report] of a pyproject.toml, or a tracedb.toml [default: ./tracedb.toml, else ./pyproject.toml when it has that table]; options given here win"),
    warehouse: Optional[str] = WarehouseOpt,
):
    """Regression report: candidate runs against baseline runs, with the noise measured; exit 1 on a regression.

    Example: tracedb report --label model=resnet50 --history 7 --format html -o report.html
    """
    from tracedb.report import FORMATS, Settings
    from tracedb.report import config as cfg

    if fmt not in FORMATS:
        raise TracedbError(f"unknown report format {fmt!r} (one of: {', '.join(FORMATS)})")
    if config is not None and not config.is_file():
        raise TracedbError(f"--config {config}: no such file")
    path = config or cfg.find(Path.cwd())
    settings = cfg.load(path, check=False) if path else Settings()
    given = {"confidence": confidence, "fdr": fdr, "test": test, "min_effect_pct": min_effect_pct,
             "min_effect_ns": min_effect_ns, "min_memory_pct": min_memory_pct, "min_bytes": min_bytes,
             "min_kernel_share": min_kernel_share, "top": top, "top_share": top_share,
             "gate_host": gate_host or None, "lookback": lookback}
    for key, value in given.items():
        if value is not None:
            setattr(settings, key, value)
    rep = _wh(warehouse).report(baseline, candidate, baseline_labels=baseline_label,
                                candidate_labels=candidate_label, labels=label, history=history, settings=settings)
    text = rep.render(fmt)
    if output:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as e:
            raise TracedbError(f"cannot write {output}: {e.strerror or e}") from e
        typer.echo(rep.headline())
    else:
        typer.echo(text, nl=False)
    raise typer.Exit(1 if rep.has_regression else 0)


@command()
def accept(
    run: str = typer.Argument(..., metavar="RUN", help="First run of the change to accept"),
    note: str = typer.Option(..., "--note", help="Why the change is accepted (required)"),
    metric: List[str] = typer.Option([], "--metric", "-m", help="Only this metric: a key (GPU:0/gpu_kernel_time), a kind (gpu_kernel_time) or a glob (repeatable; default: every metric)"),
    by: Optional[str] = typer.Option(None, "--by", help="Who accepts it [default: the login name]"),
    warehouse: Optional[str] = WarehouseOpt,
):
    """Accept a change: `report --history` starts the baseline of its metrics at RUN, so it stops failing.

    Example: tracedb accept nightly-2026-10-07 --metric gpu_kernel_time --note "fused AdamW, expected"
    """
    acc = _wh(warehouse).accept(run, note=note, metrics=metric, by=by)
    typer.echo(f"accepted {acc.acceptance_id}: {acc.text()}")


@command()
def revoke(
    target: str = typer.Argument(..., metavar="ID|RUN", help="Acceptance id, or a run: every live acceptance at it"),
    note: str = typer.Option(..., "--note", help="Why it is withdrawn (required)"),
    by: Optional[str] = typer.Option(None, "--by", help="Who revokes it [default: the login name]"),
    warehouse: Optional[str] = WarehouseOpt,
):
    """Withdraw an acceptance: the change it accepted fails the report again while it persists.

    Example: tracedb revoke nightly-2026-10-07 --note "accepted by mistake"
    """
    gone = _wh(warehouse).revoke(target, note=note, by=by)
    typer.echo(f"revoked {len(gone)} acceptance(s): " + "; ".join(f"{a.acceptance_id} at {a.run_id}" for a in gone))


@command()
def ddl(
    engine: str = typer.Option(..., "--engine", "-e", metavar="ENGINE", help="spark | databricks | trino | duckdb"),
    location: Optional[str] = typer.Option(None, "--location", metavar="URI", show_default=False,
                                           help="The lake's root as the engine sees it, e.g. s3://bucket/prefix [default: the warehouse's absolute path]"),
    schema_name: str = typer.Option("tracedb", "--schema", metavar="NAME", help="Schema of the views; the Delta tables go in NAME_lake"),
    catalog_name: str = typer.Option("delta", "--catalog", metavar="NAME", help="Trino catalog of the Delta Lake connector"),
    warehouse: Optional[str] = WarehouseOpt,
):
    """Print the statements that define the lake's Delta tables and live-ingest views for an engine.

    Example: tracedb ddl --engine spark --location s3://traces/wh > lake.sql
    """
    typer.echo(_wh(warehouse).ddl(engine, location, schema_name, catalog_name), nl=False)


def main() -> None:
    """The `tracedb` command. What only a tracedb process may do to itself happens here or
    in the commands, never in the library (`tracedb.Warehouse`): `tracedb ingest` lets its
    reads pause and freeze the GC (`tracedb.process`), picks Arrow's allocator
    (`own_ingest_process`), tells pyarrow that pandas is absent
    (`workers.arrow_without_pandas`) and exits without interpreter teardown."""
    if sys.argv[1:2] != ["ingest"]:
        app()
        return
    own_ingest_process()
    try:
        app()
    except SystemExit as e:
        _exit_without_teardown(e.code)
        raise


# Arrow's allocator for `tracedb ingest` (its workers inherit it): jemalloc hands the
# memory a read freed back to the system, where mimalloc (pyarrow's default) keeps it
# for the process's life, under the rollups that follow (bench/RESULTS.md, session 14).
INGEST_ARROW_POOL = "jemalloc"


def own_ingest_process() -> None:
    """`tracedb ingest`'s process is tracedb's own (`tracedb.process`): its reads may pause
    and freeze the GC, and Arrow allocates with INGEST_ARROW_POOL unless the user chose a
    pool (ARROW_DEFAULT_MEMORY_POOL). Before pyarrow is imported: pyarrow reads the
    variable once, at its first allocation."""
    from tracedb import process

    process.own()  # the CLI's process: its reads may pause and freeze the GC
    if sys.platform.startswith("linux"):  # (pyarrow's Linux wheels have jemalloc; others warn)
        os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", INGEST_ARROW_POOL)


def _exit_without_teardown(code) -> None:
    """`tracedb ingest` has finished: its runs are committed, the snapshot is renamed into
    place, the workers are joined and every connection is closed. Skip the interpreter's
    teardown (freeing pyarrow, DuckDB, delta-rs and their modules: 0.12-0.20 s of the
    serial tail, bench/bench_jobs.py); atexit handlers (multiprocessing's clean-up of the
    forkserver's folder) still run, and stdout/stderr are flushed. Anywhere else (an
    uncaught exception, another command, the in-process CliRunner) Python exits normally."""
    import atexit

    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is None:  # not CPython: exit as usual
        return
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: as the normal exit would, report failure
        code = code or 120
    os._exit(code)


if __name__ == "__main__":
    main()
