"""Every canned query on Spark, as `tracedb query NAME --dialect spark` prints it, gives
DuckDB's rows, row for row.

One local Spark session for the module (local[1], 1 GB driver, no UI, loopback only) over
the seed warehouse; tables are temp views over the files `engines.live_files` lists, with
run_id and device read from the Hive paths. Spark's Delta connector cannot be downloaded
here; production reads the Delta tables through it (`tracedb ddl --engine spark`).
About 1-2 minutes on 2 cores, most of it Spark's start and first query.
"""

from __future__ import annotations

import datetime
import decimal
import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from tracedb import catalog, engines, schema
from tracedb import dialects
from tracedb import query as q
from tracedb import sqllib
from tracedb.cli import app

pytestmark = [pytest.mark.slow,
              pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")]

QUERIES = sqllib.list_queries()
NAMES = [c.name for c in QUERIES]
REQUIRED_RUNS = ["tf_runmetadata_text", "tf_stepstats_gpu_streams"]
EMPTY_ON_SEED = {"collectives", "comm_comp_overlap", "nccl_bandwidth", "stragglers",  # no communication kernels or ranks in the seed traces
                 "tensor_flow"}  # no execution trace: test_tensor_flow_on_spark_equals_duckdb has one

runner = CliRunner()


@pytest.fixture(scope="module")
def spark(seed_warehouse):
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[1]").appName("tracedb-tests")
    for key, value in {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.memory": "1g",
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "1",
        # Small data: compiling each query's generated Java (whole-stage codegen), the
        # JVM's optimising JIT, re-planning (AQE) and a parallel GC cost more CPU than they
        # save: the module's CPU (the JVM's included) 194 -> 127 s, same assertions. One
        # task thread, one partition a shuffle and no JVM perf-data file: ~14% less again
        # (the suite keeps both cores busy with its two workers anyway).
        "spark.sql.codegen.wholeStage": "false",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData",
        "spark.sql.adaptive.enabled": "false",
        **engines.spark_conf(),
    }.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    engines.spark_views(session, seed_warehouse)
    yield session
    session.stop()


def required(cq):
    runs = iter(REQUIRED_RUNS)
    return {p.name: next(runs) for p in cq.params if p.required}


def plain(value):
    """One Python value for both engines: Spark gives Decimal where DuckDB gives a double
    (100.0 is a DECIMAL literal in Spark), and naive UTC datetimes."""
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        return value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def duckdb_rows(cq, params, warehouse):
    return [tuple(plain(v) for v in r.values()) for r in q.run_query(cq, params, warehouse).to_pylist()]


@pytest.mark.parametrize("cq", QUERIES, ids=NAMES)
def test_canned_query_on_spark_equals_duckdb(cq, spark, seed_warehouse):
    params = required(cq)
    args = ["query", cq.name, "--dialect", "spark", "--inline"]
    for k, v in params.items():
        args += ["-p", f"{k}={v}"]
    printed = runner.invoke(app, args)
    assert printed.exit_code == 0, printed.output
    df = spark.sql(printed.output)
    got = [tuple(plain(v) for v in r) for r in df.collect()]
    want = duckdb_rows(cq, params, seed_warehouse)
    assert df.columns == q.run_query(cq, params, seed_warehouse).column_names
    assert (len(want) > 0) != (cq.name in EMPTY_ON_SEED)
    assert got == want  # same rows, same order


def test_tensor_flow_on_spark_equals_duckdb(spark, seed_warehouse, tmp_path):
    """tensor_flow has rows only with an execution trace, which the seed traces lack: the
    MLP's ET beside its Kineto trace, in a warehouse of its own (the seed views come back after)."""
    from tracedb.ingest import ingest

    wh = tmp_path / "wh"
    assert ingest([Path(__file__).parent / "data" / "chakra_mlp_h100"], wh, run_id="mlp").ok
    printed = runner.invoke(app, ["query", "tensor_flow", "--dialect", "spark", "--inline"])
    assert printed.exit_code == 0, printed.output
    try:
        engines.spark_views(spark, wh)
        df = spark.sql(printed.output)
        got = [tuple(plain(v) for v in r) for r in df.collect()]
    finally:
        engines.spark_views(spark, seed_warehouse)
    want = duckdb_rows(sqllib.load("tensor_flow"), {}, wh)
    assert df.columns == q.run_query("tensor_flow", {}, wh).column_names
    assert len(want) > 0 and any(r[-1] is not None for r in want)  # readers timed from the Kineto trace
    assert got == want  # same rows, same order


def test_collectives_on_spark_equals_duckdb(spark, seed_warehouse, tmp_path):
    """collectives has rows only with communication kernels, which the seed traces lack:
    the two NCCL traces in a warehouse of their own, the whole runs, a step, a device and
    `name_like` (the declaration's sweep by time in Spark's windows: the same overlap as
    DuckDB's, partly overlapped collectives among them)."""
    from tracedb.ingest import ingest

    wh = tmp_path / "wh"
    for name in ("hta_nccl_allreduce", "hta_nccl_two_ranks"):
        assert ingest([Path(__file__).parent / "data" / name], wh, run_id=name).ok
    cases = [{}, {"step_from": 552, "step_to": 552}, {"step_from": 5, "device": "GPU:0"}, {"name_like": "%gemm%"}]
    try:
        engines.spark_views(spark, wh)
        for params in cases:
            args = ["query", "collectives", "--dialect", "spark", "--inline"]
            for k, v in params.items():
                args += ["-p", f"{k}={v}"]
            printed = runner.invoke(app, args)
            assert printed.exit_code == 0, printed.output
            got = [tuple(plain(v) for v in r) for r in spark.sql(printed.output).collect()]
            want = duckdb_rows(sqllib.load("collectives"), params, wh)
            assert any(0 < r[6] < r[4] for r in want), params  # overlapped_ns, total_ns
            assert got == want, params  # same rows, same order
    finally:
        engines.spark_views(spark, seed_warehouse)


def test_spark_binds_its_own_named_placeholders(spark, seed_warehouse):
    cq = sqllib.load("top_kernels")
    sql = dialects.transpile(cq, "spark")
    assert "run_id = :run_id" in sql and "LIMIT :limit" in sql
    got = [tuple(plain(v) for v in r) for r in spark.sql(sql, args={"run_id": "kineto_h200_fp32", "limit": 7}).collect()]
    assert got == duckdb_rows(cq, {"run_id": "kineto_h200_fp32", "limit": 7}, seed_warehouse)
    assert len(got) == 7


def test_spark_views_have_the_schema_and_partition_values_from_paths(spark, seed_warehouse):
    con = catalog.connect(seed_warehouse)
    try:
        for table, sch in schema.TABLES.items():
            assert spark.table(table).columns == sch.names
            want = dict(con.execute(f"SELECT run_id || '|' || device, count(*) FROM {table} GROUP BY ALL").fetchall())
            got = {r[0]: r[1] for r in spark.sql(
                f"SELECT concat(run_id, '|', device), count(*) FROM {table} GROUP BY 1").collect()}
            assert got == want, table
    finally:
        con.close()
    # devices such as GPU:0, as the files hold them
    assert {r[0] for r in spark.sql("SELECT DISTINCT device FROM kernels").collect()} >= {"GPU:0"}


def test_live_files_lists_only_live_files(seed_warehouse, tmp_path):
    wh = tmp_path / "wh"
    shutil.copytree(seed_warehouse, wh)
    files = engines.live_files(wh, "kernels")
    assert files and all(f.startswith("kernels/part-") and f.count("/") == 1 for f in files)  # schema 8: no folders
    # an orphan, as a crashed ingest leaves behind, is not listed
    orphan = Path(files[0]).with_name("orphan.parquet")
    shutil.copy(wh / files[0], wh / orphan)
    assert engines.live_files(wh, "kernels") == files
    con = catalog.connect(wh)
    try:
        n = con.execute("SELECT count(*) FROM kernels").fetchone()[0]
    finally:
        con.close()
    listed = duckdb.sql(f"SELECT count(*) FROM read_parquet({[str(wh / f) for f in files]})").fetchall()[0][0]
    assert listed == n and n > 1000


def test_partition_values_come_from_the_paths(spark, tmp_path):
    """Delta writers leave partition columns out of the files; a file that holds them
    anyway is overruled by its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sch = schema.KERNELS
    base = tmp_path / "kernels"
    with_cols = base / "run_id=r%2F1" / "device=GPU%3A0" / "a.parquet"
    without = base / "run_id=007" / "device=CPU%3A0" / "b.parquet"
    for f in (with_cols, without):
        f.parent.mkdir(parents=True)
    row = {n: None for n in sch.names} | {"kind": "kernel", "duration_ns": 5}
    pq.write_table(pa.Table.from_pylist([row | {"run_id": "stale", "device": "GPU:9"}], schema=sch), with_cols)
    rest = pa.schema([f for f in sch if f.name not in ("run_id", "device")])
    pq.write_table(pa.Table.from_pylist([{n: row[n] for n in rest.names}] * 2, schema=rest), without)
    df = engines.spark_parquet(spark, base, [with_cols, without], sch)
    assert df.columns == sch.names
    got = sorted((r.run_id, r.device, r.duration_ns) for r in df.collect())
    assert got == [("007", "CPU:0", 5), ("007", "CPU:0", 5), ("r/1", "GPU:0", 5)]
