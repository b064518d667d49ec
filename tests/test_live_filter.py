"""The snapshot's live filter only where a file may hold dead rows (`Lake.whole_files`).

From schema 8 a file holds many runs; a run re-ingested or removed leaves its old rows in
files that other live runs keep live, and every data view filters on `(run_id,
ingest_id)` in `runs` to hide them. That filter is a semi-join over every row (2.3x a
fleet-wide scan at 1,000 runs), so the views apply it only to the branches of files that
may hold dead rows. Scenario: three runs of the real TF StepStats trace ingested in one
group (one file a table for the three), one re-ingested, one removed; and a lake
migrated from schema 6, whose files hold ingests the log may not know. The oracle is the
raw trace's kernel count (`rawtrace.tf`), per live run, once each."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import rawtrace
from tracedb import Warehouse, catalog

DATA = Path(__file__).parent / "data"
TRACE = DATA / "tf_stepstats_gpu_streams" / "001_5e9237699abafb68.txt"


def _runs_folder(root: Path, names: list[str]) -> Path:
    for name in names:
        (root / name).mkdir(parents=True)
        shutil.copy(TRACE, root / name / TRACE.name)
    return root


def _branches(wh: Path, view: str = "kernels") -> list[tuple[str, bool]]:
    """(file, filtered) for each live file of the snapshot's view, in run order; checks
    that the view has the semi-join exactly when some file is filtered."""
    con = catalog.connect(wh)
    try:
        sql = con.execute("SELECT sql FROM duckdb_views() WHERE view_name = ?", [view]).fetchall()[0][0]
        files = con.execute("SELECT path, NOT whole FROM tracedb_live_files WHERE table_name = ? "
                            "ORDER BY run_lo, path", [view]).fetchall()
    finally:
        con.close()
    assert ("tracedb_runs" in sql) == any(filtered for _, filtered in files)
    assert sorted(re.findall(r"read_parquet\('([^']*)'\)", sql)) == sorted(f for f, _ in files)
    return files


def _kernels_per_run(wh: Path) -> dict[str, int]:
    con = catalog.connect(wh)
    try:
        return dict(con.execute("SELECT run_id, count(*) FROM kernels GROUP BY run_id").fetchall())
    finally:
        con.close()


def test_views_filter_only_the_files_that_hold_dead_rows(tmp_path):
    n = len(rawtrace.tf().kernels)
    wh = tmp_path / "wh"
    w = Warehouse(wh)
    w.ingest(_runs_folder(tmp_path / "night1", ["a", "b", "c"]))
    first = _branches(wh)
    assert len(first) == 1 and not first[0][1]  # one file of three live runs: no filter
    assert _kernels_per_run(wh) == {"a": n, "b": n, "c": n}

    w.ingest(_runs_folder(tmp_path / "night2", ["b"]))  # b's old rows stay in night 1's file
    second = dict(_branches(wh))
    assert second[first[0][0]] is True  # night 1's file now holds dead rows: filtered
    assert [f for f, filtered in second.items() if not filtered] == [f for f in second if f != first[0][0]]
    assert _kernels_per_run(wh) == {"a": n, "b": n, "c": n}

    w.rm("c")
    assert _kernels_per_run(wh) == {"a": n, "b": n}
    w.optimize()  # one file of both nights' ingests: b's and c's dead pairs lie in its ranges
    assert [filtered for _, filtered in _branches(wh)] == [True]
    assert _kernels_per_run(wh) == {"a": n, "b": n}


def test_a_migrated_lakes_files_keep_the_filter_and_new_ingests_do_not(tmp_path):
    """Migration 0013's files hold ingests from before the lake kept every ingest in its
    log (a schema-1 lake's rows carry "migrated-0004"): a re-ingest could leave rows the
    log cannot name, so those files stay filtered; files of later ingests do not."""
    wh = tmp_path / "wh"
    shutil.copytree(DATA / "frozen_warehouse_schema6", wh)
    w = Warehouse(wh)
    w.migrate()
    old = _branches(wh)
    assert old and all(filtered for _, filtered in old)
    before = _kernels_per_run(wh)
    time.sleep(1.1)  # the migration's time is recorded to the second: an ingest within it counts as older
    w.ingest(_runs_folder(tmp_path / "night", ["fresh"]))
    new = [b for b in _branches(wh) if b not in old]
    assert len(new) == 1 and not new[0][1]
    assert _kernels_per_run(wh) == {**before, "fresh": len(rawtrace.tf().kernels)}


def test_files_older_than_the_layout_migration_keep_the_filter(tmp_path):
    """A lake migrated to schema 8 after these ingests (0013's record has no creation
    note, and its time follows them): the log may lack pairs their files hold."""
    import json

    wh = tmp_path / "wh"
    Warehouse(wh).ingest(_runs_folder(tmp_path / "night1", ["a", "b"]))
    assert not any(filtered for _, filtered in _branches(wh))
    meta_path = wh / "_tracedb" / "lake.json"
    meta = json.loads(meta_path.read_text())
    for m in meta["migrations"]:
        if m["number"] == 13:
            del m["note"]
            m["applied_at"] = "2999-01-01T00:00:00+00:00"
    meta_path.write_text(json.dumps(meta))
    (wh / "catalog.duckdb").unlink()
    assert all(filtered for _, filtered in _branches(wh))
    n = len(rawtrace.tf().kernels)
    assert _kernels_per_run(wh) == {"a": n, "b": n}
