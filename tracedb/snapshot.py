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

Run-scoped views. A data view lists every live file of its table (99 KB of SQL at 1,000
runs) and DuckDB binds that list, with its Hive partitions, each time a query names the
view: 15-23 ms per reference at 1,000 runs against 2 ms at 100, so a one-run query got
slower as the fleet grew (`collectives` names `kernels` four times: 111-131 ms). The
snapshot also records each live file's run (`tracedb_live_files`) and how each view is
built (`view_parts` in `tracedb_meta`); a query whose header says it reads only the runs
its parameters name (`-- scope: run_id`) runs against TEMP views over those runs' files
alone (`scope_to_runs`), which shadow the snapshot's views for that query: 1.7-3 ms a
reference whatever the number of runs (the bench's 1,000-run fleet, one file a run).
"""

from __future__ import annotations

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
          "rollup_kernel_launches", "runs", "files", "ingest_log", "checksums", "acceptances")
LAKE_JSON = "_tracedb/lake.json"
CATALOG = "catalog.duckdb"
# What a snapshot holds besides the views; part of the recorded state, so a snapshot an
# older tracedb wrote is rebuilt once. 2: tracedb_live_files and view_parts (run scoping).
SNAPSHOT_FORMAT = 2


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


def view_sql(columns: str, paths: list[str], mixed: bool) -> str:
    """A data view over these files (absolute paths or URLs): the snapshot's views
    (`catalog._build`) and the run-scoped ones alike."""
    listed = "[" + ", ".join(sql_str(p) for p in paths) + "]"
    # run_id and device come from the Hive paths (URL-decoded by DuckDB): a filter on
    # either skips other runs' files unopened. Every file has the table's full schema.
    where = (" WHERE (run_id, ingest_id) IN (SELECT run_id, ingest_id FROM tracedb_runs)" if mixed else "")
    return (f"SELECT {columns} FROM read_parquet({listed}, hive_partitioning = true, "
            "hive_types = {'run_id': VARCHAR, 'device': VARCHAR})" + where)


def scope_to_runs(con: duckdb.DuckDBPyConnection, runs: list[str], sql: str) -> list[str] | None:
    """Shadow the snapshot's data views that `sql` names with TEMP views over these runs'
    live files only. Returns the views made, for `unscope`. None (nothing made) on a
    connection without the snapshot's record of live files: an older snapshot, or a
    connection over other files (`tracedb.rollups`)."""
    try:
        parts = con.execute("SELECT value FROM tracedb_meta WHERE key = 'view_parts'").fetchall()  # not fetchone: DuckDB 2.0.1 keeps its result open
        if not parts:
            return None
        listed = con.execute(
            "SELECT table_name, path FROM tracedb_live_files WHERE list_contains(?, run_id) "
            "ORDER BY table_name, path", [runs]).fetchall()
    except duckdb.CatalogException:
        return None
    files: dict[str, list[str]] = {}
    for table, path in listed:
        files.setdefault(table, []).append(path)
    made = []
    for table, part in json.loads(parts[0][0]).items():
        if not re.search(rf"\b{table}\b", sql, re.IGNORECASE):  # each view costs ~1 ms to make and drop
            continue
        paths = files.get(table)
        body = view_sql(part["columns"], paths, part["mixed"]) if paths else part["empty"]
        con.execute(f'CREATE OR REPLACE TEMP VIEW "{table}" AS {body}')
        made.append(table)
    return made


def unscope(con: duckdb.DuckDBPyConnection, made: list[str]) -> None:
    """Drop the TEMP views `scope_to_runs` made: the snapshot's views show again."""
    for table in made:
        con.execute(f'DROP VIEW IF EXISTS temp.main."{table}"')
