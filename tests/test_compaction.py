"""Tiered compaction after an ingest (`ingest._compact`, `Lake.compaction_plan`): a table's
lowest tier that reaches `Lake.FANOUT` files is merged into one file after the ingest that
fills it, keeping every row.

Not timed: the test counts each table's live files through the Delta log, and the rows
through the views, against the rows of one run of the same TF trace (each run here is that
trace, so n runs hold n times its rows), read from a one-run warehouse the test ingests
first."""

from __future__ import annotations

import shutil

from conftest import scenario
from tracedb import ingest as ingest_mod
from tracedb import schema
from tracedb.api import Warehouse
from tracedb.lake import Lake


def _runs(root, names):
    src = scenario("tf_stepstats_gpu_streams")
    for name in names:
        (root / name).mkdir(parents=True)
        shutil.copy(src, root / name / src.name)
    return root


def _files(wh) -> dict[str, int]:
    lk = Lake(wh)
    published = lk.published()
    return {t: n for t in schema.TABLES if (n := lk.live_file_ranges(t, published).num_rows)}


def _rows(wh) -> dict[str, int]:
    w = Warehouse(wh)
    return {t: w.sql(f"SELECT count(*) AS n FROM {t}").to_pylist()[0]["n"] for t in schema.TABLES}


def test_a_full_tier_of_every_table_is_merged_after_the_ingest_that_fills_it(tmp_path, monkeypatch):
    one = tmp_path / "one"
    assert Warehouse(one).ingest(str(_runs(tmp_path / "r0", ["r00"]))).ok
    per_run = _rows(one)
    tables = sorted(_files(one))
    assert _files(one) == {t: 1 for t in tables}

    # nine runs, a commit each: every table's lowest tier holds nine files, one short of a tier
    monkeypatch.setattr(ingest_mod, "COMMIT_EVERY_RUNS", 1)
    # the tier's merge is ten runs' rows, over a one-run ingest's budget (test_compaction_budget.py)
    monkeypatch.setattr(Lake, "MERGE_BUDGET", float("inf"))
    wh = tmp_path / "wh"
    summary = Warehouse(wh).ingest(str(_runs(tmp_path / "r1", [f"a{i}" for i in range(Lake.FANOUT - 1)])))
    assert summary.ok and len(summary.runs) == Lake.FANOUT - 1 and summary.compacted == {}
    assert _files(wh) == {t: Lake.FANOUT - 1 for t in tables}
    # the tenth fills it: each table's ten files become one, its rows those of ten runs
    summary = Warehouse(wh).ingest(str(_runs(tmp_path / "r2", ["b"])))
    assert summary.ok and summary.compacted == {t: Lake.FANOUT for t in tables}
    assert _files(wh) == {t: 1 for t in tables}
    assert _rows(wh) == {t: Lake.FANOUT * n for t, n in per_run.items()}
    assert Warehouse(wh).check() == []
