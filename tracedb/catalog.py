"""catalog.duckdb: the views over the parquet files, plus small metadata tables.

The views list their parquet files explicitly (paths relative to the warehouse), and a
run is replaced in one DuckDB transaction that swaps its file list and recreates the
views: a reader sees the old run or the new one, never half of either. DuckDB resolves
relative paths against `file_search_path`; `connect` sets it to the warehouse, and any
other client can do the same (`SET file_search_path = '/path/to/warehouse'`) or simply
start in the warehouse folder. That is what lets a warehouse be moved or copied.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import duckdb
import pyarrow as pa

from tracedb import migrate, schema
from tracedb.errors import TracedbError

CATALOG = "catalog.duckdb"
# Columns of `runs` that come straight from tracedb_runs; other run.json labels become
# extra columns of the view.
_RUN_COLUMNS = [f.name for f in schema.RUNS]


def default_warehouse() -> Path:
    return Path(os.environ.get("TRACEDB_WAREHOUSE") or "tracedb-warehouse")


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _search_root(warehouse: Path) -> str:
    """The folder the views' relative paths resolve against; refused if DuckDB cannot use it."""
    root = str(warehouse.resolve())
    if "," in root:
        # file_search_path is a comma-separated list with no escaping.
        raise TracedbError(f"warehouse path {root!r} contains a comma, which DuckDB cannot search; use another folder")
    return root


def _open(warehouse: Path, read_only: bool, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """catalog.duckdb with its relative paths resolving against the warehouse."""
    root = _search_root(warehouse)
    path = warehouse / CATALOG
    try:
        con = duckdb.connect(str(path), read_only=read_only, config=config or {})
    except duckdb.Error as e:
        mode = "" if read_only else " for writing"
        raise TracedbError(f"cannot open {path}{mode}: {e}") from e
    con.execute(f"SET file_search_path = {_sql_str(root)}")
    con.execute("SET enable_progress_bar = false")  # DuckDB would print it into the API user's stdout
    return con


def _require_current(con: duckdb.DuckDBPyConnection, warehouse: Path) -> None:
    """Refuse (closing con) a warehouse with pending migrations."""
    missing = migrate.pending(con)
    if missing:
        con.close()
        names = ", ".join(f"{m.number:04d}_{m.name}" for m in missing)
        raise TracedbError(
            f"warehouse {warehouse} was made by an older tracedb (pending migrations: {names}); "
            f"run `tracedb migrate --warehouse {warehouse}`"
        )


def _upgrade(con: duckdb.DuckDBPyConnection, warehouse: Path) -> list[str]:
    """Apply pending migrations, record the schema version, rebuild the views."""
    done = []
    for m in migrate.pending(con):
        migrate.apply(con, warehouse, m)
        done.append(f"{m.number:04d}_{m.name}")
    con.execute("INSERT OR REPLACE INTO tracedb_meta VALUES ('schema_version', ?)", [str(schema.SCHEMA_VERSION)])
    refresh_views(con)
    return done


def query_arrow(con: duckdb.DuckDBPyConnection, sql: str, params: dict | list | None = None) -> pa.Table:
    """Run SQL with bound parameters and return an Arrow table (duckdb 1.x and 2.x)."""
    rel = con.sql(sql, params=params or None)
    if rel is None:  # a statement without a result
        return pa.table({})
    fetch = getattr(rel, "to_arrow_table", None) or rel.arrow
    return fetch()


def connect(warehouse: Path | None = None, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """Open a warehouse's catalog with the views ready to query."""
    warehouse = Path(warehouse or default_warehouse())
    if not (warehouse / CATALOG).is_file():
        raise TracedbError(f"no warehouse at {warehouse} ({CATALOG} not found); run `tracedb ingest` first")
    con = _open(warehouse, read_only)
    _require_current(con, warehouse)
    return con


def open_for_write(warehouse: Path) -> duckdb.DuckDBPyConnection:
    """Open (creating if new) a warehouse for ingest; an old one must be migrated first."""
    _search_root(warehouse)  # refuse before creating anything
    warehouse.mkdir(parents=True, exist_ok=True)
    fresh = not (warehouse / CATALOG).exists()
    # A new catalog is written in DuckDB 1.0's storage format, so BI tools and CLIs that
    # embed an older DuckDB than ours still open it.
    con = _open(warehouse, read_only=False,
                config={"storage_compatibility_version": "v1.0.0"} if fresh else None)
    if fresh:
        _upgrade(con, warehouse)
    else:
        _require_current(con, warehouse)
    return con


@contextmanager
def writing(warehouse: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """`with writing(wh) as con:` an open_for_write connection, closed afterwards."""
    con = open_for_write(warehouse)
    try:
        yield con
    finally:
        con.close()


def migrate_warehouse(warehouse: Path) -> list[str]:
    """Apply pending migrations; returns their names."""
    if not (warehouse / CATALOG).is_file():
        raise TracedbError(f"no warehouse at {warehouse} ({CATALOG} not found)")
    con = _open(warehouse, read_only=False)
    try:
        return _upgrade(con, warehouse)
    finally:
        con.close()


def _empty_select(sch) -> str:
    cols = ", ".join(f"CAST(NULL AS {schema.duckdb_type(f.type)}) AS {_ident(f.name)}" for f in sch)
    return f"SELECT {cols} WHERE false"


def _table_view_sql(con: duckdb.DuckDBPyConnection, table: str) -> str:
    sch = schema.TABLES[table]
    paths = [r[0] for r in con.execute(
        "SELECT path FROM tracedb_data_files WHERE table_name = ? ORDER BY run_id, device, path", [table]
    ).fetchall()]
    if not paths:
        return _empty_select(sch)
    cols = ", ".join(_ident(f.name) for f in sch)
    files = "[" + ", ".join(_sql_str(p) for p in paths) + "]"
    # Every file of a table is written with the table's full schema (store.conform), so
    # DuckDB binds from one footer; union_by_name would read all of them on every refresh.
    # run_id and device are in the files and in the Hive paths (URL-decoded by DuckDB):
    # reading the paths lets a filter on either skip other runs' files unopened.
    return (f"SELECT {cols} FROM read_parquet({files}, hive_partitioning = true, "
            "hive_types = {'run_id': VARCHAR, 'device': VARCHAR})")


def label_path(key: str) -> str:
    """JSON path of a run.json label; DuckDB does not decode \\u escapes in paths."""
    return "$." + json.dumps(key, ensure_ascii=False)


def _runs_view_sql(con: duckdb.DuckDBPyConnection) -> str:
    # DuckDB identifiers are case-insensitive: a label `Model` would collide with `model`.
    taken = {c.lower() for c in _RUN_COLUMNS}
    keys = []
    for k in sorted({
        k for (labels,) in con.execute("SELECT labels FROM tracedb_runs WHERE labels IS NOT NULL").fetchall()
        for k in json.loads(labels)
    }):
        if k.strip() and k.lower() not in taken:
            taken.add(k.lower())
            keys.append(k)
    extra = "".join(
        f", json_extract_string(labels, {_sql_str(label_path(k))}) AS {_ident(k)}" for k in keys
    )
    return f"SELECT {', '.join(_ident(c) for c in _RUN_COLUMNS)}{extra} FROM tracedb_runs"


def refresh_views(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)create every view from the metadata tables; call inside the committing transaction."""
    for table in schema.TABLES:
        con.execute(f"CREATE OR REPLACE VIEW {table} AS {_table_view_sql(con, table)}")
    con.execute(f"CREATE OR REPLACE VIEW runs AS {_runs_view_sql(con)}")
    con.execute("CREATE OR REPLACE VIEW files AS SELECT * FROM tracedb_files")
    con.execute("CREATE OR REPLACE VIEW ingest_log AS SELECT * FROM tracedb_ingest_log")


@dataclass
class StagedFile:
    table: str
    device: str
    staged: Path  # absolute path in staging
    final: str  # relative to the warehouse
    rows: int


@dataclass
class RunCommit:
    """One run's part of a commit. replace=False (no source file of the run could be read)
    keeps the run's previous data and only records the errors."""

    run_row: dict
    staged: list[StagedFile]
    file_rows: list[dict]
    replace: bool


def commit_runs(con: duckdb.DuckDBPyConnection, warehouse: Path, ingest_id: str, runs: list[RunCommit]) -> None:
    """Make runs' staged files live and record their source files, in one transaction.

    Several runs share a transaction so that recreating the views (which lists every
    file of the warehouse) is paid once per group, not once per run.
    """
    moved: list[Path] = []
    old_paths: list[str] = []
    try:
        for run in runs:
            if run.replace:
                for s in run.staged:
                    dest = warehouse / s.final
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(s.staged, dest)
                    moved.append(dest)
        con.execute("BEGIN")
        try:
            for run in runs:
                old_paths += _record_run(con, ingest_id, run)
            refresh_views(con)
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
    except Exception:
        for dest in moved:
            dest.unlink(missing_ok=True)
        raise
    new = {s.final for run in runs for s in run.staged}
    for p in old_paths:
        if p not in new:
            _remove_with_empty_parents(warehouse, warehouse / p)


def _record_run(con: duckdb.DuckDBPyConnection, ingest_id: str, run: RunCommit) -> list[str]:
    """Swap one run's metadata rows inside the open transaction; returns its old file paths."""
    run_id = run.run_row["run_id"]
    old_paths: list[str] = []
    if run.replace:
        old_paths = [r[0] for r in con.execute(
            "SELECT path FROM tracedb_data_files WHERE run_id = ?", [run_id]).fetchall()]
        con.execute("DELETE FROM tracedb_data_files WHERE run_id = ?", [run_id])
        if run.staged:
            con.executemany(
                "INSERT INTO tracedb_data_files VALUES (?, ?, ?, ?, ?, ?)",
                [[s.table, run_id, s.device, s.final, s.rows, ingest_id] for s in run.staged],
            )
        con.execute("DELETE FROM tracedb_files WHERE run_id = ?", [run_id])
        con.execute("DELETE FROM tracedb_runs WHERE run_id = ?", [run_id])
        con.execute(
            f"INSERT INTO tracedb_runs ({', '.join(_ident(c) for c in _RUN_COLUMNS)}) "
            f"VALUES ({', '.join('?' for _ in _RUN_COLUMNS)})",
            [run.run_row.get(c) for c in _RUN_COLUMNS],
        )
    if run.file_rows:
        cols = list(run.file_rows[0])
        names, marks = ", ".join(cols), ", ".join("?" for _ in cols)
        rows = [[r[c] for c in cols] for r in run.file_rows]
        if not run.replace:  # the run's old data stays; its files' rows show this attempt
            con.execute("DELETE FROM tracedb_files WHERE run_id = ? AND list_contains(?, path)",
                        [run_id, [r["path"] for r in run.file_rows]])
        con.executemany(f"INSERT INTO tracedb_files ({names}) VALUES ({marks})", rows)
        con.executemany(f"INSERT INTO tracedb_ingest_log ({names}) VALUES ({marks})", rows)
    return old_paths


def delete_runs(con: duckdb.DuckDBPyConnection, warehouse: Path, run_ids: list[str]) -> list[str]:
    """Remove runs (their data files and records) in one transaction; returns those found.

    The ingest log keeps their history."""
    found = [r[0] for r in con.execute(
        "SELECT run_id FROM tracedb_runs WHERE list_contains(?, run_id) ORDER BY run_id", [run_ids]).fetchall()]
    missing = sorted(set(run_ids) - set(found))
    if missing:
        raise TracedbError(f"no such run(s): {', '.join(missing)}")
    con.execute("BEGIN")
    try:
        paths = [r[0] for r in con.execute(
            "SELECT path FROM tracedb_data_files WHERE list_contains(?, run_id)", [found]).fetchall()]
        for table in ("tracedb_data_files", "tracedb_files", "tracedb_runs"):
            con.execute(f"DELETE FROM {table} WHERE list_contains(?, run_id)", [found])
        refresh_views(con)
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    for p in paths:
        _remove_with_empty_parents(warehouse, warehouse / p)
    return found


def vacuum(con: duckdb.DuckDBPyConnection, warehouse: Path) -> list[Path]:
    """Delete parquet files no view lists (left by an ingest that crashed between moving
    its files and committing) and leftover staging folders; returns what was removed."""
    from tracedb import schema
    from tracedb.store import STAGING

    live = {r[0] for r in con.execute("SELECT path FROM tracedb_data_files").fetchall()}
    removed = []
    for table in schema.TABLES:
        for path in sorted((warehouse / table).rglob("*.parquet")):
            if path.relative_to(warehouse).as_posix() not in live:
                _remove_with_empty_parents(warehouse, path)
                removed.append(path)
    if (warehouse / STAGING).is_dir():
        removed.append(warehouse / STAGING)
        shutil.rmtree(warehouse / STAGING, ignore_errors=True)
    return removed


def _remove_with_empty_parents(root: Path, path: Path) -> None:
    path.unlink(missing_ok=True)
    parent = path.parent
    while parent != root and parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
        parent = parent.parent


def remove_staging(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
