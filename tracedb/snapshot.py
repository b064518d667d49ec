"""Opening a fresh catalog snapshot without the lake module: `tracedb query`'s fast path.

`catalog.connect` opens the lake (`tracedb.lake`, whose schema is pyarrow's: with numpy
~110 ms of the 150 ms start-up budget, issue 12 item 6) to tell whether catalog.duckdb is
fresh. For a local warehouse the same answer costs a directory listing per Delta table:
the snapshot records the lake state it was built from (`catalog._lake_state`: the
resolved root and each table's latest log version), and the log folders give the current
one. When both agree, every table exists and no migration is pending, the snapshot is
exactly what `catalog.connect` would open. Otherwise (stale, missing, damaged, a schema-1
or remote warehouse, a migration pending, a table to create) `attach_fresh` says no and
the caller uses `catalog.connect`, which rebuilds, migrates or raises as before.

Run-scoped views. A data view reads its live files as a `read_parquet` list (`view_sql`):
DuckDB binds it by its first file and, as it scans, opens each file's footer and skips the
row groups whose run_id statistics cannot hold the runs asked for. The
snapshot also records each live file's run range (`tracedb_live_files`) and how each view
is built (`view_parts` in `tracedb_meta`); a query whose header says it reads only the
runs its parameters name (`-- scope: run_id`) runs against TEMP views over the files whose
range holds those runs (`scope_to_runs`), which shadow the snapshot's views for that query.
(Schema 7 listed a file a run and device: 15-23 ms a reference at 1,000 runs.)
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import duckdb

from tracedb.storage import latest_log_version, sql_str

# The lake's tables (`schema.ALL_TABLES`) and files (`lake.LAKE_JSON`, `catalog.CATALOG`),
# repeated here without pyarrow; tests/test_startup.py keeps them equal. Were one to
# drift, the recorded state would not match and every query would take the slow path.
TABLES = ("nodes", "kernels", "tensors", "allocations", "runtime_calls", "annotations", "steps", "events",
          "rollup_gpu_busy_idle", "rollup_stream_overlap", "rollup_collectives", "rollup_stream_time",
          "rollup_memory_bandwidth", "rollup_device_time", "rollup_step_times", "rollup_kernel_launch_config",
          "rollup_kernel_launches", "rollup_kernel_names", "rollup_kernel_histogram", "rollup_op_summary",
          "rollup_nccl_bandwidth", "rollup_memcpy_summary", "rollup_run_summary", "rollup_step_flops", "runs", "files", "ingest_log", "checksums", "acceptances")
LAKE_JSON = "_tracedb/lake.json"
CATALOG = "catalog.duckdb"
# What a snapshot holds besides the views; part of the recorded state, so a snapshot an
# older tracedb wrote is rebuilt once. 2: tracedb_live_files and view_parts (run scoping).
# 3: tracedb_live_files records each file's run range (run_lo, run_hi), not a row a run.
# 4: and whether it holds live rows only (`whole`: its views' branch has no live filter).
# 5: data views read a list of files (two: with and without the live filter), not a branch a file.
SNAPSHOT_FORMAT = 5


def log_version(table_dir: Path) -> int:
    """The latest Delta version of a table from its log folder listing (as `Lake.versions`)."""
    try:
        return latest_log_version(os.listdir(table_dir / "_delta_log"))
    except OSError:
        return -1


def lake_state(root: Path) -> dict:
    """The state `catalog._lake_state` computes for a local lake."""
    return {"root": str(root.resolve()), "versions": {t: log_version(root / t) for t in TABLES},
            "format": SNAPSHOT_FORMAT}


def _migrations_done(root: Path) -> bool:
    from tracedb import migrations

    done = {m["number"] for m in json.loads((root / LAKE_JSON).read_text()).get("migrations", [])}
    return all(m.number in done for m in migrations.discover())


def attach_fresh(con: duckdb.DuckDBPyConnection, warehouse: Path) -> bool:
    """ATTACH the warehouse's snapshot read-only as `tracedb` and USE it, when it is fresh;
    False (nothing attached) when `catalog.connect` must decide."""
    root = Path(warehouse)
    path = root / CATALOG
    if not (root / LAKE_JSON).is_file() or not path.is_file():
        return False
    try:
        con.execute(f"ATTACH {sql_str(str(path))} AS tracedb (READ_ONLY)")
    except duckdb.Error:
        return False
    try:
        recorded = json.loads(con.execute(
            "SELECT value FROM tracedb.tracedb_meta WHERE key = 'lake_state'").fetchone()[0])
        state = lake_state(root)
        fresh = (recorded == state and min(state["versions"].values()) >= 0 and _migrations_done(root))
    except (duckdb.Error, TypeError, ValueError, OSError, AttributeError):
        fresh = False
    con.execute("USE tracedb" if fresh else "DETACH tracedb")
    return fresh


# Every data view keeps the rows of each run's live ingest only: a file holds many runs,
# some of them re-ingested or removed since it was written (their rows go at compaction).
# A file known to hold live rows only (`Lake.whole_files`) is read without the filter.
LIVE_FILTER = "(run_id, ingest_id) IN (SELECT run_id, ingest_id FROM tracedb_runs)"


def view_sql(columns: str, files: list[tuple[str, str, str, bool]], hive: bool = False) -> str:
    """A data view over these files (absolute path or URL, least and greatest run_id,
    whether every row is live): the snapshot's views (`catalog._build`) and the run-scoped
    ones alike. The files are one `read_parquet` list, or two: those that may hold dead
    rows under the live filter (it costs a semi-join per row), the others without it.
    DuckDB binds a list by its first file and skips row groups by their run_id statistics
    as it scans (a file's rows are in run order); a branch a file, each filtered on its
    run range, made DuckDB read every file's footer to bind the view before its optimizer
    dropped any branch: ~6 ms a file for a publish and for every query that names the
    view (at 50,000 runs, 54 kernels files: 0.45-0.69 s to plan a one-run count, against
    0.015 s for the list; bench/RESULTS.md, "Session 14: views"). The files of a list
    share their columns (`lake.file_schema`; migrations conform older files). `hive`:
    files of the partitioned layout of schema <= 7 (run_id and device in the paths)."""
    def listed(paths: list[str]) -> str:
        return "[" + ", ".join(sql_str(p) for p in paths) + "]"

    if hive:
        return (f"SELECT {columns} FROM read_parquet({listed([f[0] for f in files])}, hive_partitioning = true, "
                "hive_types = {'run_id': VARCHAR, 'device': VARCHAR}) WHERE " + LIVE_FILTER)
    whole = [p for p, _, _, all_live in files if all_live]
    filtered = [p for p, _, _, all_live in files if not all_live]
    parts = [f"SELECT {columns} FROM read_parquet({listed(whole)})"] if whole else []
    if filtered:
        parts.append(f"SELECT {columns} FROM (SELECT {columns}, ingest_id FROM read_parquet({listed(filtered)})) "
                     f"WHERE {LIVE_FILTER}")
    return " UNION ALL ".join(parts)


def scope_to_runs(con: duckdb.DuckDBPyConnection, runs: list[str], sql: str,
                  rows: bool = False) -> list[str] | None:
    """Shadow the snapshot's data views that `sql` names with TEMP views over these runs'
    live files only. Returns the views made, for `unscope`. None (nothing made) on a
    connection without the snapshot's record of live files: an older snapshot, or a
    connection over other files (`tracedb.rollups`). A file holds many runs (one
    ingest's): rows=True also leaves out the other runs' rows (`runs=` of ad-hoc SQL and
    the report), where a canned query's own scoping leaves that to its run filter."""
    try:
        parts = con.execute("SELECT value FROM tracedb_meta WHERE key = 'view_parts'").fetchall()  # not fetchone: DuckDB 2.0.1 keeps its result open
        if not parts:
            return None
        # each view costs ~1 ms to make and drop: only those the text names outside comment lines
        words = _words(sql)
        named = [(table, part) for table, part in json.loads(parts[0][0]).items() if table in words]
        listed = _files_of(con, runs, [table for table, _ in named]) if named else []
    except duckdb.Error:  # an older snapshot (no such table or column)
        return None
    files: dict[str, list[tuple[str, str, str, bool]]] = {}
    for table, path, lo, hi, whole in sorted(listed):
        files.setdefault(table, []).append((path, lo, hi, whole))
    made = []
    for table, part in named:
        paths = files.get(table)
        body = view_sql(part["columns"], paths, part.get("hive", False)) if paths else part["empty"]
        if paths and rows:
            body = f"SELECT * FROM ({body}) WHERE run_id IN ({', '.join(sql_str(r) for r in runs)})"
        con.execute(f'CREATE OR REPLACE TEMP VIEW "{table}" AS {body}')
        made.append(table)
    return made


@functools.lru_cache(maxsize=256)  # a canned query's text is scoped again at each run
def _words(sql: str) -> frozenset[str]:
    """The lower-cased words of the SQL outside its whole-line `--` comments (a canned
    query's header and the metrics' notes name tables they do not read)."""
    body = "\n".join(ln for ln in sql.splitlines() if not ln.lstrip().startswith("--"))
    return frozenset(re.findall(r"\w+", body.lower()))


def _files_of(con: duckdb.DuckDBPyConnection, runs: list[str], tables: list[str]) -> list[tuple]:
    """(table, path, run_lo, run_hi, whole) of the live files of these tables whose run
    range holds one of the runs, each once. A few runs: one range test a run, ORed, which
    DuckDB answers in about a third of the time of the join with the list of runs and its
    DISTINCT (bench/RESULTS.md, session 14)."""
    where = "table_name IN (" + ", ".join("?" * len(tables)) + ")"
    if len(runs) <= 16:
        ranges = " OR ".join(["? BETWEEN run_lo AND run_hi"] * len(runs))
        return con.execute(f"SELECT table_name, path, run_lo, run_hi, whole FROM tracedb_live_files "
                           f"WHERE {where} AND ({ranges})", [*tables, *runs]).fetchall()
    return con.execute(
        "SELECT DISTINCT table_name, path, run_lo, run_hi, whole FROM tracedb_live_files, unnest(?) AS r(run) "
        f"WHERE {where} AND r.run BETWEEN run_lo AND run_hi", [runs, *tables]).fetchall()


def unscope(con: duckdb.DuckDBPyConnection, made: list[str]) -> None:
    """Drop the TEMP views `scope_to_runs` made: the snapshot's views show again."""
    for table in made:
        con.execute(f'DROP VIEW IF EXISTS temp.main."{table}"')
