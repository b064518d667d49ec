"""The snapshot's live filter only where a file may hold dead rows (`Lake.whole_files`).

From schema 8 a file holds many runs; a run re-ingested or removed leaves its old rows in
files that other live runs keep live, and the data views filter on `(run_id,
ingest_id)` in `runs` to hide them. That filter is a semi-join over every row (2.3x a
fleet-wide scan at 1,000 runs), so from schema 9 the commit that kills rows names their
files (`_tracedb/dead_rows.json`) and the views filter only those. Scenario: three runs of
the real TF StepStats trace ingested in one group (one file a table for the three), one
re-ingested, one removed, then merged; a lake migrated from schema 6; and a schema-8
lake (its list removed) that migration 0014 reads. The oracle is the raw trace's kernel
count (`rawtrace.tf`), per live run, once each."""

from __future__ import annotations

import re
import shutil
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
    # one list of the files read as they are, one of those under the live filter
    # (DuckDB keeps the list as `list_value(...)`)
    lists = {m.group(1) is not None: re.findall(r"'([^']*)'", m.group(2))
             for m in re.finditer(r"(ingest_id )?FROM read_parquet\((?:list_value\(|\[)([^\])]*)[\])]\)", sql)}
    assert sorted(lists.get(True, [])) == sorted(f for f, filtered in files if filtered)
    assert sorted(lists.get(False, [])) == sorted(f for f, filtered in files if not filtered)
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
    w.optimize()  # the merge keeps live rows only: every file whole again
    assert not any(filtered for _, filtered in _branches(wh))
    assert _kernels_per_run(wh) == {"a": n, "b": n}


def test_a_migrated_lakes_files_are_filtered_only_where_dead_rows_are(tmp_path):
    """The frozen schema-6 lake (re-ingested and removed runs): migration 0013 keeps live
    rows only, so 0014 finds no dead row; a re-ingest of one of its runs names the files
    holding that run's old rows, and only those."""
    wh = tmp_path / "wh"
    shutil.copytree(DATA / "frozen_warehouse_schema6", wh)
    w = Warehouse(wh)
    w.migrate()
    old = dict(_branches(wh))
    assert old and not any(old.values())
    before = _kernels_per_run(wh)
    victim = sorted(before)[0]
    w.ingest(_runs_folder(tmp_path / "night", [victim]))
    now = dict(_branches(wh))
    holders = {f for f in old if _holds(f, victim)}
    assert holders and {f for f, filtered in now.items() if filtered} == holders
    assert _kernels_per_run(wh) == {**before, victim: len(rawtrace.tf().kernels)}


def test_migration_0014_names_the_files_a_schema_8_lake_left_with_dead_rows(tmp_path):
    """A schema-8 lake kept no list: 0014 reads each live file's runs and ingests and
    names the same files the commits would have named."""
    import json

    wh = tmp_path / "wh"
    w = Warehouse(wh)
    w.ingest(_runs_folder(tmp_path / "night1", ["a", "b", "c"]))
    w.ingest(_runs_folder(tmp_path / "night2", ["b", "d"]))
    w.ingest(_runs_folder(tmp_path / "night3", ["e"]))
    w.rm("e")
    want = dict(_branches(wh))
    assert sorted(want.values()) == [False, True]  # night 1's file (b's old rows); night 3's went with e
    (wh / "_tracedb" / "dead_rows.json").unlink()
    meta_path = wh / "_tracedb" / "lake.json"
    meta = json.loads(meta_path.read_text())
    meta["migrations"] = [m for m in meta["migrations"] if m["number"] != 14]
    meta["schema_version"] = 8
    meta_path.write_text(json.dumps(meta))
    assert w.migrate()
    assert dict(_branches(wh)) == want
    n = len(rawtrace.tf().kernels)
    assert _kernels_per_run(wh) == {"a": n, "b": n, "c": n, "d": n}


def _holds(path: str, run: str) -> bool:
    import pyarrow.parquet as pq

    return run in set(pq.read_table(path, columns=["run_id"]).column(0).to_pylist())


def test_a_merge_written_before_a_run_died_is_named_when_it_lands(tmp_path):
    """Compaction writes its merged file outside the lock from the runs it read then; a
    run removed before the merge is committed leaves its rows in the merged file, which
    the commit names."""
    from tracedb.lake import Lake

    wh = tmp_path / "wh"
    w = Warehouse(wh)
    w.ingest(_runs_folder(tmp_path / "night1", ["a", "b"]))
    w.ingest(_runs_folder(tmp_path / "night2", ["c"]))
    lake = Lake(wh)
    published = lake.published()
    [chunk] = lake.compaction_plan("kernels", published, everything=True)
    merged = lake.write_compacted("kernels", chunk, published, "test")
    w.rm("a")  # another writer, between the merge and its commit
    with lake.lock():
        assert lake.commit_compacted("kernels", chunk, merged, published) == 2
        catalog.publish(lake)
    assert _branches(wh) == [(str(wh / merged.rel), True)]
    n = len(rawtrace.tf().kernels)
    assert _kernels_per_run(wh) == {"b": n, "c": n}


def test_check_names_a_file_with_dead_rows_the_list_lacks(tmp_path):
    """`tracedb check` reads every live file: one that holds rows no longer live and that
    the list does not name (the views would show those rows) is a problem."""
    from tracedb import schema
    from tracedb.lake import Lake

    wh = tmp_path / "wh"
    w = Warehouse(wh)
    w.ingest(_runs_folder(tmp_path / "night1", ["a", "b"]))
    w.ingest(_runs_folder(tmp_path / "night2", ["b"]))
    assert w.check() == []
    night1 = {r["path"] for t in schema.TABLES for r in Lake(wh).live_file_ranges(t).to_pylist() if r["run_id"] == "a"}
    assert len(night1) > 5  # a file a table the TF trace fills
    (wh / "_tracedb" / "dead_rows.json").unlink()
    problems = w.check()
    assert {p for _, p, _ in problems} == night1
    assert all(runs == "a..b" and "dead_rows.json does not name" in why for runs, _, why in problems)
