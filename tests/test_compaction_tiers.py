"""Compaction's tiers (`Lake.compaction_plan`, issue 22): files climb the tiers until full,
so a table's file count follows its bytes, not its runs.

Each run ingested here is the same TF trace, one ingest a run, with the ingest's own
compaction after it; the thresholds are set tiny on the Lake (monkeypatched for the
ingest's own Lake) so that a few runs fill several tiers. The oracle is arithmetic on the
rows of one run of each table, read from a one-run warehouse with pyarrow: with a fanout of
2 and tiers of rows (TIER_ROWS 1: a file of m rows is in tier m.bit_length()), each ingest
adds a file of r rows, then merges the pairs of each tier that holds two (planned once, so
a merged file merges again at a later ingest), until a file is full (`_expected`).
Before issue 22's fix, tiers were by compressed size (a merged file of tiny files stayed
in the lowest tier) and a chunk above 48 MiB was not merged, so files stopped growing."""

from __future__ import annotations

import shutil

import pyarrow.parquet as pq
import pytest

from conftest import scenario
from tracedb import schema
from tracedb.api import Warehouse
from tracedb.lake import Lake


def _run(root, name):
    src = scenario("tf_stepstats_gpu_streams")
    (root / name).mkdir(parents=True)
    shutil.copy(src, root / name / src.name)
    return root  # a folder of run folders: the run is named `name`


def _live(wh) -> dict[str, list[dict]]:
    lk = Lake(wh)
    published = lk.published()
    return {t: rows for t in schema.TABLES if (rows := lk.live_file_ranges(t, published).to_pylist())}


@pytest.fixture
def per_run(tmp_path) -> dict[str, int]:
    """Rows a run writes to each table, from a one-run warehouse's files."""
    one = tmp_path / "one"
    assert Warehouse(one).ingest(str(_run(tmp_path / "r0", "r"))).ok
    out = {}
    for t, files in _live(one).items():
        assert len(files) == 1
        out[t] = pq.ParquetFile(one / files[0]["path"]).metadata.num_rows
    return out


def _tiny(monkeypatch, file_rows: int = 1 << 40) -> None:
    monkeypatch.setattr(Lake, "FANOUT", 2)
    monkeypatch.setattr(Lake, "TIER_ROWS", 1, raising=False)
    monkeypatch.setattr(Lake, "FILE_ROWS", file_rows, raising=False)
    monkeypatch.setattr(Lake, "FILE_BYTES", 1 << 40, raising=False)
    # every merge the plan names, as `optimize` would (the ingest's budget: test_compaction_budget.py)
    monkeypatch.setattr(Lake, "MERGE_BUDGET", float("inf"))


def _expected(r: int, n: int, full_rows: int | None = None) -> list[int]:
    """The rows of each live file after n ingests of r rows each (see the module's docstring)."""
    files: list[int] = []
    for _ in range(n):
        files.append(r)
        tiers: dict[int, list[int]] = {}
        for m in files:
            if full_rows is None or m < full_rows:
                tiers.setdefault(m.bit_length(), []).append(m)
        for members in tiers.values():
            for a, b in zip(members[0::2], members[1::2]):
                files.remove(a)
                files.remove(b)
                files.append(a + b)
    return sorted(files)


def _in_run_order(wh, files: list[dict]) -> bool:
    for f in files:
        runs = pq.read_table(wh / f["path"], columns=["run_id"]).column("run_id").to_pylist()
        if runs != sorted(runs):
            return False
    return True


def test_a_merged_file_lands_in_the_next_tier_and_merges_again(tmp_path, monkeypatch, per_run):
    _tiny(monkeypatch)
    wh = tmp_path / "wh"
    for n in range(1, 8):
        assert Warehouse(wh).ingest(str(_run(tmp_path / f"r{n}", f"a{n}"))).ok
        live = _live(wh)
        assert set(live) == set(per_run)
        for t, files in live.items():
            assert sorted(f["rows"] for f in files) == _expected(per_run[t], n), (t, n)
    assert _expected(1, 7) == [1, 2, 4]  # seven runs: the tiers of 1, 2 and 4 runs
    assert all(_in_run_order(wh, files) for files in live.values())
    w = Warehouse(wh)
    assert {t: w.sql(f"SELECT count(*) AS n FROM {t}").to_pylist()[0]["n"] for t in per_run} == \
        {t: 7 * r for t, r in per_run.items()}


def test_full_files_merge_no_more_so_the_count_follows_the_rows(tmp_path, monkeypatch, per_run):
    """FILE_ROWS = 8 runs of `nodes`: a file of 4 runs' nodes is full (half the bound) and
    stays; below it at most one file a tier (fanout 2) of 1 and 2 runs."""
    table = "nodes"
    r = per_run[table]
    _tiny(monkeypatch, file_rows=8 * r)
    wh = tmp_path / "wh"
    counts = []
    for n in range(1, 11):
        assert Warehouse(wh).ingest(str(_run(tmp_path / f"r{n}", f"a{n}"))).ok
        files = _live(wh)[table]
        assert sorted(f["rows"] for f in files) == _expected(r, n, 4 * r), n
        counts.append(len(files))
    assert _expected(1, 10, 4) == [2, 4, 4]  # two full files of 4 runs, and one of 2 below them
    assert counts == [len(_expected(r, n, 4 * r)) for n in range(1, 11)]
    assert _in_run_order(wh, _live(wh)[table])
    assert Warehouse(wh).check() == []
