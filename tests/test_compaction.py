"""Tiered compaction after an ingest spreads a full tier's merges over several ingests.

Every table gains a file at each ingest, so all their lowest tiers fill on the same
night; `ingest._compact` merges at most `ingest.compaction_budget(files_added)` chunks, the
smallest first, and leaves the rest to the next ingests. Not timed: the test counts the
live files of each table through the Delta log, and the rows through the views, whose
counts come from the traces ingested (each run the same TF trace, so the rows of n runs
are n times one run's, read from the one-run warehouse the test ingests first)."""

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


def test_a_full_tier_of_every_table_is_merged_over_several_ingests(tmp_path, monkeypatch):
    one = tmp_path / "one"
    assert Warehouse(one).ingest(str(_runs(tmp_path / "r0", ["r00"]))).ok
    per_run = _rows(one)
    tables = sorted(_files(one))
    assert len(tables) > ingest_mod.COMPACT_MIN_CHUNKS  # more tables fill than one ingest may merge

    # ten runs, a commit each: every table's lowest tier fills (ten files) in one ingest;
    # the budget held at its least, so the ingest merges COMPACT_MIN_CHUNKS tables' tiers
    monkeypatch.setattr(ingest_mod, "COMMIT_EVERY_RUNS", 1)
    monkeypatch.setattr(ingest_mod, "COMPACT_FILES_A_CHUNK", 1 << 30)
    wh = tmp_path / "wh"
    summary = Warehouse(wh).ingest(str(_runs(tmp_path / "r1", [f"a{i}" for i in range(10)])))
    assert summary.ok and len(summary.runs) == 10
    files = _files(wh)
    assert sorted(files) == tables and sorted(files.values()).count(10) == len(tables) - ingest_mod.COMPACT_MIN_CHUNKS
    assert sorted(summary.compacted.values()) == [10] * ingest_mod.COMPACT_MIN_CHUNKS
    merged = {t for t, n in files.items() if n == 1}
    # the smallest chunks first: each merged table held fewer bytes than any left waiting
    lk = Lake(wh)
    size = {t: sum(lk.live_file_ranges(t).column("size").to_pylist()) for t in tables}
    assert max(size[t] for t in merged) <= min(size[t] for t in tables if t not in merged)
    assert _rows(wh) == {t: 10 * n for t, n in per_run.items()}

    # each later one-run ingest merges COMPACT_MIN_CHUNKS more, until every tier is below ten
    later = 0
    while any(n >= Lake.FANOUT for n in _files(wh).values()):
        later += 1
        summary = Warehouse(wh).ingest(str(_runs(tmp_path / f"l{later}", [f"b{later}"])))
        assert summary.ok and 0 < len(summary.compacted) <= ingest_mod.COMPACT_MIN_CHUNKS
    assert later == -(-(len(tables) - ingest_mod.COMPACT_MIN_CHUNKS) // ingest_mod.COMPACT_MIN_CHUNKS)
    assert max(_files(wh).values()) <= 1 + later
    assert _rows(wh) == {t: (10 + later) * n for t, n in per_run.items()}


def test_the_budget_keeps_ahead_of_the_files_an_ingest_adds():
    """Tiers of FANOUT files need about n / (FANOUT - 1) merges for n files added; the budget
    allows more at every size, so no backlog grows without end."""
    for n in (0, 1, 21, 50, 210, 5000):
        assert ingest_mod.compaction_budget(n) >= max(1, n / (Lake.FANOUT - 1))
