"""Per-row and per-file costs of the lake, measured, for the scale projection in docs/scale.md.

    python bench/bench_scale.py [--runs 400] [--rows 20000000] [--spark] [--devices 8]

The data are the Kineto H200 fixture's kernels (real names, grids, durations), replicated
as runs with their own run_id and shifted times, written as tracedb writes them (zstd
Parquet, one file per run and device). It measures:

  bytes/row    Parquet bytes per kernel row over --runs run files
  per file     DuckDB: count(*) over --runs small files minus over one file of the same
               rows, per file (the cost of opening and planning a file)
  per row      DuckDB: the top_kernels aggregation over one --rows table (2 threads),
               per row; baseline: pyarrow reading the same columns in the same process
  spark        with --spark: the same two on a local[2] Spark session

and prints the ratios duckdb/pyarrow (and spark/duckdb), then the projection for 100,000
runs and 10 billion kernel rows.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tracedb import catalog  # noqa: E402
from tracedb.ingest import ingest  # noqa: E402
from tracedb import process  # noqa: E402

process.own()  # read as `tracedb ingest` and its workers do: the GC paused and frozen around reads

FIXTURE = ROOT / "tests" / "data" / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
AGG = ("SELECT name, count(*) n, sum(duration_ns) total, avg(duration_ns) mean, min(duration_ns), "
       "max(duration_ns), stddev_samp(duration_ns) FROM {src} WHERE kind = 'kernel' "
       "GROUP BY name ORDER BY total DESC LIMIT 50")
COLUMNS = ["name", "kind", "duration_ns"]


def best(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def fixture_kernels(tmp: Path) -> pa.Table:
    wh = tmp / "fixture"
    assert ingest([FIXTURE], wh, run_id="r").ok
    con = catalog.connect(wh)
    try:
        return catalog.query_arrow(con, "SELECT * FROM kernels")
    finally:
        con.close()


def replica(base: pa.Table, i: int) -> pa.Table:
    t = base.set_column(base.schema.get_field_index("run_id"), "run_id",
                        pa.repeat(pa.scalar(f"run{i:06d}"), base.num_rows))
    return t.set_column(t.schema.get_field_index("start_ns"), "start_ns",
                        pc.add(t.column("start_ns"), i * 7_919_000_000))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=400, help="run files for bytes/row and per-file cost")
    ap.add_argument("--rows", type=int, default=20_000_000, help="rows for the per-row cost")
    ap.add_argument("--spark", action="store_true", help="also measure a local[2] Spark session")
    ap.add_argument("--devices", type=int, default=8, help="devices a run, for the projected file count")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench_scale_"))
    try:
        run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args, tmp: Path) -> None:
    base = fixture_kernels(tmp)
    small = tmp / "small"
    small.mkdir()
    for i in range(args.runs):
        # as the lake writes them: run_id and device live in the path, not the file
        pq.write_table(replica(base, i).drop_columns(["run_id", "device"]), small / f"run{i:06d}.parquet",
                       compression="zstd")
    files = sorted(str(p) for p in small.glob("*.parquet"))
    rows = base.num_rows * args.runs
    size = sum(Path(f).stat().st_size for f in files)
    one = tmp / "one.parquet"
    pq.write_table(pa.concat_tables(pq.read_table(f) for f in files), one, compression="zstd")
    print(f"{args.runs} run files, {rows:,} kernel rows ({base.num_rows} a run), {size / 1e6:.1f} MB: "
          f"{size / rows:.1f} bytes/row as run files, {one.stat().st_size / rows:.1f} bytes/row in one file")

    con = duckdb.connect(config={"threads": 2})
    t_files = best(lambda: con.sql(f"SELECT count(*), sum(duration_ns) FROM read_parquet({files})").fetchall())
    t_one = best(lambda: con.sql(f"SELECT count(*), sum(duration_ns) FROM read_parquet('{one}')").fetchall())
    per_file = (t_files - t_one) / args.runs
    print(f"duckdb scan: {args.runs} files {t_files * 1e3:.0f} ms, one file {t_one * 1e3:.0f} ms: "
          f"{per_file * 1e3:.2f} ms per file")

    big = tmp / "big.parquet"
    reps = max(1, args.rows // rows)
    table = pq.read_table(one)
    writer = pq.ParquetWriter(big, table.schema, compression="zstd")
    for _ in range(reps):
        writer.write_table(table)
    writer.close()
    n = rows * reps
    t_arrow = best(lambda: pq.read_table(big, columns=COLUMNS))
    t_duck = best(lambda: con.sql(AGG.format(src=f"read_parquet('{big}')")).fetchall())
    print(f"{n:,} rows: pyarrow read of {COLUMNS} {t_arrow:.2f} s (baseline), "
          f"duckdb top_kernels {t_duck:.2f} s: {t_duck / n * 1e9:.1f} ns/row, "
          f"ratio duckdb/pyarrow {t_duck / t_arrow:.2f}")
    spark_row = spark_file = None
    if args.spark:
        spark_row, spark_file = spark_costs(files, one, big, n, args.runs, t_duck)
    project(size / rows, per_file, t_duck / n, spark_row, spark_file, args.devices)


def spark_costs(files, one, big, n, runs, t_duck):
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.memory", "2g").config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.read.parquet(str(big)).createOrReplaceTempView("big")
    spark.sql(AGG.format(src="big")).collect()  # warm the JIT
    t_spark = best(lambda: spark.sql(AGG.format(src="big")).collect())
    t_files = best(lambda: spark.read.parquet(*files).selectExpr("count(*)", "sum(duration_ns)").collect())
    t_one = best(lambda: spark.read.parquet(str(one)).selectExpr("count(*)", "sum(duration_ns)").collect())
    spark.stop()
    per_file = (t_files - t_one) / runs
    print(f"spark local[2]: top_kernels {t_spark:.2f} s: {t_spark / n * 1e9:.1f} ns/row, "
          f"ratio spark/duckdb {t_spark / t_duck:.2f}; {per_file * 1e3:.2f} ms per file")
    return t_spark / n, per_file


def project(bytes_row, duck_file, duck_row, spark_row, spark_file, devices: int) -> None:
    """Linear in rows and files; cores as measured (2) scaled linearly, which is optimistic."""
    runs, rows = 100_000, 10_000_000_000
    files = runs * devices  # kernels: one file per run and device after optimize
    print(f"\nprojection for {runs:,} runs, {rows:,} kernel rows, {devices} devices a run "
          f"({files:,} kernels files, {rows // files:,} rows each):")
    print(f"  kernels storage           {rows * bytes_row / 1e12:.2f} TB")
    rows_s, files_s = rows * duck_row, files * duck_file
    print(f"  duckdb top_kernels, 2 cores   {(rows_s + files_s) / 60:.0f} min "
          f"(rows {rows_s / 60:.0f} min + files {files_s / 60:.1f} min); 64 cores: "
          f"{(rows_s + files_s) / 32 / 60:.1f} min")
    if spark_row is not None:
        rows_s, files_s = rows * spark_row, files * spark_file
        print(f"  spark top_kernels, local[2]   {(rows_s + files_s) / 3600:.1f} h; 50 executors x 16 cores: "
              f"{(rows_s + files_s) / 400 / 60:.1f} min")


if __name__ == "__main__":
    main()
