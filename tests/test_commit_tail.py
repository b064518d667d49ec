"""The ingest's fixed cost after the reads (issue 12): what the faster commit must keep.

A rollup table whose metric has no rows for a commit group gets no file and no Delta
commit (its metric is not even run when its input tables are empty), yet a re-ingest still
removes the run's old rollup files from the log; the snapshot, now written through the
rollups' DuckDB database, keeps DuckDB 1.0's storage format and the views' rows.
"""

from __future__ import annotations

import re

import duckdb

import rawtrace
from conftest import DATA, scenario
from tracedb import catalog
from tracedb.ingest import ingest
from tracedb.lake import Lake

COLLECTIVE = re.compile(r"nccl|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all")
NCCL = DATA / "hta_nccl_allreduce" / "rank-0.json.gz"


def _live(lake: Lake, table: str, run: str) -> list[dict]:
    return [r for r in lake.add_actions(table).to_pylist() if r["run_id"] == run]


def _files_on_disk(wh, table: str, run: str, ingest_id: str) -> list:
    return [p for p in (wh / table).glob(f"run_id={run}/*/*.parquet") if ingest_id in p.name]


def test_a_rollup_without_rows_gets_no_file_and_a_reingest_removes_the_old_ones(tmp_path):
    wh = tmp_path / "wh"
    raw = rawtrace.kineto(rawtrace.load_kineto_json(NCCL))
    collectives = [k for k in raw.kernels if k.kind == "kernel" and COLLECTIVE.search(k.name.lower())]
    assert len(collectives) == 21  # the one-rank all-reduce trace

    assert ingest([NCCL.parent], wh, run_id="r").ok
    lake = Lake(wh)
    first = lake.published()["r"]
    assert _live(lake, "rollup_collectives", "r") and _live(lake, "rollup_kernel_launches", "r")
    con = catalog.connect(wh)
    assert con.execute("SELECT sum(instances) FROM rollup_collectives WHERE run_id = 'r'").fetchone()[0] == 21
    assert con.execute("SELECT count(*) FROM rollup_kernel_launches WHERE run_id = 'r'").fetchone()[0] > 0
    con.close()
    versions = Lake(wh).versions()

    # The same run from a TF trace: GPU activity, but no collective and no launch call.
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="r").ok
    lake = Lake(wh)
    second = lake.published()["r"]
    assert second != first
    for table in ("rollup_collectives", "rollup_kernel_launches"):
        assert _live(lake, table, "r") == [], table  # the old file left the log (the clean-up step)
        assert _files_on_disk(wh, table, "r", second) == [], table  # and nothing was written for it
        assert Lake(wh).versions()[table] == versions[table] + 1, table  # one commit: the removal
    assert {r["min_ingest"] for r in _live(lake, "rollup_gpu_busy_idle", "r")} == {second}
    con = catalog.connect(wh)
    assert con.execute("SELECT count(*) FROM rollup_collectives").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM rollup_kernel_launches").fetchone()[0] == 0
    # the raw-row path of `collectives` (a name_like pattern) agrees: no collective in this run
    assert rawtrace.rows("collectives", wh, name_like="%no such kernel%") == []
    con.close()


def test_a_fresh_run_without_collectives_commits_nothing_to_their_tables(tmp_path):
    wh = tmp_path / "wh"
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id="tf").ok
    versions = Lake(wh).versions()
    assert versions["rollup_collectives"] == versions["rollup_kernel_launches"] == 0  # created, never written
    assert versions["rollup_gpu_busy_idle"] == 1
    assert not list((wh / "rollup_collectives").glob("run_id=*"))


def test_the_snapshot_keeps_duckdb_1_0_storage_and_the_runs(tmp_path):
    """Attached to the rollups' database rather than opened as one of its own, the new
    catalog file is still written in DuckDB 1.0's storage format (BI tools embedding an
    older DuckDB open it) and lists what the lake holds."""
    wh = tmp_path / "wh"
    assert ingest([scenario("tf_stepstats_gpu_streams"), NCCL], wh).ok  # runs named by their files
    con = duckdb.connect(str(wh / catalog.CATALOG), read_only=True)
    try:
        tags = dict(con.execute("SELECT database_name, tags FROM duckdb_databases() WHERE NOT internal").fetchall())
        assert tags[catalog.CATALOG.removesuffix(".duckdb")]["storage_version"].startswith("v1.0.0")
        runs = sorted(r for (r,) in con.execute("SELECT run_id FROM runs").fetchall())
        assert runs == ["001_5e9237699abafb68", "rank-0"]
        kernels = con.execute("SELECT count(*) FROM kernels WHERE run_id = 'rank-0' AND kind = 'kernel'")
        assert kernels.fetchone()[0] == len([k for k in rawtrace.kineto(rawtrace.load_kineto_json(NCCL)).kernels
                                             if k.kind == "kernel"])
    finally:
        con.close()
    assert not list(wh.glob(".catalog-*"))  # no snapshot file left behind


def test_the_live_files_kept_after_a_commit_are_those_the_log_lists(tmp_path, monkeypatch):
    """The commit keeps each table's live files from its own actions rather than reading
    the log again: a run with an odd id (encoded in its folders), ingested and re-ingested
    (old files removed), leaves that record equal to what a fresh reader of the log lists."""
    from tracedb import ingest as ing
    from tracedb import schema

    wh = tmp_path / "wh"
    odd = "r/1 100% ü"
    assert ingest([scenario("tf_stepstats_gpu_streams")], wh, run_id=odd).ok
    kept = {}
    commit = ing._commit

    def spy(store, runs, roll_up, duck):
        commit(store, runs, roll_up, duck)
        kept.update({t: store.add_actions(t) for t in schema.TABLES})

    monkeypatch.setattr(ing, "_commit", spy)
    assert ingest([NCCL], wh, run_id=odd).ok
    fresh = Lake(wh)
    for table in schema.TABLES:
        assert kept[table].sort_by("path").equals(fresh.add_actions(table).sort_by("path")), table
    live = fresh.published()[odd]
    assert {r["min_ingest"] for r in fresh.add_actions("kernels").to_pylist()} == {live}  # the old files left
    assert sum(fresh.add_actions("kernels").column("rows").to_pylist()) == len(
        rawtrace.kineto(rawtrace.load_kineto_json(NCCL)).kernels)
