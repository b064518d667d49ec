"""Per-run rollups: small derived tables written at ingest, read by fleet-wide queries.

`gpu_busy_idle` and `stream_overlap` need an ordered window over every activity row (the
running latest end per stream or step window, then the running count of active
streams). Measured on the 1,000-run bench fleet (9.59 M kernel rows, 2 cores, DuckDB
2.0.1): a bare partitioned `lag()` over all rows takes 1.7 s and a sort 2.7 s, the two
queries 13.7 s and 20.8 s with 1.7 GB and 2.6 GB peak RSS, so no query shape reaches the
1 s goal from raw rows. Each query's whole result for one run is a handful of rows,
though, and a run's rows only change when the run is re-ingested.

So the ingest computes them: for each run, after its files are read and before it is
committed (with its commit group), `Writer.write_runs` runs the metric's SQL (`sql/metrics/<metric>.sql`, the one
definition, also inlined by the canned query where it must read raw rows) on the run's
own new `kernels` files (one execution per metric computes every run of the group, `kind`
NULL and each kind present, see `Writer.compute`), and the rows
go into `rollup_<metric>` (schema.ROLLUPS), written and committed with the run's other
files (same partitioning, same ingest_id, same publish step): a run's rollup is always
of its live version. Migration 0006 computes them for runs ingested before. The canned
queries filter the rollup (one run or the fleet, device, kind, step windows: every
parameter of `gpu_busy_idle`; `stream_overlap` without a step range); only
`stream_overlap` with `step_from`/`step_to` still computes from raw rows (the busy
union of a step range is not a sum of per-step figures).

`collectives` (schema 5, migration 0007) has the same shape: its per-instance overlap
windows over the collectives' clipped compute intervals took 13.3 s and 1.66 GB fleet-wide
with 211 k collectives in 9.59 M rows, which no query shape brings under 1 s. Its rollup
(per run, device and collective name) answers every query without `name_like` (a pattern
given at query time can make any kernel a collective) or a step range; those two keep the
raw-row path. It has no `kind`: collectives are kernels.

Schema 6 (migration 0008) adds two, for the queries that ordered every activity row of
each stream or copy type (1,000 runs, 10.39 M kernel rows: `idle_time_breakdown` 2.4 s,
`queue_length` 1.31 s, `memory_bandwidth` 1.09 s from raw rows). `rollup_stream_time`
serves the first two at one grain, per run, source file, rank, device and stream
(`sql/metrics/stream_time.sql` joins the two metrics' definitions, `idle_gaps.sql` and
`queue_summary.sql`, which the canned queries include for their raw-row paths): each
category's summed gaps and their count at the default 30 us kernel-wait threshold (the
canned query adds a stream's files up and takes the shares, so its sums and ratios are
those of the raw rows exactly), and the queue summary's final (rounded) values, which
are per file and stream in the query too. Its rank filter stays on the rollup (a rank is
a file's: every row of a stream keeps or drops together); step ranges and another
`kernel_wait_ns` (`-- raw-if:` compares with the default) read the raw rows.
`rollup_memory_bandwidth` holds `memory_bandwidth`'s final rows (each is one run's), so
its rounded bandwidths are the values the query computed. Measured on that fleet (2
cores, best of 3, load 5-7, 13:45-13:48 UTC): fleet-wide idle / queue / bandwidth 0.40-0.57
/ 0.42-0.72 / 0.49-0.51 s (raw rows in the same process: 9.6 / 5.1 / 3.4 s with the texts
before issue 12), one run 35-48 / 22-27 / 15-39 ms; nearly all of it is opening the
rollups' one-run files (1,025 for rollup_stream_time). Migration 0008: 34 s for 1,000
runs at load ~6. Ingest cost (`bench/bench_rollups.py`, 24 shipped traces, `--jobs 1`,
12 rounds each interleaved with the code before, load 5-7): the rollup step's median
0.63 -> 0.97 s (share of the ingest 15% -> 21%); the stream metric is ~25 ms per commit
group of tiny runs, most of it `queue_summary`'s windows and planning, the copy metric ~12 ms.

`device_time` (schema 6, migration 0008) serves three queries from one table:
kernel_type_breakdown, temporal_breakdown and comm_comp_overlap are each a few interval
unions per run, rank and device, ordered by one window over every activity row (7.9 s,
6.1 s and 1.26 s fleet-wide at 10.39 M kernel rows). `rollup_device_time` holds, per run,
rank and device, every union the three report from, computed in one ordered pass with six
running maxima (all activity, each of the three kernel types, computation and
communication kernels): span, busy, the seven kernel-type set unions, the computation,
communication and both-kernel unions, and the communication kernel count (only devices
with one have a comm_comp_overlap row). Each query's own selection (typed activity; all
activity; kind 'kernel') is a condition inside the pass, so one row serves all three; with
a step range they compute the same unions from raw rows (`include`). On the 1,000-run fleet
(10.39 M kernel rows, load ~7-8, 2 cores) the three answer fleet-wide in 0.24-0.51 s
(main's texts in the same process: 23.5 s, 15.1 s, 2.9 s), one run in 16-20 ms; migration
0008 took 75 s wall (35 s CPU). At ingest the metric costs ~15 ms CPU for the 9,060
activities of the 17 MB TF text (one more rollup file and Delta commit besides).

Schema 6 (migration 0008) adds two whose results have no parameter the rollup cannot
serve, so their canned queries read only the rollup (no raw-row branch; the metric in
sql/metrics/ is the one definition the ingest and the backfill run):
- `step_times` (per run, rank and step, `rollup_step_times`) reads the run's `nodes`
  as well as its `kernels`: `write_runs` takes both tables' files (by path prefix) and
  the metric sees them as the views `whole.nodes` (`NODE_COLUMNS`) and `whole.kernels`;
  a run with host ops only (no kernels files) gets its rows too. A row spans the run's
  devices, so its partition `device` is the constant `schema.STEP_TIMES_DEVICE`.
- `kernel_launch_config` (per run, device, kernel name and launch configuration,
  `rollup_kernel_launch_config`): `device` filters the rollup, `limit` applies to it;
  the mean duration is kept in integer tenths of a ns (`avg_tenths`, times are integer
  ns) and divided by 10 at query time, the same double as the raw text.
Measured on the 1,000-run fleet (10.4 M kernels, 3.9 M nodes rows; 2 cores; bench_queries
--old raw, the metric's raw-row text in the same process): at load 1-2, step_times 0.17 s
fleet-wide (raw rows 4.2 s), kernel_launch_config 0.27 s (raw 1.33 s), one run 9 ms each;
at load 6-9, 0.38 s (raw 14.4 s) and 0.47-0.73 s (raw 2.9 s);
`tracedb migrate` (0008) took 80 s for the 1,000 runs (507 MB peak RSS). At ingest, on a
17 MB TF text (6.9 k nodes, 9.1 k kernels rows): step_times' metric ~17-20 ms CPU,
kernel_launch_config's ~6-10 ms; the ingest into an existing warehouse, best of 8
alternating processes at load 1: wall 1.092 -> 1.113 s (+2%), CPU 1.139 -> 1.190 s.

`kernel_launch_stats` (schema 6 too) returns one row per launch, so no summary shrinks it,
but its parameters only filter rows (rank, steps) or flag them (cutoffs):
`rollup_kernel_launches` holds each run's launch calls joined with the activities they
launched (`sql/metrics/kernel_launches.sql`; the metric reads `whole.runtime_calls`,
`CALL_COLUMNS`, beside `whole.kernels`), and the query filters, flags and orders them. At
1,000 runs (924 k launches) the join from raw rows took 1.47 s fleet-wide.

Fixed cost at ingest (issue 12). On a run of a few thousand rows the metrics' cost is
mostly DuckDB's: parsing, binding and planning nine statements (~90 ms of CPU of ~120 on
the 17 MB TF text's 9,060 activities, load ~4; on empty inputs alone 78-89 ms). The Writer
parses each metric once, runs it on a cursor of its own through the DB-API result (the
relation API binds each statement a second time to make the relation): 29-41 ms for the
nine on empty inputs. A metric whose input tables have no rows in the commit group
(`NEEDS`: `kernel_launches` without `runtime_calls`, all but `step_times` without
`kernels`) is not run, and, as for any rollup without rows, no file is written and its
table gets no Delta commit; a re-ingest still removes the run's old rollup files (the
commit's clean-up step covers every data table).

The tail after the last read (issue 12, session 7). On the 8-rank Kineto job (9,616
kernels, 58 k nodes, 9.5 k runtime calls; one batch, at the commit, beside step 1's Delta
commits) the metrics' CPU is DuckDB executing them (windows ~40% of it), planning ~25 ms
of ~130; loading the in-memory tables ~35 ms. The Writer now loads `whole.kernels`,
`whole.nodes` and `whole.runtime_calls` at once on cursors of their own, makes the
`kind` table from `whole.kernels` (not from the files again), runs the metrics costliest
first (`COST_ORDER`) on as many threads as cores (nine threads on two cores cost ~25%
more CPU), writes each metric's files in its thread as it finishes, and splits the rows
by source with Arrow kernels (a Python regex a row: 8 ms for the 7.5 k launches). Measured
on that job, fresh processes alternating with the code before (2 cores, load ~1-1.5):
the rollups phase 254 -> 201 ms wall, 408 -> 357 ms of the process's CPU; the whole tail
(commit and snapshot) 383 -> 322 ms. Tried and dropped, each measured on the job's
tables: prepared statements (`PREPARE`/`EXECUTE`, 129 -> 143 ms: the plan no longer folds
the parameters), views over the files instead of tables for `nodes` and `runtime_calls`
(no change), DuckDB optimizers disabled (no change), glibc malloc thresholds (no change on a
quiet machine). The first batch of a process pays ~13-22 k page faults (~40-60 ms of CPU)
for memory no earlier batch touched.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from tracedb import schema
from tracedb.errors import TracedbError

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tracedb.lake import DataFile


def metric_path(metric: str) -> Path:
    from tracedb.resources import sql_dir

    return sql_dir() / "metrics" / f"{metric}.sql"


# The `kernels` columns the metrics read (a metric reading another fails loudly: add it here).
COLUMNS = ("run_id", "rank", "device", "step", "stream", "kind", "start_ns", "duration_ns")
# ... and those the metrics without a `kind` parameter read besides
WHOLE_COLUMNS = ("name", "source_file", "launch_start_ns", "copy_kind", "bytes", "kernel_type", "grid", "block",
                 "registers_per_thread", "shared_memory_bytes", "occupancy", "correlation_id")
# The `nodes` columns the metrics read (view `whole.nodes`)
NODE_COLUMNS = ("run_id", "rank", "step", "start_ns", "duration_ns")
# The `runtime_calls` columns the metrics read (view `whole.runtime_calls`)
CALL_COLUMNS = ("run_id", "rank", "step", "source_file", "correlation_id", "name", "start_ns", "duration_ns")
# The `steps` columns the metrics read (view `whole.steps`: the step markers' spans)
STEP_COLUMNS = ("run_id", "rank", "step", "start_ns", "duration_ns")
# The source tables a rollup's metric reads and needs rows of (each entry: at least one of
# these tables; default: `kernels`): without them it has no rows, and is not run (a metric
# costs 3-18 ms of CPU on empty inputs, mostly DuckDB planning).
NEEDS: dict[str, tuple[tuple[str, ...], ...]] = {"rollup_step_times": (("kernels", "nodes", "steps"),),
                                                 "rollup_kernel_launches": (("kernels",), ("runtime_calls",))}


def has_inputs(table: str, have: set[str] | frozenset[str]) -> bool:
    """Whether the rollup `table`'s metric has rows to read when the source tables `have`
    have rows (`NEEDS`; else it is not run)."""
    return all(any(s in have for s in alts) for alts in NEEDS.get(table, (("kernels",),)))


# ... those of them besides `kernels` (backfill gathers their files too)
READS_ALSO: dict[str, tuple[str, ...]] = {
    table: tuple(dict.fromkeys(s for alts in needs for s in alts if s != "kernels")) for table, needs in NEEDS.items()}
# Every source table a metric reads, with the columns of its in-memory copy `whole.<table>`:
# the ingest hands the Writer a run's files of these tables.
WHOLE_SOURCES: dict[str, tuple[str, ...]] = {"kernels": COLUMNS + WHOLE_COLUMNS, "nodes": NODE_COLUMNS,
                                             "runtime_calls": CALL_COLUMNS, "steps": STEP_COLUMNS}


# The metrics, costliest first (CPU on the 8-rank Kineto job's 9,616 kernels, 58 k nodes and
# 9.5 k runtime calls, 2 cores): they start in this order on as many threads as cores.
COST_ORDER = ("rollup_stream_time", "rollup_gpu_busy_idle", "rollup_step_times", "rollup_device_time",
              "rollup_stream_overlap", "rollup_kernel_launches", "rollup_collectives",
              "rollup_memory_bandwidth", "rollup_kernel_launch_config")


class _Metric(NamedTuple):
    """A rollup's metric as the Writer runs it."""

    query: Any  # tracedb.query.CannedQuery
    values: dict[str, Any]  # its parameters at their defaults
    statement: Any  # the parsed SQL (DuckDB's Statement)
    cursor: Any  # its own cursor of the Writer's connection
    whole: bool  # no `kind` parameter: it reads the `whole` schema's tables


class Writer:
    """Computes and writes runs' rollups on one in-memory DuckDB connection, the metrics'
    SQL parsed once and each run on a cursor of its own kept open (a connection and the
    parsing cost ~50-100 ms under load, as much as the metrics themselves on a small run)."""

    def __init__(self) -> None:
        import duckdb

        from tracedb import query as q

        self.con = duckdb.connect()
        # a few thousand rows a run: one thread (the ingest's workers have the other cores)
        self.con.execute("SET enable_progress_bar = false")
        self.con.execute("SET threads = 1")
        self.con.execute("CREATE SCHEMA whole")
        self.metrics: dict[str, _Metric] = {}
        self._registered: set = set()  # fsspec protocols registered on the connection
        for table, metric in schema.ROLLUPS.items():
            cq = q.load(str(metric_path(metric)))
            whole = not any(p.name == "kind" for p in cq.params)
            cur = self.con.cursor()
            if whole:  # a cursor's own setting: `kernels` is then that schema's
                cur.execute("SET search_path = 'whole'")
            # parsed once (DuckDB's Statement): ~1.5 ms a metric a computation under load
            self.metrics[table] = _Metric(cq, q.bind(cq, {}, self.con), self.con.extract_statements(cq.sql)[-1], cur, whole)

    def close(self) -> None:
        for m in self.metrics.values():
            m.cursor.close()
        self.con.close()

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
        a `kind` parameter (seven of the nine) reads the `<i>*` rows only, from the
        in-memory table `whole.kernels` (`WHOLE_COLUMNS`), and `whole.nodes`
        (`NODE_COLUMNS`) or `whole.runtime_calls` (`CALL_COLUMNS`) for one that reads
        them (`READS_ALSO`): the sources are read once for all of
        them (as views over the files, each metric read them again: the eight metrics of
        the 17 MB TF run took 127 ms of CPU one after another, 101 ms from the tables;
        a commit group of 50 fleet runs holds ~0.5 M kernel rows there)."""
        out: list[dict[str, pa.Table]] = [{} for _ in sources]

        def keep(table: str, rows: pa.Table) -> None:
            for mine, part in zip(out, self._split(table, rows, len(sources))):
                mine[table] = part

        self._each(sources, self._todo(sources, tables), keep)
        return [{t: mine[t] for t in schema.ROLLUPS if t in mine} for mine in out]

    def _todo(self, sources: list[dict[str, str]], tables: list[str] | None) -> list[tuple[str, _Metric]]:
        """The metrics to run: those of `tables` (None: all) whose input tables have rows."""
        have = {t for src in sources for t in src}
        return [(t, m) for t, m in self.metrics.items() if (tables is None or t in tables) and has_inputs(t, have)]

    def _each(self, sources: list[dict[str, str]], todo: list[tuple[str, _Metric]],
              done: Callable[[str, pa.Table], None]) -> None:
        """Run the metrics of `todo` on `sources` (see `compute`), calling `done(table, rows)`
        with each one's rows in the thread that computed it, as each finishes."""
        from concurrent.futures import ThreadPoolExecutor

        from tracedb.lake import concurrently
        from tracedb.workers import cores

        if not todo:
            return
        loads = ["kernels", *dict.fromkeys(s for t, _ in todo for s in READS_ALSO.get(t, ()))]
        kinds = any(not m.whole for _, m in todo)
        try:
            concurrently([lambda t=t: self._load(sources, t, kinds and t == "kernels") for t in loads])
            todo = sorted(todo, key=lambda tm: COST_ORDER.index(tm[0]) if tm[0] in COST_ORDER else len(COST_ORDER))
            with ThreadPoolExecutor(min(len(todo), cores()), thread_name_prefix="tracedb-rollup") as pool:
                futures = [pool.submit(lambda t=t, m=m: done(t, self._run(m))) for t, m in todo]
            for f in futures:  # (all done: the pool's exit waits for them)
                f.result()
        finally:
            for table in ("kernels", *(f"whole.{t}" for t in WHOLE_SOURCES)):
                self.con.execute(f"DROP TABLE IF EXISTS {table}")

    def _load(self, sources: list[dict[str, str]], table: str, kinds: bool) -> None:
        """`whole.<table>`: every source's rows of `table` under run id `<i>*`, on a cursor of
        its own (the tables load at once); for `kernels` with `kinds`, then `kernels` too: the
        same rows once more for each kind present, under `<i>=<kind>` (from the in-memory
        table, not the files again)."""
        with self.con.cursor() as cur:
            cur.execute(f"""CREATE OR REPLACE TABLE whole.{table} AS
                SELECT * EXCLUDE (_source) REPLACE (_source || '*' AS run_id)
                FROM ({self._rows_of(sources, table, WHOLE_SOURCES[table])})""")
            if kinds:
                cur.execute(f"""CREATE OR REPLACE TABLE kernels AS
                    SELECT rtrim(k.run_id, '*') || coalesce('=' || s.kind, '*') AS run_id,
                           {', '.join(f"k.{c}" for c in COLUMNS if c != 'run_id')}
                    FROM whole.kernels k
                    JOIN (SELECT NULL AS kind UNION ALL SELECT DISTINCT kind FROM whole.kernels WHERE kind IS NOT NULL) s
                      ON s.kind IS NULL OR k.kind = s.kind""")

    @staticmethod
    def _run(m: _Metric) -> pa.Table:
        """The metric's rows, as `query.execute` gives them with no run named (no view to
        scope): the parsed statement on its cursor, through the DB-API result (with the
        relation API DuckDB binds each statement once more to make the relation; the nine
        metrics' fixed cost, on empty inputs, 78-89 -> 29-41 ms of CPU at load ~4)."""
        import duckdb
        import pyarrow as pa

        from tracedb import query as q

        try:
            cur = m.cursor.execute(m.statement, m.values)
            # Python rows, not Arrow from this DB-API result: DuckDB warns on that, and a
            # filter against the warning would change the process's. A metric's rows are
            # few; the file writer casts them to the table's types (`store.conform`).
            names, rows = [d[0] for d in cur.description], cur.fetchall()
            return q.plain_numbers(pa.table({n: [r[i] for r in rows] for i, n in enumerate(names)}))
        except duckdb.Error as e:
            raise TracedbError(f"{m.query.name}: {type(e).__name__}: {str(e).splitlines()[0]}") from e

    @staticmethod
    def _rows_of(sources: list[dict[str, str]], table: str, columns: tuple[str, ...]) -> str:
        """`table`'s rows of every source, numbered by `_source` (none: an empty relation)."""
        cols = ", ".join(columns)
        rows = [f"SELECT {cols}, {i} AS _source FROM {src[table]}" for i, src in enumerate(sources) if table in src]
        if rows:
            return " UNION ALL ".join(rows)
        sch = schema.TABLES[table]
        nulls = ", ".join(f"CAST(NULL AS {schema.duckdb_type(sch.field(c).type)}) AS {c}" for c in columns)
        return f"SELECT {nulls}, 0 AS _source WHERE false"

    @staticmethod
    def _split(table: str, rows: pa.Table, n: int) -> list[pa.Table]:
        """A metric's rows for each of `n` sources (run ids `<i>*` / `<i>=<kind>`), with the
        kind column filled."""
        import pyarrow as pa
        import pyarrow.compute as pc

        # vectorised: a Python regex a row took 8 ms of the 7.5 k launches of the 8-rank Kineto job
        parts = pc.extract_regex(rows.column("run_id").cast(pa.string()), r"(?s)^(?P<source>\d+)(?P<sep>[*=])(?P<kind>.*)$")
        source = pc.struct_field(parts, "source").cast(pa.int64())
        rows = rows.append_column("kind", pc.if_else(pc.equal(pc.struct_field(parts, "sep"), "="),
                                                     pc.struct_field(parts, "kind"), pa.scalar(None, pa.string())))
        if "device" not in rows.column_names:  # a rollup over every device (step_times): its constant partition
            rows = rows.append_column("device", pa.repeat(pa.scalar(schema.STEP_TIMES_DEVICE), rows.num_rows))
        rows = rows.select([c for c in schema.TABLES[table].names if c != "run_id"])
        return [rows.filter(pc.equal(source, i)) for i in range(n)]

    def write_runs(self, root: Path | str, runs: list[tuple[str, str, list[str]]],
                   tables: list[str] | None = None, tag: str = "rollup") -> list[DataFile]:
        """Compute the rollups of `runs` (run_id, ingest_id, its parquet files of the
        `WHOLE_SOURCES` tables: paths relative to the warehouse, `<table>/run_id=...`, Hive-partitioned;
        only the rows of that ingest) and write them into the lake under each run's
        ingest_id, uncommitted. `tables`: only these rollup tables."""
        from tracedb import storage
        from tracedb.snapshot import view_sql
        from tracedb.store import FileWriter

        runs = [r for r in runs if r[2]]
        if not runs:
            return []
        store = storage.open_storage(storage.location(root))
        if store.remote and store.fs.protocol not in self._registered:  # DuckDB reads through fsspec
            self.con.register_filesystem(store.fs)
            self._registered.add(store.fs.protocol)
        sources = []
        for _, ingest_id, files in runs:
            by_table: dict[str, list[str]] = {}
            for f in files:
                by_table.setdefault(f.split("/", 1)[0], []).append(store.absolute(f))
            sources.append({table: f"({view_sql('*', paths, mixed=False)} WHERE ingest_id = {storage.sql_str(ingest_id)})"
                            for table, paths in by_table.items()})  # as the snapshot reads them
        written: list[DataFile] = []
        lock = threading.Lock()

        def write(table: str, rows: pa.Table) -> None:
            """A metric's rows, each run's into its file, written in the metric's thread
            while the others compute."""
            for (run_id, ingest_id, _), rollups in zip(runs, self._split(table, rows, len(runs))):
                writer = FileWriter(root, run_id, ingest_id, f"{ingest_id}-{tag}")
                try:
                    writer.write(table, rollups)
                    files = writer.close()
                except BaseException:
                    writer.abort()
                    raise
                with lock:
                    written.extend(files)

        try:
            self._each(sources, self._todo(sources, tables), write)
        except BaseException:
            for f in written:
                store.unlink(f.rel)
            raise
        order = {run_id: i for i, (run_id, _, _) in enumerate(runs)}
        return sorted(written, key=lambda f: (order[f.run_id], list(schema.ROLLUPS).index(f.table), f.device))


def backfill(lake, tables: list[str], tag: str, anew: bool = False) -> None:
    """Fill `tables` (rollup tables) for every run of `lake` from its live `kernels` files
    (and those of `READS_ALSO`),
    under the run's live ingest_id, as an ingest would have (migrations 0006-0008).
    Safe to re-run after a crash: a run that already has a table's rollup is left alone in
    that table. One Delta commit per table. With `anew` (a metric whose definition
    changed), every run's rows are computed again and each table's live files are swapped
    for the new ones in its one commit (`Lake.replace_tables`)."""
    lake.ensure_tables()
    live = {r["run_id"]: r["ingest_id"] for r in lake.read_table("runs", ["run_id", "ingest_id"]).to_pylist()}
    have = {t: set() if anew else {r["run_id"] for r in lake.add_actions(t).to_pylist()} for t in tables}
    inputs: dict[str, list[str]] = {}  # run -> its live files of the tables the metrics read
    for source in ("kernels", *sorted({s for t in tables for s in READS_ALSO.get(t, ())})):
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
                files += roll.write_runs(lake.root, todo[i:i + 50], tables=list(missing), tag=tag)
        if anew:
            lake.replace_tables(tables, files)
        else:
            lake._add_files(files)  # one Delta commit per rollup table, checksums recorded
    except BaseException:
        lake.discard(files)
        raise
    finally:
        roll.close()
