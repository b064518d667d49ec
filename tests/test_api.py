"""The Python API returns Arrow (and pandas / polars when installed) from the same library."""

from __future__ import annotations

import pyarrow as pa
import pytest

import tracedb
from conftest import scenario


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    w = tracedb.Warehouse(tmp_path_factory.mktemp("api") / "wh")
    assert w.ingest(scenario("tf_stepstats_gpu_streams"), run_id="lstm").ok
    return w


def test_query_returns_arrow(wh):
    t = wh.query("top_kernels", limit=3)
    assert isinstance(t, pa.Table) and t.num_rows == 3
    assert t.column("name")[0].as_py() == "MatMul"
    assert t.schema.field("total_ns").type == pa.int64()


def test_sql_binds_keyword_params(wh):
    t = wh.sql("select kind, count(*) n from kernels where run_id = $r group by kind order by kind", r="lstm")
    assert t.to_pylist() == [{"kind": "kernel", "n": 729}, {"kind": "memcpy", "n": 26}]


def test_pandas_and_polars_outputs(wh):
    pd = pytest.importorskip("pandas")
    df = wh.query("top_kernels", output="pandas", limit=1)
    assert isinstance(df, pd.DataFrame) and df.loc[0, "instances"] == 83


def test_polars_output(wh):
    pl = pytest.importorskip("polars")
    df = wh.query("top_kernels", output="polars", limit=1)
    assert isinstance(df, pl.DataFrame) and df["instances"][0] == 83


def test_connection_for_notebooks(wh):
    con = wh.connect()
    assert con.execute("select count(*) from nodes").fetchone()[0] == 577
    con.close()
