"""Numbered, single-purpose migrations, discovered by sorting, recorded, idempotent.

Two eras:

- Schema 1 kept everything in catalog.duckdb. `migrations/NNNN_name.sql` (0001-0003) run
  as SQL against that catalog, recorded in its `tracedb_migrations` table, and
  `0004_delta_lake.py` (`TARGET = "catalog"`, `up(con, warehouse)`) converts such a
  warehouse into the lake, in place.
- From schema 2 on, the lake (`tracedb.lake`) is the truth and `_tracedb/lake.json` records
  the applied migrations. A later migration is a `.py` file with `TARGET = "lake"` and
  `up(lake)`. A new lake records every migration as applied ("created at schema N").

The views read each table's files with one schema (bound from a single footer), so a
migration that adds a column to a table in `tracedb/schema.py` must rewrite the old files
with the new column as NULL (`conform_lake_table`).
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from tracedb import storage
from tracedb.errors import TracedbError
from tracedb.migrations import (Migration, _now, all_records, applied, discover, label, latest, load,  # noqa: F401
                                pending, pending_names, require_current, target)

# Migration 0013 (schema 8) moved data tables out of partitions by run and device; those
# before it create tables partitioned, as they did when written.
LAYOUT_MIGRATION = 13


def migrate_warehouse(warehouse: Path | str | storage.Storage) -> list[str]:
    """Apply pending migrations (schema-1 catalog ones, then lake ones); returns their names.
    `warehouse`: a location, or the storage `storage.open_storage` gave."""
    from tracedb import catalog, schema
    from tracedb.lake import Lake

    lake = Lake(warehouse)
    warehouse = lake.root  # normalised: a folder's Path, or the URL
    done: list[str] = []
    if catalog.is_legacy(lake.storage):
        done += _migrate_legacy(warehouse)
    elif not lake.exists:
        raise TracedbError(f"no warehouse at {warehouse} (no {lake.storage.uri('catalog.duckdb')} or lake)")
    with lake.lock():
        meta = lake.read_meta()
        have = {m["number"] for m in meta.get("migrations", [])}
        for m in discover():
            if m.number in have:
                continue
            if target(m) != "lake":
                raise TracedbError(f"migration {label(m)} is for a schema-1 catalog, but {warehouse} is a lake")
            if lake.storage.local_path() is None:  # conform_lake_table rewrites files by local path
                raise TracedbError(f"migration {label(m)}: migrating a lake on object storage ({warehouse}) is not "
                                   "supported yet; copy it to a folder, migrate, copy it back")
            for table in schema.ALL_TABLES:  # restated columns first: the migration may commit to them
                refresh_column_docs(lake, table)
            # tables an older migration creates are as that migration knew them
            lake.partition_new_tables = m.number < LAYOUT_MIGRATION
            load(m).up(lake)
            lake.partition_new_tables = False
            meta.setdefault("migrations", []).append({"number": m.number, "name": m.name, "applied_at": _now()})
            lake.write_meta(meta)
            done.append(label(m))
        meta["schema_version"] = schema.SCHEMA_VERSION
        lake.write_meta(meta)
        catalog.publish(lake)
    return done


def _migrate_legacy(warehouse: Path) -> list[str]:
    """Schema 1: apply the catalog migrations in order; 0004 converts to the lake."""
    try:
        con = duckdb.connect(str(warehouse / "catalog.duckdb"))
    except duckdb.Error as e:
        raise TracedbError(f"cannot open {warehouse / 'catalog.duckdb'} for writing: {e}") from e
    done = []
    try:
        for m in pending(con):
            if target(m) != "catalog":
                break
            apply(con, warehouse, m)
            done.append(label(m))
    finally:
        con.close()
    return done


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
            load(migration).up(con, warehouse)
        con.execute("INSERT INTO tracedb_migrations (number, name) VALUES (?, ?)", [migration.number, migration.name])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise


def conform_lake_table(lake, table: str, derive=None, every: bool = False) -> int:
    """Rewrite every live data file of `table` whose schema differs from the table's
    current one (new columns NULL or filled by `derive(table) -> table`, types cast), in
    one Delta commit that removes the old files and adds the new ones; returns how many
    files changed. For a migration that adds columns (after `evolve_lake_table`).
    every=True: rewrite (and derive) every file, also those an earlier migration of the
    same upgrade already gave the current schema (its new columns NULL)."""
    import time

    import pyarrow as pa
    import pyarrow.parquet as pq  # here, not at the top: ~35 ms of `tracedb query` start-up

    from tracedb import lake as lake_mod

    partitioned = lake.partitioned(table)
    target_schema = lake_mod.file_schema(table, partitioned)
    actions, written = [], []
    now = int(time.time() * 1000)
    for r in lake.add_actions(table).to_pylist():
        old = pq.read_table(lake.root / r["path"])
        if old.schema.equals(target_schema, check_metadata=False) and not every:
            continue
        cols = [old.column(f.name).cast(f.type) if f.name in old.schema.names else pa.nulls(old.num_rows, f.type)
                for f in target_schema]
        new = pa.Table.from_arrays(cols, schema=target_schema)
        if derive is not None:  # fill new columns from old ones (e.g. kernel_type from name)
            new = derive(new)
        new_rel = r["path"][:-len(".parquet")] + f".m{now}.parquet"
        pq.write_table(new, lake.root / new_rel, compression="zstd", write_page_checksum=True)
        f = lake_mod.DataFile(table, r["run_id"], r["device"], new_rel, old.num_rows,
                              *lake_mod.size_and_hash(lake.root / new_rel), ingest_id=f"migration-{now}",
                              run_hi=r["run_hi"], partitioned=partitioned)
        if not partitioned:  # its devices: the stats of the file's device column
            import pyarrow.compute as pc

            devices = pc.min_max(new.column("device"))
            f.device, f.device_hi = devices["min"].as_py(), devices["max"].as_py()
        written.append(f)
        actions += [lake_mod.remove_action(r, now), lake_mod.add_action(f, now, (r["min_ingest"], r["max_ingest"]))]
    if actions:
        lake._record_checksums(written)
        lake.transact(table, actions)
    return len(written)


def evolve_lake_table(lake, table: str) -> None:
    """Give a Delta table the columns its current schema (schema.py) adds: a commit of no
    rows with schema_mode="merge" (metadata only; old files read the new columns as NULL
    through delta-rs, and `conform_lake_table` rewrites them for DuckDB's views)."""
    from deltalake import write_deltalake

    from tracedb import lake as lake_mod

    from tracedb import schema

    refresh_column_docs(lake, table)
    parts = lake_mod.PARTITIONS if table in schema.TABLES and lake.partitioned(table) else None
    with lake._written(table):
        write_deltalake(lake.uri(table), lake_mod.delta_schema(table).empty_table(), mode="append",
                        schema_mode="merge", partition_by=parts)


def refresh_column_docs(lake, table: str) -> int:
    """Give a Delta table's columns the descriptions (`doc` metadata) its schema in
    `tracedb/schema.py` now has, where a column's meaning was restated (Delta refuses a
    commit whose schema's metadata differs from the table's: a schema merge, or a write
    transaction with the new schema); returns how many changed. A table not created yet
    is left alone."""
    import json

    from deltalake.exceptions import TableNotFoundError

    try:
        lake.table(table)
    except TableNotFoundError:
        return 0
    current = {f["name"]: (f.get("metadata") or {}).get("doc")
               for f in json.loads(lake.table(table).schema().to_json())["fields"]}
    from tracedb import lake as lake_mod

    changed = 0
    for field in lake_mod.delta_schema(table):
        doc = (field.metadata or {}).get(b"doc", b"").decode()
        if doc and field.name in current and current[field.name] != doc:
            with lake._written(table):
                lake.table(table).alter.set_column_metadata(field.name, {"doc": doc})
            changed += 1
    return changed
