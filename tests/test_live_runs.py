"""`Lake._live_runs` and `_live_counts`: which published runs a file may hold live rows of
(a mask over the runs of its run range), against the definition applied to every run:
its id in the file's run range and its live ingest in the file's ingest range (issue 22:
runs named `<model>-<night>` put every run in each nightly file's run range)."""

from __future__ import annotations

import random

import pyarrow as pa

from tracedb.lake import Lake, Published


def _definition(files: list[dict], published: dict) -> list[list[str]]:
    return [[r for r in sorted(published) if published[r] is not None
             and f["run_id"] is not None and f["run_id"] <= r <= f["run_hi"]
             and f["min_ingest"] is not None and f["min_ingest"] <= published[r] <= f["max_ingest"]] for f in files]


def test_live_runs_by_either_range_are_the_runs_the_definition_names():
    rnd = random.Random(22)
    nights = [f"2026{n:04d}T0000-{rnd.randrange(16**6):06x}" for n in range(60)]
    models = [f"m{m:02d}" for m in range(25)]
    published = {f"{m}-n{n:03d}": (nights[n] if rnd.random() > 0.1 else None) for m in models for n in range(60)}
    # re-ingested runs: a later night's ingest
    for r in rnd.sample(sorted(published), 80):
        published[r] = nights[min(59, int(r[-3:]) + rnd.randrange(1, 5))]
    files = []
    for _ in range(300):
        kind = rnd.random()
        a, b = sorted(rnd.sample(range(60), 2))
        if kind < 0.4:  # a night's file: every model, one night
            lo, hi, first, last = f"{models[0]}-n{a:03d}", f"{models[-1]}-n{a:03d}", nights[a], nights[a]
        elif kind < 0.7:  # a merged file of nights a..b
            lo, hi, first, last = f"{models[0]}-n{a:03d}", f"{models[-1]}-n{b:03d}", nights[a], nights[b]
        elif kind < 0.95:  # one run's file (the partitioned layout), maybe of an old ingest
            r = rnd.choice(sorted(published))
            lo = hi = r
            first = last = nights[rnd.randrange(60)]
        else:
            lo = hi = first = last = None
        files.append({"run_id": lo, "run_hi": hi, "min_ingest": first, "max_ingest": last})
    actions = pa.Table.from_pylist(files)
    want = _definition(files, published)
    assert Lake._live_runs(actions, published) == want
    assert Lake._live_runs(actions, Published(published)) == want
    assert Lake._live_counts(actions, published) == [len(w) for w in want]
    assert sum(map(len, want)) > 1000 and sum(1 for w in want if not w) > 10


def test_published_is_read_once_a_version_of_runs(tmp_path):
    """`Lake.published` keeps one object (and its sorted index) per version of `runs`:
    `rm` asks for it four times. A commit that changes `runs` gives a new one."""
    import shutil

    from conftest import scenario
    from tracedb import Warehouse, catalog

    for run in ("a", "b"):
        (tmp_path / "runs" / run).mkdir(parents=True)
        shutil.copy(scenario("node_name_list"), tmp_path / "runs" / run)
    wh = Warehouse(tmp_path / "wh")
    wh.ingest(tmp_path / "runs")
    lake = catalog.open_lake(tmp_path / "wh")
    first = lake.published()
    assert lake.published() is first and sorted(first) == ["a", "b"]
    assert first.index[0] == ["a", "b"]
    wh.rm("a")  # another Lake object: this one learns of it from the log
    after = lake.published()
    assert after is not first and sorted(after) == ["b"]
