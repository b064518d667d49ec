"""An ingest's compaction merges within a budget of its own rows (`Lake.ingest_compaction`,
issue 22): a night that fills a large tier no longer pays for ten, a hundred or a thousand
nights' rows; those merges are left to `tracedb optimize`, and the ingest says so.

The first test ingests real runs (the same TF trace, one a run) with tiny tiers (fanout 2,
as tests/test_compaction_tiers.py): the second one-run ingest finds every table's lowest
tier full, each merge twice a run's rows of its table, all of them twice the ingest's own
rows. Which tables fit MERGE_BUDGET (1) x the ingest's rows, fewest rows first, is
worked out here from the rows of each table in a one-run warehouse, read with pyarrow.

The second replays a year of nights on paper (a stand-in lake of sizes: no file is
written) through the real plan and tier constants: a night's files are three group files a
table of the rows below (a 50-run batch of the fleet bench, bench/RESULTS.md "Session 17"),
and the oracle is arithmetic: each night merges at most the night's own rows, while a
weekly `optimize` keeps the files at most nine a tier below full files, plus a week of
nights' files."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from conftest import scenario
from tracedb import schema
from tracedb.api import Warehouse
from tracedb.lake import Lake


def _run(root, name):
    src = scenario("tf_stepstats_gpu_streams")
    (root / name).mkdir(parents=True)
    shutil.copy(src, root / name / src.name)
    return root


def _live(wh) -> dict[str, list[dict]]:
    lk = Lake(wh)
    published = lk.published()
    return {t: rows for t in schema.TABLES if (rows := lk.live_file_ranges(t, published).to_pylist())}


def test_an_ingest_merges_no_more_than_its_own_rows_and_leaves_the_rest_to_optimize(tmp_path, monkeypatch):
    one = tmp_path / "one"
    assert Warehouse(one).ingest(str(_run(tmp_path / "r0", "r"))).ok
    per_run = {t: pq.ParquetFile(one / f[0]["path"]).metadata.num_rows for t, f in _live(one).items()}
    assert len(per_run) >= 5 and len(set(per_run.values())) > 2  # tables of different sizes

    # fewest rows first, while the merges (twice a run's rows each) fit the ingest's rows
    budget, merged = sum(per_run.values()), set()
    for t in sorted(per_run, key=lambda t: (per_run[t], t)):
        if 2 * per_run[t] <= budget:
            budget -= 2 * per_run[t]
            merged.add(t)
    deferred = set(per_run) - merged
    assert merged and deferred and max(per_run, key=per_run.get) in deferred

    monkeypatch.setattr(Lake, "FANOUT", 2)
    monkeypatch.setattr(Lake, "TIER_ROWS", 1)
    monkeypatch.setattr(Lake, "MERGE_BUDGET", 1.0)
    wh = tmp_path / "wh"
    assert Warehouse(wh).ingest(str(_run(tmp_path / "r1", "a1"))).ok
    summary = Warehouse(wh).ingest(str(_run(tmp_path / "r2", "a2")))
    assert summary.ok
    assert summary.compacted == {t: 2 for t in merged}
    assert summary.compaction_deferred == {t: 2 * per_run[t] for t in deferred}
    assert "tracedb optimize" in summary.compaction_hint
    live = _live(wh)
    assert {t: sorted(f["rows"] for f in files) for t, files in live.items()} == \
        {t: [2 * r] if t in merged else [r, r] for t, r in per_run.items()}

    done = Warehouse(wh).optimize()
    assert {t: n for t, n in done.items() if n and t in schema.TABLES} == {t: 2 for t in deferred}
    assert {t: [f["rows"] for f in files] for t, files in _live(wh).items()} == {t: [2 * r] for t, r in per_run.items()}
    w = Warehouse(wh)
    assert {t: w.sql(f"SELECT count(*) AS n FROM {t}").to_pylist()[0]["n"] for t in per_run} == \
        {t: 2 * r for t, r in per_run.items()}
    assert w.check() == []


# rows of a nightly batch's three group files, per table (the large tables of the fleet bench)
NIGHT = {"nodes": (67_197, 73_434, 59_028), "kernels": (34_474, 39_897, 30_378),
         "runtime_calls": (25_703, 27_885, 22_144), "allocations": (14_958, 19_422, 13_438),
         "events": (7_348, 8_014, 6_913), "rollup_kernel_launches": (16_211, 17_661, 13_018),
         "steps": (68, 78, 59)}


class _Paper(Lake):
    """Live files known by rows and sizes only (4 bytes a row): what the plan reads."""

    def __init__(self) -> None:
        self.files: dict[str, list[dict]] = {t: [] for t in NIGHT}
        self.n = 0

    def live_file_ranges(self, table, published=None):
        return pa.Table.from_pylist(self.files[table], schema=pa.schema(
            [("run_id", pa.string()), ("path", pa.string()), ("rows", pa.int64()), ("size", pa.int64())]))

    def add_actions(self, table):  # the plan counts a table's files first
        return self.live_file_ranges(table)

    def dead_row_files(self):
        return set()

    def add(self, table: str, rows: int, night: int) -> None:
        self.n += 1
        self.files[table].append({"run_id": f"r-n{night:05d}", "path": f"f{self.n}", "rows": rows, "size": 4 * rows})

    def merge(self, table: str, chunk: list[dict]) -> int:
        gone = {r["path"] for r in chunk}
        self.files[table] = [r for r in self.files[table] if r["path"] not in gone]
        rows = sum(r["rows"] for r in chunk)
        self.add(table, rows, 0)
        self.files[table][-1]["run_id"] = min(r["run_id"] for r in chunk)
        return rows


def test_a_year_of_nights_merges_at_most_a_night_of_rows_a_night_with_a_weekly_optimize():
    paper, nights, week = _Paper(), 365, 7
    batch = sum(sum(v) for v in NIGHT.values())
    merged_a_night = []
    for n in range(1, nights + 1):
        for t, files in NIGHT.items():
            for rows in files:
                paper.add(t, rows, n)
        taken, _ = paper.ingest_compaction({}, batch, tuple(NIGHT))
        merged_a_night.append(sum(paper.merge(t, c) for t, c in taken))
        if n % week == 0:
            for t in NIGHT:
                for chunk in paper.compaction_plan(t, {}, everything=True):
                    paper.merge(t, chunk)
    assert max(merged_a_night) <= batch
    assert sum(1 for m in merged_a_night if m) > nights // 2  # the small tiers still merge at ingest
    for t, files in paper.files.items():
        rows = nights * sum(NIGHT[t])
        assert sum(f["rows"] for f in files) == rows
        # 64 k, 640 k, 6.4 M rows: three tiers below a full file (16 M rows: 4 bytes a row
        # reaches 64 MiB only at 16.8 M), nine files each; and the nights since the last optimize
        full = rows // (16 << 20)
        assert len(files) <= full + 1 + 3 * 9 + 3 * (nights % week), (t, len(files))


def test_optimize_merges_outside_the_commit_lock_while_other_writers_commit(tmp_path):
    """`tracedb optimize` stopped between writing a merge and committing it (the merges an
    ingest leaves take minutes at fleet scale) holds no lock: an ingest and a vacuum with
    no retention complete meanwhile, the vacuum sparing the merge's file (its mark), and
    the optimize then commits it. Row counts: tests/test_lake.py's two versions."""
    import subprocess
    import sys

    from test_lake import DUMP, ENV, LSTM, all_counts, data_files, make_run
    from test_lake_faults import resume, start, wait_stopped
    from tracedb.ingest import ingest

    wh = tmp_path / "wh"
    assert ingest([make_run(tmp_path / "a" / "r", DUMP).parent], wh).ok
    assert ingest([make_run(tmp_path / "b" / "s", LSTM).parent], wh).ok
    assert len(Lake(wh).live_files("nodes")[0]) == 2  # two small files: optimize merges them
    proc = start("optimize", "-w", wh, env={"TRACEDB_STOP_AT": "optimize_merged_nodes"})
    wait_stopped(proc)
    try:
        for args in (["ingest", make_run(tmp_path / "c" / "t", LSTM).parent], ["vacuum", "--retention-hours", "0"]):
            done = subprocess.run([sys.executable, "-m", "tracedb.cli", *map(str, args), "-w", str(wh)], env=ENV,
                                  capture_output=True, text=True, timeout=240)
            assert done.returncode == 0, done.stderr
    finally:
        rc, err = resume(proc)
    assert rc == 0, err
    assert all_counts(wh) == {"r": DUMP, "s": LSTM, "t": LSTM}
    lake = Lake(wh)
    assert len(lake.live_files("nodes")[0]) == 1  # r and s merged, then with t (under the lock)
    Warehouse(wh).vacuum(retention_hours=0)
    assert data_files(wh) == sorted(p for t in schema.TABLES for p in lake.add_actions(t).column("path").to_pylist())
    assert Warehouse(wh).check() == []


def test_the_ingest_command_says_what_it_left_to_optimize(tmp_path, monkeypatch):
    """With no budget every full tier is left: the second one-run ingest's note names the
    rows of every table's two files (twice the first ingest's rows, read from its files)."""
    from typer.testing import CliRunner

    from tracedb.cli import app

    monkeypatch.setattr(Lake, "FANOUT", 2)
    monkeypatch.setattr(Lake, "TIER_ROWS", 1)
    monkeypatch.setattr(Lake, "MERGE_BUDGET", 0.0)
    wh, runner = tmp_path / "wh", CliRunner()
    first = runner.invoke(app, ["ingest", str(_run(tmp_path / "r1", "a1")), "-w", str(wh)])
    assert first.exit_code == 0 and "note:" not in first.output
    rows = sum(pq.ParquetFile(wh / f[0]["path"]).metadata.num_rows for f in _live(wh).values())
    second = runner.invoke(app, ["ingest", str(_run(tmp_path / "r2", "a2")), "-w", str(wh)])
    assert second.exit_code == 0
    assert f"note: merges of {2 * rows:,} rows (" in second.output
    assert "left to `tracedb optimize`" in second.output
    quiet = runner.invoke(app, ["ingest", "--quiet", str(_run(tmp_path / "r3", "a3")), "-w", str(wh)])
    assert quiet.exit_code == 0 and "note:" not in quiet.output
