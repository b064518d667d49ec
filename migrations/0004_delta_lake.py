"""Schema 1 -> 2: move a warehouse's storage of record from catalog.duckdb to Delta Lake.

Schema 1 listed the live parquet files in catalog.duckdb's `tracedb_data_files` and kept
`runs`, `files` and `ingest_log` only there. This rewrites, in place:

1. every live data file into the lake's file schema (run_id/device only in the path, an
   `ingest_id` column: the ingest that wrote it), as a new file beside the old one;
2. the Delta tables: data tables adding those files, and `runs` (with each run's live
   ingest), `files` and `ingest_log` from the old catalog's tables;
3. `_tracedb/lake.json` last: the commit point. Until it exists the old catalog is
   untouched and still the truth, so a crash (SIGKILL) anywhere before leaves the
   schema-1 warehouse as it was, and a rerun starts by deleting the half-made lake.
   The caller then publishes the new catalog snapshot and the old files are deleted.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

TARGET = "catalog"
SUFFIX = ".v2.parquet"


def _clean_half_made(warehouse: Path, tables) -> None:
    for table in tables:
        shutil.rmtree(warehouse / table / "_delta_log", ignore_errors=True)
        for p in (warehouse / table).rglob(f"*{SUFFIX}") if (warehouse / table).is_dir() else []:
            p.unlink()
    shutil.rmtree(warehouse / "_tracedb", ignore_errors=True)


def _rewrite(warehouse: Path, table: str, run_id: str, device: str, rel: str, ingest_id: str):
    from tracedb import lake as lake_mod
    from tracedb.store import conform

    old = conform(pq.read_table(warehouse / rel), table, {"run_id": run_id})
    if table == "kernels":  # columns later schemas derive from the name (kernel_type, ...)
        from tracedb.formats.base import classify_kernels

        old = pa.Table.from_batches([classify_kernels(b) for b in old.to_batches()], schema=old.schema)
    data = old.drop_columns(lake_mod.PARTITIONS).append_column(
        lake_mod.INGEST_ID, pa.repeat(pa.scalar(ingest_id), old.num_rows))
    new_rel = rel[: -len(".parquet")] + SUFFIX
    pq.write_table(data, warehouse / new_rel, compression="zstd", write_page_checksum=True)
    return lake_mod.DataFile(table, run_id, device, new_rel, old.num_rows,
                             *lake_mod.size_and_hash(warehouse / new_rel), ingest_id=ingest_id, partitioned=True)


def up(con: duckdb.DuckDBPyConnection, warehouse: Path) -> None:
    from deltalake import write_deltalake

    from tracedb import lake as lake_mod
    from tracedb import migrate, schema

    lake = lake_mod.Lake(warehouse, partition_new_tables=True)  # schema 2's layout (0013 changes it)
    _clean_half_made(warehouse, schema.ALL_TABLES)
    rows = con.execute("SELECT table_name, run_id, device, path, ingest_id FROM tracedb_data_files "
                       "ORDER BY table_name, run_id, device, path").fetchall()
    files = [_rewrite(warehouse, *r) for r in rows]
    live = {f.run_id: f.ingest_id for f in files}
    (warehouse / lake_mod.META_DIR).mkdir(parents=True, exist_ok=True)
    lake.ensure_tables()
    lake._add_files(files)

    def meta_table(name: str, sql: str, extra: dict) -> None:
        from tracedb.catalog import query_arrow

        data = query_arrow(con, sql)
        out = {f.name: (data.column(f.name) if f.name in data.column_names else
                        pa.array(extra.get(f.name, [None] * data.num_rows), f.type))
               for f in lake_mod.delta_schema(name)}
        table = pa.Table.from_pydict(out).cast(lake_mod.delta_schema(name))
        if table.num_rows:
            write_deltalake(lake.uri(name), table, mode="append")

    runs = [r[0] for r in con.execute("SELECT run_id FROM tracedb_runs ORDER BY run_id").fetchall()]
    meta_table("runs", "SELECT * FROM tracedb_runs ORDER BY run_id",
               {"ingest_id": [live.get(r, "migrated-0004") for r in runs], "status": ["complete"] * len(runs)})
    meta_table("files", "SELECT * FROM tracedb_files", {})
    meta_table("ingest_log", "SELECT * FROM tracedb_ingest_log", {})
    old = [{"number": n, "name": name, "applied_at": str(at), "note": "schema 1 catalog"}
           for n, name, at in con.execute("SELECT number, name, applied_at FROM tracedb_migrations ORDER BY 1").fetchall()]
    this = next(m for m in migrate.discover() if m.number == 4)
    lake.write_meta({"schema_version": 2, "migrations": old + [
        {"number": 4, "name": this.name, "applied_at": migrate._now(), "note": "converted in place"}]})
    # committed: the old files are no longer the truth
    for (_t, _r, _d, rel, _i) in rows:
        (warehouse / rel).unlink(missing_ok=True)
