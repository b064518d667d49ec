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


def test_a_warehouse_normalises_its_location_once(tmp_path, monkeypatch):
    """Issue 25 item 2: the location is normalised in the constructor and its storage is
    handed down; no later call (ingest, queries, maintenance, report) normalises it again."""
    from rawtrace import tf
    from tracedb import storage

    seen = []
    real = storage.location
    monkeypatch.setattr(storage, "location", lambda where: seen.append(where) or real(where))
    w = tracedb.Warehouse(str(tmp_path / "wh"))
    assert seen == [str(tmp_path / "wh")] and w.path == tmp_path / "wh" and repr(w) == f"Warehouse({str(w.path)!r})"
    assert w.ingest(scenario("tf_stepstats_gpu_streams"), run_id="lstm").ok
    assert w.sql("SELECT count(*) AS n FROM kernels").to_pylist() == [{"n": len(tf().kernels)}]
    assert w.runs().column("run_id").to_pylist() == ["lstm"]
    assert w.check() == [] and w.migrate() == []
    w.optimize()
    w.vacuum()
    con = w.connect()
    con.close()
    assert w.report(baseline=["lstm"], candidate=["lstm"]).findings is not None
    assert w.rm("lstm") == ["lstm"]
    assert len(seen) == 1, seen
