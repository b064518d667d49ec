"""Other engines over the lake: which Parquet files are live, and Spark views over them.

`live_files` is the one place that says which files of a table are live; everything that
points another engine at the lake (the Spark views here, the tests that compare Spark with
DuckDB) asks it. Today it reads the catalog's file list (`tracedb_data_files` in
catalog.duckdb); with Delta Lake it reads the table's `_delta_log`, and its callers do not
change.

Partition columns are read from the Hive paths (`run_id=<id>/device=<dev>/`, URL-encoded),
not from the files: Delta writers leave them out of the Parquet data. Spark discovers them
with the `basePath` option; type inference is off so that a run id `007` stays a string.

In production, Spark reads the Delta tables themselves through the Delta connector
(`tracedb ddl --engine spark`, docs in README "Other engines"); `spark_views` is the same
thing without the connector (which tests cannot download), for a local session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracedb import catalog, schema
from tracedb.errors import TracedbError


def live_files(warehouse: Path, table: str) -> list[str]:
    """The live Parquet files of `table`, as paths relative to the warehouse, in run,
    device, path order. A table with no file yet gives []."""
    if table not in schema.TABLES and table != "runs":
        raise TracedbError(f"unknown table {table!r} (one of: {', '.join([*schema.TABLES, 'runs'])})")
    con = catalog.connect(Path(warehouse))
    try:
        rows = con.execute(
            "SELECT path FROM tracedb_data_files WHERE table_name = ? ORDER BY run_id, device, path", [table]
        ).fetchall()
    finally:
        con.close()
    return [r[0] for r in rows]


def spark_conf() -> dict[str, str]:
    """Settings a local Spark session needs to read the lake as tracedb means it."""
    return {
        # run ids and devices are strings, whatever they look like (`007`, `1`)
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        # timestamps (runs.started_at, ingested_at) are UTC instants
        "spark.sql.session.timeZone": "UTC",
    }


def spark_views(spark: Any, warehouse: Path) -> None:
    """Register temp views `nodes`, `kernels`, `tensors`, `allocations` and `runs` in a
    Spark session, over the warehouse's live files, with the schema module's columns.

    Where the lake's rows carry an `ingest_id` and `runs` publishes each run's live one,
    the views keep only those rows (a reader never sees half a run)."""
    warehouse = Path(warehouse).resolve()
    runs = _spark_runs(spark, warehouse)
    runs.createOrReplaceTempView("runs")
    for table, sch in schema.TABLES.items():
        df = _spark_table(spark, warehouse, table, sch)
        if "ingest_id" in df.columns and "ingest_id" in runs.columns:
            df = df.join(runs.select("run_id", "ingest_id"), ["run_id", "ingest_id"], "left_semi")
        df.select(*sch.names).createOrReplaceTempView(table)


def _spark_table(spark: Any, warehouse: Path, table: str, sch) -> Any:
    files = live_files(warehouse, table)
    if not files:
        import pyarrow as pa

        return spark.createDataFrame(pa.Table.from_pylist([], schema=sch))
    return spark_parquet(spark, warehouse / table, [warehouse / f for f in files], sch)


def spark_parquet(spark: Any, base: Path, files: list[Path], sch) -> Any:
    """A DataFrame over Hive-partitioned Parquet files under `base`: partition columns
    (run_id, device) come from the paths, whether the files hold them or not."""
    from pyspark.sql.pandas.types import from_arrow_schema

    # The schema given, Spark reads no footer to infer it (a job per table otherwise).
    return (spark.read.schema(from_arrow_schema(sch)).option("basePath", str(base))
            .parquet(*[str(f) for f in files]).select(*sch.names))  # partitions last otherwise


def _spark_runs(spark: Any, warehouse: Path) -> Any:
    files = live_files(warehouse, "runs")
    if files:  # the lake holds runs as a table of its own
        return spark.read.option("basePath", str(warehouse / "runs")).parquet(*[str(warehouse / f) for f in files])
    # Schema 1: runs live in catalog.duckdb only; hand Spark its rows (one a run, small).
    con = catalog.connect(warehouse)
    try:
        rows = catalog.query_arrow(con, "SELECT * FROM runs ORDER BY run_id")
    finally:
        con.close()
    return spark.createDataFrame(rows)
