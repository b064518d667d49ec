"""Numbered, single-purpose migrations of a warehouse's catalog, discovered by sorting.

`migrations/NNNN_name.sql` runs as SQL against catalog.duckdb; `NNNN_name.py` defines
`up(con, warehouse)` for changes that must touch parquet files. Each applied migration is
recorded in `tracedb_migrations`, so `migrate` is idempotent.

The views read each table's files with one schema (bound from a single footer), so a
migration that adds a column to a table in `tracedb/schema.py` must be a `.py` one calling
`conform_table_files(con, warehouse, "kernels")`: it rewrites the old files with the new
column as NULL.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from tracedb.resources import migrations_dir

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.(sql|py)$")


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    path: Path


def discover(folder: Path | None = None) -> list[Migration]:
    folder = folder or migrations_dir()
    found = []
    for p in sorted(folder.iterdir()):
        m = _NAME.match(p.name)
        if m:
            found.append(Migration(int(m[1]), m[2], p))
    numbers = [m.number for m in found]
    if numbers != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migrations must be numbered 0001.. without gaps, found {numbers}")
    return found


def latest() -> int:
    return len(discover())


def applied(con: duckdb.DuckDBPyConnection) -> set[int]:
    """Numbers of the applied migrations (none for a new catalog); works read-only."""
    try:
        return {r[0] for r in con.execute("SELECT number FROM tracedb_migrations").fetchall()}
    except duckdb.CatalogException:
        return set()


def pending(con: duckdb.DuckDBPyConnection) -> list[Migration]:
    done = applied(con)
    return [m for m in discover() if m.number not in done]


def apply(con: duckdb.DuckDBPyConnection, warehouse: Path, migration: Migration) -> None:
    """Apply one migration in its own transaction."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS tracedb_migrations "
        "(number INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMPTZ DEFAULT now())"
    )
    con.execute("BEGIN")
    try:
        if migration.path.suffix == ".sql":
            con.execute(migration.path.read_text())
        else:
            spec = importlib.util.spec_from_file_location(f"tracedb_migration_{migration.number}", migration.path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            module.up(con, warehouse)
        con.execute("INSERT INTO tracedb_migrations (number, name) VALUES (?, ?)", [migration.number, migration.name])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


def conform_table_files(con: duckdb.DuckDBPyConnection, warehouse: Path, table: str) -> int:
    """Rewrite every parquet file of `table` in the table's current schema (new columns
    NULL, types cast); returns how many files changed."""
    from tracedb import schema
    from tracedb.store import conform

    target = schema.TABLES[table]
    changed = 0
    for (rel,) in con.execute("SELECT path FROM tracedb_data_files WHERE table_name = ?", [table]).fetchall():
        path = warehouse / rel
        old = pq.read_table(path)
        if old.schema.equals(target, check_metadata=False):
            continue
        tmp = path.with_suffix(".parquet.tmp")
        pq.write_table(conform(old, table, {}), tmp, compression="zstd")
        tmp.replace(path)
        changed += 1
    return changed
