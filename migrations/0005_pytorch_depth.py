"""Schema 2 -> 3: everything a PyTorch profile holds (issue 14).

- New Delta tables `runtime_calls`, `annotations`, `steps`, `events` (created empty; runs
  ingested before keep none until re-ingested).
- `kernels` gains `kernel_type`, `kernel_category` (backfilled here from the kernel name
  by `tracedb.kernel_types`, as new ingests fill them), `node_seq`, `link`, `external_id`
  (NULL for old rows: Kineto runs keep their old External-id links until re-ingested).
- `files` and `ingest_log` gain `rows_<table>` for the new tables (NULL for old rows).
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import migrate, schema

    lake.ensure_tables()
    for table in ("kernels", "files", "ingest_log"):
        migrate.evolve_lake_table(lake, table)
    for table in schema.TABLES:
        migrate.conform_lake_table(lake, table,
                                   derive=_kernel_types if table == "kernels" else None)


def _kernel_types(table):
    import pyarrow as pa

    from tracedb.formats.base import classify_kernels

    batches = [classify_kernels(b) for b in table.to_batches()]
    return pa.Table.from_batches(batches, schema=table.schema) if batches else table
