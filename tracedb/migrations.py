"""The migration registry: which numbered migrations exist, which a warehouse has applied.

Migrations live in `migrations/NNNN_name.(sql|py)` (the package's resources), numbered
without gaps and applied in order by `tracedb.migrate` (the runner). This module only
reads: the folder listing, a migration's `TARGET`, a lake's `_tracedb/lake.json` record
and a schema-1 catalog's `tracedb_migrations` table. The catalog and the snapshot ask it
whether a warehouse is current; they never need the runner (which publishes through the
catalog), so the two do not import each other.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from tracedb.errors import TracedbError
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


def load(migration: Migration):
    spec = importlib.util.spec_from_file_location(f"tracedb_migration_{migration.number}", migration.path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def target(migration: Migration) -> str:
    """'catalog' (schema-1 catalog.duckdb) or 'lake'."""
    if migration.path.suffix == ".sql":
        return "catalog"
    return getattr(load(migration), "TARGET", "lake")


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def all_records(note: str) -> list[dict]:
    return [{"number": m.number, "name": m.name, "applied_at": _now(), "note": note} for m in discover()]


def label(m: Migration) -> str:
    return f"{m.number:04d}_{m.name}"


def pending_names(warehouse: Path) -> list[str]:
    """Pending migrations of a schema-1 warehouse (its catalog read read-only)."""
    try:
        con = duckdb.connect(str(warehouse / "catalog.duckdb"), read_only=True)
    except duckdb.Error:
        return [label(m) for m in discover()]
    try:
        done = applied(con)
    finally:
        con.close()
    return [label(m) for m in discover() if m.number not in done]


def require_current(lake) -> None:
    done = {m["number"] for m in lake.read_meta().get("migrations", [])}
    missing = [label(m) for m in discover() if m.number not in done]
    if missing:
        raise TracedbError(
            f"warehouse {lake.root} was made by an older tracedb (pending migrations: {', '.join(missing)}); "
            f"run `tracedb migrate --warehouse {lake.root}`")


def applied(con: duckdb.DuckDBPyConnection) -> set[int]:
    """Numbers of the applied migrations (none for a new catalog); works read-only."""
    try:
        return {r[0] for r in con.execute("SELECT number FROM tracedb_migrations").fetchall()}
    except duckdb.CatalogException:
        return set()


def pending(con: duckdb.DuckDBPyConnection) -> list[Migration]:
    done = applied(con)
    return [m for m in discover() if m.number not in done]
