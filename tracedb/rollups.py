"""Per-run rollups: small derived tables written at ingest, read by fleet-wide queries.

Some metrics need an ordered window over every activity row (a running latest end per
stream or device, a running count of active streams): fleet-wide from raw rows no query
shape answers in about a second (bench/RESULTS.md). Each metric's whole result for one
run is a handful of rows, though, and a run's rows change only when it is re-ingested.
So the ingest computes them: a metric whose header says `-- rollup: rollup_<metric>`
(`tracedb.sqllib`: the one declaration of the table, the parameter values it serves,
the source tables it reads and needs) is run, for each run, on the run's own new rows,
and its rows go into that table, written and committed with the run's other files (same
ingest_id, same publish step): a run's rollup is always of its live version. The
schema holds the tables (`schema.ROLLUP_TABLES`, checked against the declarations by
tests/test_metric_rollups.py); migrations 0006-0008, 0010 and 0015 fill them for runs
ingested before (`backfill`). Canned queries include the metric, and the SQL library
reads the rollup wherever it serves the values (a run, a device, a kind, ...), the
metric's SQL on raw rows otherwise (a step range that is not a filter on the stored rows,
another threshold): the two give the same rows.

How the Writer keeps the cost of a commit group of small runs down (figures in
bench/RESULTS.md, sessions 5-7): each metric's SQL is parsed once per Writer and run on a
cursor of its own through the DB-API result (the relation API binds each statement once
more); a metric runs once for all runs of the group and every kind (`Writer.compute`);
the source tables it reads are loaded once, at once, into the in-memory schema `whole`;
a metric whose source tables have no rows in the group (`-- needs:`) is not run (no file,
no Delta commit; a re-ingest still removes the run's old rollup files); the metrics start
costliest first (`COST_ORDER`) on as many threads as cores, and each writes its files in
its thread as it finishes; rows are split by run with Arrow kernels.

How it stays within a bounded memory whatever a run's size (issue 28 item 13): DuckDB
works within ROLLUP_MEMORY and spills into a temporary folder of the Writer's own; a
group whose files hold more than TABLE_ROWS rows is read from the files (views), not
copied into DuckDB's memory; a metric's rows are fetched and written a chunk at a time
(`rollup_kernel_launches` has a row a launch); stream_overlap reads each of its `WITH`
relations once (DuckDB holds one read twice whole, in memory, where it did not fit), and
its rollup is computed by its `-- rollup-sql:` text (sql/metrics/streamed/): DuckDB's
streaming windows over ORDER BYs, which spill, where the declaration's windows hold a
whole stream (one stream of 10 M kernels did not fit 256 MB); stream_time's the same way
(a small group's by its declaration, which costs half as much there: `DECLARED_WHEN_SMALL`),
with one sort of two rows a kernel and no GROUP BY after its one narrow GROUP BY (DuckDB's
hash aggregates reserve memory from the query's start, which its sort's merge then lacks);
collectives' by one sweep by time over each device's rows in a single ORDER BY, where the
declaration's portable sweep (standard windows partitioned by device) sorts them twice.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple

from tracedb import schema, scratch, sqllib
from tracedb.errors import TracedbError, WarehouseError
from tracedb.sqllib import CannedQuery

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tracedb import storage
    from tracedb.lake import DataFile


# The `kernels` columns the metrics read (a metric reading another fails loudly: add it here).
COLUMNS = ("run_id", "rank", "device", "step", "stream", "kind", "start_ns", "duration_ns")
# ... and those the metrics without a `kind` parameter read besides
WHOLE_COLUMNS = ("name", "source_file", "launch_start_ns", "copy_kind", "bytes", "kernel_type", "grid", "block",
                 "registers_per_thread", "shared_memory_bytes", "occupancy", "correlation_id", "params")
# The `nodes` columns the metrics read (view `whole.nodes`)
NODE_COLUMNS = ("run_id", "rank", "step", "start_ns", "duration_ns", "device", "node_name", "op_type", "flops",
                "flops_dtype", "flops_counted")
# The `runtime_calls` columns the metrics read (view `whole.runtime_calls`)
CALL_COLUMNS = ("run_id", "rank", "step", "source_file", "correlation_id", "name", "start_ns", "duration_ns")
# The `steps` columns the metrics read (view `whole.steps`: the step markers' spans)
STEP_COLUMNS = ("run_id", "rank", "step", "start_ns", "duration_ns")
# Every source table a metric may read (its `-- reads:` header), with the columns of its
# in-memory copy `whole.<table>`: the ingest hands the Writer a run's files of these tables.
WHOLE_SOURCES: dict[str, tuple[str, ...]] = {"kernels": COLUMNS + WHOLE_COLUMNS, "nodes": NODE_COLUMNS,
                                             "runtime_calls": CALL_COLUMNS, "steps": STEP_COLUMNS}


def metrics() -> dict[str, CannedQuery]:
    """Rollup table -> the metric that computes its rows, in the schema's order: the
    metrics' own headers declare them (`tracedb.sqllib`); the schema holds their tables."""
    declared = sqllib.stored_rollups()
    missing = sorted(set(schema.ROLLUPS) ^ set(declared))
    if missing:
        raise TracedbError(f"rollup tables of the schema and the metrics' `-- rollup:` headers differ: {', '.join(missing)}")
    return {table: declared[table] for table in schema.ROLLUPS}


def has_inputs(table: str, have: set[str] | frozenset[str]) -> bool:
    """Whether the rollup `table`'s metric has rows to read when the source tables `have`
    have rows (its `-- needs:`; else it is not run: a metric costs 3-18 ms of CPU on
    empty inputs, mostly DuckDB planning)."""
    return all(any(s in have for s in alts) for alts in metrics()[table].needs)


def reads(tables: list[str]) -> list[str]:
    """The source tables the metrics of these rollup tables read, `kernels` first."""
    return list(dict.fromkeys(["kernels", *(s for t in tables for s in metrics()[t].reads)]))


# DuckDB's memory for the rollups of a commit group (its tables of the runs' rows and the
# metrics' operators); past it they spill to disk, so a run of 10 M events fits as one of
# 10 k does (bench/RESULTS.md, session 13).
ROLLUP_MEMORY = "256MB"

# Past this many rows of the runs' files, the metrics read the files (views) rather than
# copies of the rows in DuckDB's memory: one copy is faster for small runs (~20 % of the
# metrics' CPU), but a big run's copy only spills past ROLLUP_MEMORY, dearer than
# reading the files again (bench/RESULTS.md, session 13).
TABLE_ROWS = 500_000

# A metric's rows are fetched FETCH_ROWS at a time as Python rows and handed on (written)
# CHUNK_ROWS at a time as Arrow: `rollup_kernel_launches` has a row a launch, held whole
# as Python rows before (bench/RESULTS.md, session 13).
FETCH_ROWS = 8_192
CHUNK_ROWS = 65_536

# The metrics whose declaration computes a small group's rollup in less CPU than their
# `-- rollup-sql:` text (the same rows: tests/test_stream_time_memory.py), and up to how
# many rows of the tables the metrics read a group is small: stream_time's declaration
# windows a whole device, well within ROLLUP_MEMORY at this size, in ~half the CPU of the
# streamed text on one small trace (bench/RESULTS.md, session 17 fixed17).
DECLARED_WHEN_SMALL = ("rollup_stream_time",)
SMALL_ROWS = 50_000

# The metrics, costliest first (CPU on the 8-rank Kineto job's 9,616 kernels, 58 k nodes and
# 9.5 k runtime calls, 2 cores): they start in this order on as many threads as cores.
COST_ORDER = ("rollup_stream_time", "rollup_gpu_busy_idle", "rollup_step_times", "rollup_device_time",
              "rollup_stream_overlap", "rollup_kernel_launches", "rollup_collectives",
              "rollup_memory_bandwidth", "rollup_kernel_launch_config", "rollup_run_summary",
              "rollup_kernel_histogram", "rollup_kernel_names", "rollup_op_summary", "rollup_nccl_bandwidth",
              "rollup_memcpy_summary", "rollup_step_flops")


class _Metric(NamedTuple):
    """A rollup's metric as the Writer runs it."""

    query: CannedQuery
    values: dict[str, Any]  # its parameters at their defaults
    statement: Any  # the parsed SQL (DuckDB's Statement)
    cursor: Any  # its own cursor of the Writer's connection
    whole: bool  # no `kind` parameter: it reads the `whole` schema's tables
    small: Any = None  # the declaration, parsed, for a small group (`DECLARED_WHEN_SMALL`)


class Writer:
    """Computes and writes runs' rollups on one in-memory DuckDB connection, the metrics'
    SQL parsed once and each run on a cursor of its own kept open (a connection and the
    parsing cost ~50-100 ms under load, as much as the metrics themselves on a small run)."""

    def __init__(self, tables: list[str] | None = None) -> None:
        """`tables`: only these rollup tables' metrics are prepared (None: all)."""
        import duckdb

        from tracedb.storage import sql_str

        self.con = duckdb.connect()
        # a few thousand rows a run: one thread (the ingest's workers have the other cores)
        self.con.execute("SET enable_progress_bar = false")
        self.con.execute("SET threads = 1")
        # Bounded whatever the run's size: past ROLLUP_MEMORY DuckDB spills its tables,
        # sorts and windows into a folder of its own, removed at close (its default: 80%
        # of RAM, and an in-memory database's spill folder in the working directory).
        self.spill = scratch.folder("tracedb-rollups-")  # a killed ingest's: removed by the next
        self.con.execute(f"SET memory_limit = '{ROLLUP_MEMORY}'")
        self.con.execute(f"SET temp_directory = {sql_str(str(self.spill / 'tmp'))}")
        self.con.execute("CREATE SCHEMA whole")
        self.metrics: dict[str, _Metric] = {}
        # a lake of schema <= 7 (its older migrations backfilling): its files may lack
        # columns a later migration adds (nodes' flops_dtype: 0012), read as NULL
        self.sparse = False
        self._registered: set = set()  # fsspec protocols registered on the connection
        for table, cq in metrics().items():
            if tables is not None and table not in tables:
                continue
            whole = not any(p.name == "kind" for p in cq.params)
            cur = self.con.cursor()
            if whole:  # a cursor's own setting: `kernels` is then that schema's
                cur.execute("SET search_path = 'whole'")
            # parsed once (DuckDB's Statement): ~1.5 ms a metric a computation under load
            # (a metric's `-- rollup-sql:`: the text it declares for the ingest, same rows)
            text = cq.rollup_sql or cq.sql
            small = self.con.extract_statements(cq.sql)[-1] if cq.rollup_sql and table in DECLARED_WHEN_SMALL else None
            self.metrics[table] = _Metric(cq, sqllib.bind(cq, {}, self.con), self.con.extract_statements(text)[-1], cur,
                                          whole, small)

    def close(self) -> None:
        for m in self.metrics.values():
            m.cursor.close()
        self.con.close()
        shutil.rmtree(self.spill, ignore_errors=True)

    def compute(self, sources: list[dict[str, str]], tables: list[str] | None = None) -> list[dict[str, pa.Table]]:
        """For each of `sources` (one run's relations by source table: its `kernels` rows,
        its `nodes` rows; a table left out: no rows): every rollup
        table's rows (run_id not filled), in schema order (`tables`: only these).

        Each metric runs once for all of them, not once per run and kind: its input is
        every row under run id `<i>*` (i: the source's position; kind NULL, all activity)
        and once more under `<i>=<kind>`; the metric's SQL keeps runs apart in every
        window, join and group (it answers for a whole fleet), so each such "run" comes
        out exactly as the metric with run_id and $kind bound computes it. (Per run and
        kind, 8 executions a run cost ~0.2 s under load on 2 cores; per run ~0.1 s; for a
        commit group of runs a few ms a run beyond the rows' own cost.) A metric without
        a `kind` parameter (all but two) reads the `<i>*` rows only, from the
        in-memory table `whole.kernels` (`WHOLE_COLUMNS`), and `whole.nodes`
        (`NODE_COLUMNS`) or `whole.runtime_calls` (`CALL_COLUMNS`) for one that reads
        them (their `-- reads:` header): the sources are read once for all of
        them (as views over the files, each metric read them again: the eight metrics of
        the 17 MB TF run took 127 ms of CPU one after another, 101 ms from the tables;
        a commit group of 50 fleet runs holds ~0.5 M kernel rows there)."""
        out: list[dict[str, pa.Table]] = [{} for _ in sources]

        def keep(table: str, chunks: Iterator[pa.Table]) -> None:
            import pyarrow as pa

            rows = pa.concat_tables(list(chunks), promote_options="permissive")
            for mine, part in zip(out, self._split(table, rows, len(sources))):
                mine[table] = part

        self._each(sources, self._todo(sources, tables), keep)
        return [{t: mine[t] for t in schema.ROLLUPS if t in mine} for mine in out]

    def _todo(self, sources: list[dict[str, str]], tables: list[str] | None) -> list[tuple[str, _Metric]]:
        """The metrics to run: those of `tables` (None: all) whose input tables have rows."""
        have = {t for src in sources for t in src}
        return [(t, m) for t, m in self.metrics.items() if (tables is None or t in tables) and has_inputs(t, have)]

    def _each(self, sources: list[dict[str, str]], todo: list[tuple[str, _Metric]],
              done: Callable[[str, Iterator[pa.Table]], None], copy: bool = True, small: bool = False) -> None:
        """Run the metrics of `todo` on `sources` (see `compute`), calling `done(table, chunks)`
        with each one's rows (`_run`: chunks as DuckDB streams them) in the thread that
        computes it. `copy`: the sources loaded into tables (False: views over the files,
        for inputs too big to copy: `TABLE_ROWS`). `small`: at most SMALL_ROWS rows."""
        from concurrent.futures import ThreadPoolExecutor

        from tracedb.lake import concurrently
        from tracedb.workers import cores

        if not todo:
            return
        loads = reads([t for t, _ in todo])
        kinds = any(not m.whole for _, m in todo)
        try:
            concurrently([lambda t=t: self._load(sources, t, kinds and t == "kernels", copy) for t in loads])
            todo = sorted(todo, key=lambda tm: COST_ORDER.index(tm[0]) if tm[0] in COST_ORDER else len(COST_ORDER))
            if small:
                todo = [(t, m._replace(statement=m.small) if m.small is not None else m) for t, m in todo]
            with ThreadPoolExecutor(min(len(todo), cores()), thread_name_prefix="tracedb-rollup") as pool:
                futures = [pool.submit(lambda t=t, m=m: done(t, self._run(m))) for t, m in todo]
            for f in futures:  # (all done: the pool's exit waits for them)
                f.result()
        finally:
            for table in ("kernels", *(f"whole.{t}" for t in WHOLE_SOURCES)):
                self.con.execute(f"DROP {'TABLE' if copy else 'VIEW'} IF EXISTS {table}")

    def _load(self, sources: list[dict[str, str]], table: str, kinds: bool, copy: bool) -> None:
        """`whole.<table>`: every source's rows of `table` under run id `<i>*`, on a cursor of
        its own (the tables load at once); for `kernels` with `kinds`, then `kernels` too: the
        same rows once more for each kind present, under `<i>=<kind>` (from the in-memory
        table, not the files again). With `copy` False, views of the same rows."""
        kind = "TABLE" if copy else "VIEW"
        with self.con.cursor() as cur:
            have = None
            first = next((src[table] for src in sources if table in src), None)
            if not isinstance(first, str) and first is not None:
                # rows handed over as Arrow tables (`backfill_in_run_order`: only the columns
                # the metrics name), copied: registered on this cursor, read by name
                assert copy, "rows handed over as Arrow are copied"
                have = set(first.column_names)
                sources = [{**src, table: _registered(cur, src[table], f"arrow_{table}_{i}")} if table in src else src
                           for i, src in enumerate(sources)]
            elif self.sparse and first is not None:
                have = {r[0] for r in cur.execute(f"DESCRIBE SELECT * FROM {first}").fetchall()}
            cur.execute(f"""CREATE OR REPLACE {kind} whole.{table} AS
                SELECT * EXCLUDE (_source) REPLACE (_source || '*' AS run_id)
                FROM ({self._rows_of(sources, table, WHOLE_SOURCES[table], have)})""")
            if kinds:
                cur.execute(f"""CREATE OR REPLACE {kind} kernels AS
                    SELECT rtrim(k.run_id, '*') || coalesce('=' || s.kind, '*') AS run_id,
                           {', '.join(f"k.{c}" for c in COLUMNS if c != 'run_id')}
                    FROM whole.kernels k
                    JOIN (SELECT NULL AS kind UNION ALL SELECT DISTINCT kind FROM whole.kernels WHERE kind IS NOT NULL) s
                      ON s.kind IS NULL OR k.kind = s.kind""")

    @staticmethod
    def _run(m: _Metric) -> Iterator[pa.Table]:
        """The metric's rows, as `query.execute` gives them with no run named (no view to
        scope), in chunks of about CHUNK_ROWS (the first always, empty or not): the parsed
        statement on its cursor, through the DB-API result (with the relation API DuckDB
        binds each statement once more to make the relation; the nine metrics' fixed cost,
        on empty inputs, 78-89 -> 29-41 ms of CPU at load ~4), which DuckDB streams."""
        import duckdb
        import pyarrow as pa

        from tracedb.output import plain_numbers

        try:
            cur = m.cursor.execute(m.statement, m.values)
            names = [d[0] for d in cur.description]
            parts: list[pa.Table] = []
            held = 0
            while True:
                # Python rows, not Arrow from this DB-API result: DuckDB warns on that, and a
                # filter against the warning would change the process's. The file writer
                # casts them to the table's types (`store.conform`).
                rows = cur.fetchmany(FETCH_ROWS)
                parts.append(plain_numbers(pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)})))
                held += len(rows)
                last = len(rows) < FETCH_ROWS
                if last or held >= CHUNK_ROWS:
                    yield from _joined(parts)
                    parts, held = [], 0
                if last:
                    return
        except duckdb.OutOfMemoryException as e:
            raise WarehouseError(f"{m.query.name}: the rollups did not fit rollups.ROLLUP_MEMORY ({ROLLUP_MEMORY}): "
                                 f"{str(e).splitlines()[0]} (the source files are not at fault)") from e
        except duckdb.Error as e:
            raise TracedbError(f"{m.query.name}: {type(e).__name__}: {str(e).splitlines()[0]}") from e

    @staticmethod
    def _rows_of(sources: list[dict[str, str]], table: str, columns: tuple[str, ...],
                 have: set[str] | None = None) -> str:
        """`table`'s rows of every source, numbered by `_source` (none: an empty relation);
        `have`: the columns its files hold (None: all), the others NULL."""
        sch = schema.TABLES[table]
        cols = ", ".join(c if have is None or c in have else f"CAST(NULL AS {schema.duckdb_type(sch.field(c).type)}) AS {c}"
                         for c in columns)
        rows = [f"SELECT {cols}, {i} AS _source FROM {src[table]}" for i, src in enumerate(sources) if table in src]
        if rows:
            return " UNION ALL ".join(rows)
        nulls = ", ".join(f"CAST(NULL AS {schema.duckdb_type(sch.field(c).type)}) AS {c}" for c in columns)
        return f"SELECT {nulls}, 0 AS _source WHERE false"

    @staticmethod
    def _split(table: str, rows: pa.Table, n: int) -> list[pa.Table]:
        """A metric's rows for each of `n` sources (run ids `<i>*` / `<i>=<kind>`), with the
        kind column filled."""
        import pyarrow as pa
        import pyarrow.compute as pc

        ids = rows.column("run_id").cast(pa.string())
        if n == 1 and pc.all(pc.equal(ids, "0*")).as_py() is not False:
            # one source, every kind (all rows of the metrics without a `kind` parameter)
            source, kind = None, pa.nulls(rows.num_rows, pa.string())
        else:
            # vectorised: a Python regex a row took 8 ms of the 7.5 k launches of the 8-rank Kineto job
            parts = pc.extract_regex(ids, r"(?s)^(?P<source>\d+)(?P<sep>[*=])(?P<kind>.*)$")
            source = pc.struct_field(parts, "source").cast(pa.int64())
            kind = pc.if_else(pc.equal(pc.struct_field(parts, "sep"), "="), pc.struct_field(parts, "kind"),
                              pa.scalar(None, pa.string()))
        rows = rows.append_column("kind", kind)
        if "device" not in rows.column_names:  # a rollup over every device (step_times): its constant partition
            rows = rows.append_column("device", pa.repeat(pa.scalar(schema.STEP_TIMES_DEVICE), rows.num_rows))
        rows = rows.select([c for c in schema.TABLES[table].names if c != "run_id"])
        return [rows] if source is None else [rows.filter(pc.equal(source, i)) for i in range(n)]

    def reads_from(self, store: storage.Storage) -> None:
        """Let the metrics read files of `store` (object storage: DuckDB reads through fsspec)."""
        fs = store.duckdb_filesystem()
        if fs is not None and fs.protocol not in self._registered:
            self.con.register_filesystem(fs)
            self._registered.add(fs.protocol)

    def write_runs(self, root: Path | str | storage.Storage, runs: list[tuple[str, str, list[str]]],
                   tables: list[str] | None = None, tag: str = "rollup",
                   partitioned: frozenset[str] = frozenset(), rows: int | None = None) -> list[DataFile]:
        """Compute the rollups of `runs` (run_id, ingest_id, its parquet files of the
        `WHOLE_SOURCES` tables: paths relative to the warehouse; only the rows of that run and
        ingest) and write them into the lake under each run's ingest_id, uncommitted.
        `tables`: only these rollup tables. `partitioned`: the tables (sources or rollups)
        in the partitioned layout of schema <= 7 (a lake whose older migrations run). `rows`:
        how many rows the runs' files hold, if known: past TABLE_ROWS the metrics read
        the files (views), not copies of their rows in DuckDB's memory."""
        from tracedb import storage
        from tracedb.store import FileWriter

        runs = [r for r in runs if r[2]]
        if not runs:
            return []
        self.sparse = bool(partitioned)
        store = storage.open_storage(root)
        self.reads_from(store)
        sources = []
        for run_id, ingest_id, files in runs:
            by_table: dict[str, list[str]] = {}
            for f in files:
                by_table.setdefault(f.split("/", 1)[0], []).append(store.absolute(f))
            sources.append({table: _run_rows(paths, run_id, ingest_id, table in partitioned)
                            for table, paths in by_table.items()})
        written: list[DataFile] = []
        lock = threading.Lock()

        def write(table: str, chunks: Iterator[pa.Table]) -> None:
            """A metric's rows, each run's into its file, written in the metric's thread
            as DuckDB streams them, while the others compute."""
            writers = [FileWriter(store, run_id, ingest_id, f"{ingest_id}-{tag}", partitioned=partitioned)
                       for run_id, ingest_id, _ in runs]
            closed = 0
            try:
                for rows in chunks:
                    for writer, part in zip(writers, self._split(table, rows, len(runs))):
                        writer.write(table, part)
                for writer in writers:
                    files = writer.close()
                    closed += 1
                    with lock:
                        written.extend(files)
            except BaseException:
                for writer in writers[closed:]:
                    writer.abort()
                raise

        try:
            self._each(sources, self._todo(sources, tables), write, copy=rows is None or rows <= TABLE_ROWS,
                       small=rows is not None and rows <= SMALL_ROWS)
        except BaseException:
            for f in written:
                store.unlink(f.rel)
            raise
        order = {run_id: i for i, (run_id, _, _) in enumerate(runs)}
        return sorted(written, key=lambda f: (order[f.run_id], list(schema.ROLLUPS).index(f.table), f.device))


def _registered(cur, rows: str | pa.Table, name: str) -> str:
    """A relation's text: `rows` itself, or the name it is registered under on `cur`."""
    if isinstance(rows, str):
        return rows
    cur.register(name, rows)
    return name


def _joined(parts: list[pa.Table]) -> list[pa.Table]:
    """Chunks of a metric's rows as one table, or as they are where their types differ
    (a sum beyond int64 in one chunk stays decimal: `store.conform` casts each)."""
    import pyarrow as pa

    try:
        return [pa.concat_tables(parts, promote_options="permissive")]
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return parts


def _run_rows(paths: list[str], run_id: str, ingest_id: str, hive: bool) -> str:
    """A relation of one run's rows of one ingest in these files (absolute paths or URLs)."""
    from tracedb.storage import sql_str

    listed = "[" + ", ".join(sql_str(p) for p in paths) + "]"
    opts = ", hive_partitioning = true, hive_types = {'run_id': VARCHAR, 'device': VARCHAR}" if hive else ""
    return (f"(SELECT * FROM read_parquet({listed}{opts}) "
            f"WHERE run_id = {sql_str(run_id)} AND ingest_id = {sql_str(ingest_id)})")


def backfill(lake, tables: list[str], tag: str, anew: bool = False) -> None:
    """Fill `tables` (rollup tables) for every run of `lake` from its live files of the tables
    its metrics read (`-- reads:`),
    under the run's live ingest_id, as an ingest would have (migrations 0006-0008).
    Safe to re-run after a crash: a run that already has a table's rollup is left alone in
    that table. One Delta commit per table; in the unpartitioned layout (schema >= 8) a
    file a table for each group of 50 runs (`store.merge_group`). With `anew` (a metric whose definition
    changed), every run's rows are computed again and each table's live files are swapped
    for the new ones in its one commit (`Lake.replace_tables`)."""
    import secrets

    from tracedb.store import merge_group

    # The files' names carry the run's ingest id and the tag; a token makes them this
    # attempt's own: a rerun after a kill between a migration's commit and its record
    # (anew: the same runs again) would otherwise write over the live files it replaces.
    tag = f"{tag}-{secrets.token_hex(3)}"
    lake.ensure_tables()
    live = {r["run_id"]: r["ingest_id"] for r in lake.read_table("runs", ["run_id", "ingest_id"]).to_pylist()}
    have = {t: set() if anew else {run for run, _ in lake.live_files_by_run(t, live)[0]} for t in tables}
    inputs: dict[str, list[str]] = {}  # run -> its live files of the tables the metrics read
    for source in reads(tables):
        for run_id, path in lake.live_files_by_run(source, live)[0]:
            inputs.setdefault(run_id, []).append(path)
    files = []
    roll = Writer()
    try:
        by_missing: dict[tuple[str, ...], list] = {}  # all runs miss every table, unless re-run after a crash
        for r in sorted(inputs):
            missing = tuple(t for t in tables if r not in have[t])
            if missing:
                by_missing.setdefault(missing, []).append((r, live[r], sorted(inputs[r])))
        for missing, todo in by_missing.items():
            for i in range(0, len(todo), 50):  # groups of runs, as an ingest commits them
                group = roll.write_runs(lake.storage, todo[i:i + 50], tables=list(missing), tag=tag,
                                        partitioned=lake.partitioned_tables())
                # one file a table for the group, as an ingest merges its group's (a file a
                # run and table is what schema 8 ended); partitioned tables' stay as written
                files += merge_group(lake.storage, group, tag)
        if anew:
            lake.replace_tables(tables, files)
        else:
            lake._add_files(files)  # one Delta commit per rollup table, checksums recorded
    except BaseException:
        lake.discard(files)
        raise
    finally:
        roll.close()


# `backfill_in_run_order` computes the rollups of GROUP_RUNS runs at a time (as an ingest's
# commit group), fewer when their rows reach GROUP_ROWS: the rows are held as Arrow and
# copied into DuckDB (`Writer`), so these bound the memory whatever the lake's size. A run
# of more rows than GROUP_ROWS is computed alone from its files (views, as an ingest reads
# a big run's files: `TABLE_ROWS`), its rows not held. (Groups of 100 k rows rather than
# TABLE_ROWS: the same CPU a run, less memory; bench/RESULTS.md "Session 17: mig17".)
GROUP_RUNS = 50
GROUP_ROWS = 100_000
# ... and writes each rollup table's rows in row groups of this many: the seven tables'
# pending rows are held at once (128 k `rollup_kernel_names` rows, of long kernel names,
# are tens of MB); the rollups are small tables, read whole or by run.
ROLLUP_GROUP_ROWS = 32 * 1024


class _Run(NamedTuple):
    """One run's rows of the source tables as `_by_run` gives them."""

    run_id: str
    rows: dict[str, list[pa.Table]] | None  # by source table; None: more than GROUP_ROWS, not held
    files: dict[str, list[str]]  # the files that hold them, by source table


def columns_read(tables: list[str]) -> dict[str, tuple[str, ...]]:
    """For each source table the metrics of these rollup tables read: the columns of its
    `whole` copy (`WHOLE_SOURCES`) that any of their texts names (DuckDB's syntax tree:
    every column reference, of whatever relation), all of them where a `SELECT *` reads
    the table itself; run_id always. A column no text names no metric reads."""
    import json

    import duckdb

    named: set[str] = {"run_id"}
    starred: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for n in node:
                walk(n)
        elif isinstance(node, dict):
            if node.get("class") == "COLUMN_REF":
                named.update(node.get("column_names", []))
            if node.get("type") == "SELECT_NODE" and any(e.get("class") == "STAR" for e in node.get("select_list", [])):
                starred.update(_base_tables(node.get("from_table")))
            for v in node.values():
                walk(v)

    with duckdb.connect() as con:
        for t in tables:
            cq = metrics()[t]
            tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [cq.rollup_sql or cq.sql]).fetchone()[0])
            if tree.get("error"):
                raise TracedbError(f"{cq.name}: {tree.get('error_message')}")
            walk(tree)
    return {src: tuple(c for c in WHOLE_SOURCES[src] if c in named or src in starred) for src in reads(tables)}


def _base_tables(node: Any) -> list[str]:
    """The tables (or CTEs) a FROM clause reads directly, through its joins."""
    if not isinstance(node, dict):
        return []
    if node.get("type") == "BASE_TABLE":
        return [node.get("table_name", "")]
    if node.get("type") == "JOIN":
        return _base_tables(node.get("left")) + _base_tables(node.get("right"))
    return []


def backfill_in_run_order(lake, tables: list[str], tag: str) -> None:
    """`backfill` (not `anew`), reading each live file of the source tables once: the files
    of each table the metrics read are merged by run (`lake.rows_by_run`: files are in run
    order, many runs a file, and their run ranges overlap), the runs' rows handed to the
    metrics GROUP_RUNS runs at a time in run order, and each rollup table's rows written
    as they come into files in run order (`lake.OrderedWriter`), a few a table. `backfill`
    computes groups of runs from each run's files, and each file holds runs of many groups:
    it read each file once a group (bench/RESULTS.md "Session 17: mig17").
    The rows are those `backfill` (and an ingest) writes: the same metrics on the same rows
    of each run (its live ingest's). Safe to re-run after a crash, like `backfill`: the
    files are committed at the end (one Delta commit a table), and a run that has a table's
    rollup is left alone in it. A lake with a table in the partitioned layout, or a file not
    in run order, gets `backfill`."""
    import secrets

    from tracedb import lake as lake_mod

    lake.ensure_tables()
    live = {r["run_id"]: r["ingest_id"] for r in lake.read_table("runs", ["run_id", "ingest_id"]).to_pylist()}
    published = lake.published()
    missing = {t: set(live) - {run for run, _ in lake.live_files_by_run(t, live)[0]} for t in tables}
    tables = [t for t in tables if missing[t]]
    todo = {run: ingest for run, ingest in live.items() if any(run in missing[t] for t in tables)}
    if not todo:
        return
    if lake.partitioned_tables() & {*tables, *reads(tables)}:
        return backfill(lake, tables, tag)
    streams = {src: lake_mod.rows_by_run(lake.storage, src, lake.live_files(src, published)[0], columns, todo)
               for src, columns in columns_read(tables).items()}
    writers = {t: lake_mod.OrderedWriter(lake.storage, t, lambda t=t: f"{t}/part-{tag}-r{secrets.token_hex(4)}.parquet",
                                         lake.FILE_ROWS // 2, ROLLUP_GROUP_ROWS) for t in tables}
    roll = Writer(tables)
    try:
        for group in _groups(_by_run(streams)):
            _write_group(roll, lake.storage, group, todo, {t: missing[t] for t in tables}, writers)
        files = [f for w in writers.values() for f in w.close()]
    except lake_mod.NotInRunOrder:
        for w in writers.values():
            w.abort()
        return backfill(lake, tables, tag)
    except BaseException:
        for w in writers.values():
            w.abort()
        raise
    finally:
        roll.close()
    try:
        lake._add_files(files)  # one Delta commit per rollup table, checksums recorded
    except BaseException:
        lake.discard(files)
        raise


def _by_run(streams: dict[str, Iterator[tuple[str, str, pa.Table]]]) -> Iterator[_Run]:
    """The source tables' (run_id, file, rows) pieces (`lake.rows_by_run`) joined by run,
    in run order; a run's rows past GROUP_ROWS are let go (`_Run.rows` None)."""
    heads = {t: next(it, None) for t, it in streams.items()}
    while any(h is not None for h in heads.values()):
        run = min(h[0] for h in heads.values() if h is not None)
        rows: dict[str, list[pa.Table]] | None = {}
        files: dict[str, list[str]] = {}
        held = 0
        for t, it in streams.items():
            while (h := heads[t]) is not None and h[0] == run:
                if h[1] not in files.setdefault(t, []):
                    files[t].append(h[1])
                if rows is not None:
                    rows.setdefault(t, []).append(h[2])
                    held += h[2].num_rows
                    if held > GROUP_ROWS:
                        rows = None
                heads[t] = next(it, None)
        yield _Run(run, rows, files)


def _groups(runs: Iterator[_Run]) -> Iterator[list[_Run]]:
    """Runs in order as groups of up to GROUP_RUNS runs and GROUP_ROWS rows; a run whose
    rows were not held (too many) alone."""
    group: list[_Run] = []
    held = 0
    for run in runs:
        n = sum(p.num_rows for ps in (run.rows or {}).values() for p in ps)
        if group and (run.rows is None or len(group) == GROUP_RUNS or held + n > GROUP_ROWS):
            yield group
            group, held = [], 0
        if run.rows is None:
            yield [run]
            continue
        group.append(run)
        held += n
    if group:
        yield group


def _write_group(roll: Writer, store: storage.Storage, group: list[_Run], live: dict[str, str],
                 missing: dict[str, set[str]], writers: dict) -> None:
    """The rollups of `group`'s runs (those of `missing[table]` only) handed to the table's
    writer in `lake.write_merged`'s order, as an ingest's group file holds them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from tracedb.lake import INGEST_ID
    from tracedb.store import conform

    whole = group[0].rows is None
    if whole:  # a big run: its files read by the metrics, not copied (`TABLE_ROWS`)
        run = group[0]
        roll.reads_from(store)
        sources = [{t: _run_rows([store.absolute(f) for f in fs], run.run_id, live[run.run_id], False)
                    for t, fs in run.files.items()}]
    else:
        sources = [{t: pa.concat_tables(ps) for t, ps in run.rows.items()} for run in group]
    todo = [t for t in writers if any(run.run_id in missing[t] for run in group)]

    def write(table: str, chunks: Iterator[pa.Table]) -> None:
        parts: list[list[pa.Table]] = [[] for _ in group]
        for rows in chunks:
            for mine, part in zip(parts, Writer._split(table, rows, len(group))):
                mine.append(part)
        out = []
        for run, mine in zip(group, parts):
            if run.run_id not in missing[table]:
                continue
            for part in mine:
                data = conform(part, table, {"run_id": run.run_id})
                if data.column("device").null_count:
                    raise WarehouseError(f"{table}: rows without a device for run {run.run_id}")
                out.append(data.append_column(INGEST_ID, pa.repeat(pa.scalar(live[run.run_id]), data.num_rows)))
        if out:
            data = pa.concat_tables(out)
            writers[table].write(data.take(pc.sort_indices(data, [("run_id", "ascending"), ("device", "ascending")])))

    roll._each(sources, roll._todo(sources, todo), write, copy=not whole)
