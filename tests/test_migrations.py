"""Migrations against a frozen warehouse made before migration 0002 (ingest log)."""

from __future__ import annotations

import shutil

import duckdb
import pytest
from typer.testing import CliRunner

from conftest import DATA, scenario
from tracedb import catalog, migrate
from tracedb.cli import app
from tracedb.errors import TracedbError
from tracedb.ingest import ingest

FROZEN = DATA / "frozen_warehouse_m0001"


@pytest.fixture
def old_warehouse(tmp_path):
    wh = tmp_path / "old"
    shutil.copytree(FROZEN, wh)
    return wh


def test_migrations_are_numbered_and_discovered_by_sorting():
    found = migrate.discover()
    assert [m.number for m in found] == list(range(1, len(found) + 1))
    assert [m.name for m in found[:3]] == ["catalog_tables", "ingest_log", "file_metadata"]


def test_old_warehouse_refuses_until_migrated(old_warehouse):
    with pytest.raises(TracedbError, match="tracedb migrate"):
        catalog.connect(old_warehouse)
    with pytest.raises(TracedbError, match="0002_ingest_log"):
        ingest([scenario("node_name_list")], old_warehouse)


def test_migrate_brings_frozen_warehouse_up_to_date(old_warehouse):
    result = CliRunner().invoke(app, ["migrate", "--warehouse", str(old_warehouse)])
    assert result.exit_code == 0, result.output
    assert "0002_ingest_log, 0003_file_metadata" in result.output
    con = catalog.connect(old_warehouse)
    assert con.execute("SELECT count(*) FROM nodes").fetchone()[0] == 178
    # the old warehouse's one ingested file was carried into the new log
    assert con.execute("SELECT run_id, path, status FROM ingest_log").fetchall() == [
        ("alexnet_dump", "002_11cf062b29f34b60.txt", "ok")]
    applied = con.execute("SELECT number FROM tracedb_migrations ORDER BY 1").fetchall()
    assert applied == [(m.number,) for m in migrate.discover()]
    con.close()
    # idempotent; and the warehouse takes new runs again
    assert catalog.migrate_warehouse(old_warehouse) == []
    assert ingest([scenario("node_name_list")], old_warehouse).ok
    con = catalog.connect(old_warehouse)
    assert con.execute("SELECT count(*) FROM ingest_log").fetchone()[0] == 2


def test_conform_table_files_adds_a_missing_column(tmp_path):
    """What a future migration that adds a column does to the files written before it."""
    import pyarrow.parquet as pq

    wh = tmp_path / "wh"
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="lstm").ok
    [path] = wh.glob("kernels/*/*/*.parquet")
    old = pq.read_table(path).drop_columns(["occupancy"])  # as an older tracedb wrote it
    pq.write_table(old, path)
    con = catalog.open_for_write(wh)
    with pytest.raises(duckdb.Error):  # one footer binds the view; the old file lacks a column
        catalog.refresh_views(con)
        con.execute("SELECT occupancy FROM kernels").fetchall()
    assert migrate.conform_table_files(con, wh, "kernels") == 1
    assert migrate.conform_table_files(con, wh, "kernels") == 0  # idempotent
    catalog.refresh_views(con)
    assert con.execute("SELECT count(*), count(occupancy), sum(duration_ns) FROM kernels").fetchone() == (755, 0, 7_590_000)
