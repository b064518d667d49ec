"""Other engines over the lake: which Parquet files are live, and Spark views over them.

`live_files` is the one place that says which files of a data table are live; everything
that points another engine at the lake without a Delta reader (the Spark views here, the
tests that compare Spark with DuckDB) asks it. It reads the table's `_delta_log` (the
files it adds) and keeps those of each run's published ingest (`runs.ingest_id`), as
`tracedb.lake.Lake.live_files` does for the DuckDB snapshot.

From schema 8 run_id and device are columns of the files (a file holds many runs); the
views keep each run's live rows by `(run_id, ingest_id)` in `runs`. (In the partitioned
layout of schema <= 7 they came from the Hive paths, which Spark discovers with the
`basePath` option; type inference stays off so that a run id `007` stays a string.)

In production, Spark reads the Delta tables themselves through the Delta connector
(`tracedb ddl --engine spark`, docs/engines.md); `spark_views` is the same thing without
the connector (which tests cannot download), for a local session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracedb import catalog, schema
from tracedb import lake as lake_mod
from tracedb.errors import TracedbError


def live_files(warehouse: Path, table: str) -> list[str]:
    """The live Parquet files of a data table, as paths relative to the warehouse, sorted.
    A table with no file yet gives []."""
    if table not in schema.TABLES:
        raise TracedbError(f"unknown data table {table!r} (one of: {', '.join(schema.TABLES)})")
    files, _mixed = catalog.open_lake(warehouse).live_files(table)
    return files


def spark_conf() -> dict[str, str]:
    """Settings a local Spark session needs to read the lake as tracedb means it."""
    return {
        # run ids and devices are strings, whatever they look like (`007`, `1`)
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        # timestamps (runs.started_at, ingested_at) are UTC instants
        "spark.sql.session.timeZone": "UTC",
    }


def spark_views(spark: Any, warehouse: Path) -> None:
    """Register temp views `runs`, `nodes`, `kernels`, `tensors`, `allocations`, `files`
    and `ingest_log` in a Spark session, over the lake's live files, with the schema
    module's columns. Data views keep the rows of each run's live ingest only
    (`(run_id, ingest_id)` in `runs`), as every tracedb view does."""
    warehouse = Path(warehouse).resolve()
    lake = catalog.open_lake(warehouse)
    meta = {name: spark.createDataFrame(lake.read_table(name)) for name in ("runs", "files", "ingest_log")}
    live = meta["runs"].select("run_id", "ingest_id")
    for name, df in meta.items():
        df.select(*schema.VIEWS[name].names).createOrReplaceTempView(name)
    for table, sch in schema.TABLES.items():
        files = live_files(warehouse, table)
        full = lake_mod.delta_schema(table)  # with ingest_id
        if files:
            df = spark_parquet(spark, warehouse / table, [warehouse / f for f in files], full)
        else:
            df = spark.createDataFrame(full.empty_table())
        df.join(live, ["run_id", "ingest_id"], "left_semi").select(*sch.names).createOrReplaceTempView(table)


def spark_parquet(spark: Any, base: Path, files: list[Path], sch) -> Any:
    """A DataFrame over Parquet files under `base` with the schema given (run_id and
    device from the files, or, in a partitioned layout, from the Hive paths)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    # The schema given, Spark reads no footer to infer it (a job per table otherwise).
    return (spark.read.schema(from_arrow_schema(sch)).option("basePath", str(base))
            .parquet(*[str(f) for f in files]).select(*sch.names))  # partitions last otherwise
