"""Issue 24 item 9: a notebook or dashboard app on SQLAlchemy (duckdb-engine) and pandas
sees each new snapshot on its next connection, pooled or not, while connections of the
same process stay open (the plain URL recipe kept the first snapshot for the process'
life: DuckDB keeps one database instance per path and process)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import sqlalchemy

import rawtrace
from conftest import scenario
from tracedb import Warehouse

ROOT = Path(__file__).resolve().parents[1]
COUNT = "SELECT count(DISTINCT run_id) AS runs, count(*) AS kernels FROM kernels"


def _ingest(wh: Path, run_id: str) -> None:
    """Another process ingests (as a nightly job would)."""
    subprocess.run([sys.executable, "-m", "tracedb", "ingest", str(scenario("tf_stepstats_gpu_streams")),
                    "--run-id", run_id, "-w", str(wh), "-q", "-j", "1"],
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, timeout=300)


@pytest.mark.parametrize("pool", ["default", "null"])
def test_each_new_connection_sees_the_newest_snapshot(tmp_path, pool):
    wh = tmp_path / "wh"
    _ingest(wh, "r1")
    n = len(rawtrace.tf().kernels)
    kwargs = {} if pool == "default" else {"poolclass": sqlalchemy.pool.NullPool}
    engine = Warehouse(wh).sqlalchemy_engine(**kwargs)
    held = engine.connect()  # a dashboard's open connection
    assert tuple(held.execute(sqlalchemy.text(COUNT)).one()) == (1, n)
    assert pd.read_sql(COUNT, engine).to_dict("records") == [{"runs": 1, "kernels": n}]
    for i in (2, 3):
        _ingest(wh, f"r{i}")
        assert pd.read_sql(COUNT, engine).to_dict("records") == [{"runs": i, "kernels": i * n}]
        with engine.connect() as c:
            assert tuple(c.execute(sqlalchemy.text(COUNT)).one()) == (i, i * n)
    assert tuple(held.execute(sqlalchemy.text(COUNT)).one()) == (1, n)  # an open one keeps its snapshot
    assert "kernels" in sqlalchemy.inspect(engine).get_view_names()
    held.close()
    engine.dispose()


def test_the_plain_url_recipe_keeps_its_first_snapshot_while_the_process_holds_it(tmp_path):
    """Why the README names `sqlalchemy_engine`: the URL recipe in one process."""
    wh = tmp_path / "wh"
    _ingest(wh, "r1")
    engine = sqlalchemy.create_engine(f"duckdb:///{wh}/catalog.duckdb", connect_args={"read_only": True})
    held = engine.connect()
    _ingest(wh, "r2")
    assert pd.read_sql(COUNT, engine).to_dict("records")[0]["runs"] == 1  # DuckDB's cached instance
    held.close()
    engine.dispose()
