"""Per-run rollups: small derived tables written at ingest, read by fleet-wide queries.

`gpu_busy_idle` and `stream_overlap` need an ordered window over every activity row (the
running latest end per stream or step window, then the running count of active
streams). Measured on the 1,000-run bench fleet (9.59 M kernel rows, 2 cores, DuckDB
2.0.1): a bare partitioned `lag()` over all rows takes 1.7 s and a sort 2.7 s, the two
queries 13.7 s and 20.8 s with 1.7 GB and 2.6 GB peak RSS, so no query shape reaches the
1 s goal from raw rows. Each query's whole result for one run is a handful of rows,
though, and a run's rows only change when the run is re-ingested.

So the ingest computes them: for each run, after its files are read and before it is
committed, `compute` runs the metric's SQL (`sql/metrics/<metric>.sql`, the one
definition, also inlined by the canned query where it must read raw rows) on the run's
own new `kernels` files, once with `kind` NULL and once per kind present, and the rows
go into `rollup_<metric>` (schema.ROLLUPS), written and committed with the run's other
files (same partitioning, same ingest_id, same publish step): a run's rollup is always
of its live version. Migration 0006 computes them for runs ingested before. The canned
queries filter the rollup (one run or the fleet, device, kind, step windows: every
parameter of `gpu_busy_idle`; `stream_overlap` without a step range); only
`stream_overlap` with `step_from`/`step_to` still computes from raw rows (the busy
union of a step range is not a sum of per-step figures).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracedb import schema

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from tracedb.lake import DataFile


def metric_path(metric: str) -> Path:
    from tracedb.resources import sql_dir

    return sql_dir() / "metrics" / f"{metric}.sql"


def compute(con: duckdb.DuckDBPyConnection, source: str) -> dict[str, pa.Table]:
    """Every rollup table's rows (run_id not filled) from `source`, a relation holding one
    run's kernels rows, in schema order.

    Each metric runs once, not once per kind: its input is every row once under run id
    `*` (kind NULL: all activity) and once more under `=<kind>`; the metric's SQL keeps
    runs apart in every window, join and group (it answers for a whole fleet), so each
    such "run" comes out exactly as the metric with $kind bound computes it. (On the bench
    fleet's 3,000-kernel runs, 8 executions a run took ~0.7 s under load; now 2.)"""
    import pyarrow as pa

    from tracedb import query as q

    con.execute(f"""CREATE OR REPLACE TEMP TABLE kernels AS
        SELECT k.* REPLACE (coalesce('=' || s.kind, '*') AS run_id)
        FROM {source} k
        JOIN (SELECT NULL AS kind UNION ALL SELECT DISTINCT kind FROM {source} WHERE kind IS NOT NULL) s
          ON s.kind IS NULL OR k.kind = s.kind""")
    out = {}
    for table, metric in schema.ROLLUPS.items():
        cq = q.load(str(metric_path(metric)))
        rows = q.execute(con, cq, q.bind(cq, {}))
        keys = rows.column("run_id").to_pylist()
        rows = rows.append_column("kind", pa.array([None if k == "*" else k[1:] for k in keys], pa.string()))
        target = schema.TABLES[table]
        out[table] = rows.drop_columns(["run_id"]).select([n for n in target.names if n != "run_id"])
    return out


def write_run(root: Path, run_id: str, ingest_id: str, kernel_files: list[str],
              tables: list[str] | None = None, tag: str = "rollup") -> list[DataFile]:
    """Compute a run's rollups from its kernels parquet files (paths relative to the
    warehouse, Hive-partitioned; only the rows of `ingest_id`) and write them into the
    lake under that ingest_id, uncommitted. `tables`: only these rollup tables."""
    import duckdb

    from tracedb.lake import sql_str
    from tracedb.store import FileWriter

    if not kernel_files:
        return []
    con = duckdb.connect()
    try:
        # a few thousand rows a run: one thread (the ingest's workers have the other cores)
        con.execute("SET enable_progress_bar = false")
        con.execute("SET threads = 1")
        paths = "[" + ", ".join(sql_str(str(root / f)) for f in kernel_files) + "]"
        con.execute(f"CREATE VIEW run_kernels AS SELECT * FROM read_parquet({paths}, hive_partitioning = true, "
                    "hive_types = {'run_id': VARCHAR, 'device': VARCHAR}) "
                    f"WHERE ingest_id = {sql_str(ingest_id)}")
        rollups = compute(con, "run_kernels")
    finally:
        con.close()
    writer = FileWriter(root, run_id, ingest_id, f"{ingest_id}-{tag}")
    try:
        for table, rows in rollups.items():
            if tables is None or table in tables:
                writer.write(table, rows)
        return writer.close()
    except BaseException:
        writer.abort()
        raise
