"""The lake's choice of live and dead files (`Lake.live_files_by_run`, `Lake._unpublished`,
which bisect the sorted runs), against the rule written out by brute force: from schema 8
a file holds a range of runs (`run_id` .. `run_hi`, its stats) and of ingests; it may
hold the live rows of every published run in its run range whose live ingest is in its
ingest range, and it is dead (removed from the log) when it holds none. Random add
actions, including files without statistics, one-run files (the partitioned layout of
schema <= 7) and runs without a live ingest."""

from __future__ import annotations

import random

import pyarrow as pa

from tracedb.lake import Lake

SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("rows", pa.int64()), ("run_id", pa.string()),
                    ("run_hi", pa.string()), ("device", pa.string()), ("min_ingest", pa.string()),
                    ("max_ingest", pa.string()), ("partitioned", pa.bool_())])
INGESTS = [None, "i1", "i2", "i3"]
RUNS = ["a", "b", "c", "d", "日本"]


def holds(r: dict, published: dict) -> list[str]:
    if None in (r["run_id"], r["run_hi"], r["min_ingest"], r["max_ingest"]):
        return []
    return sorted(run for run, live in published.items()
                  if live is not None and r["run_id"] <= run <= r["run_hi"] and r["min_ingest"] <= live <= r["max_ingest"])


def random_actions(rng: random.Random) -> list[dict]:
    rows = []
    for k in range(rng.randint(0, 40)):
        lo = rng.choice(INGESTS)
        hi = None if lo is None else rng.choice([i for i in INGESTS if i and i >= lo])
        first = rng.choice([*RUNS, None])
        last = None if first is None else rng.choice([first, *[r for r in RUNS if r > first]])
        rows.append({"path": f"kernels/p{k}.parquet", "size": 10 + k, "rows": k, "run_id": first, "run_hi": last,
                     "device": "GPU:0", "min_ingest": lo, "max_ingest": hi, "partitioned": first == last})
    return rows


def test_selection_follows_the_rule():
    rng = random.Random(22)
    seen_dead = seen_many = 0
    for _ in range(400):
        rows = random_actions(rng)
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        published = {r: rng.choice(INGESTS) for r in rng.sample(RUNS, rng.randint(0, len(RUNS)))}
        lake = Lake.__new__(Lake)  # no folder: only the selection is under test
        lake.add_actions = lambda _table, t=table: t
        pairs, _ = lake.live_files_by_run("kernels", published)
        assert sorted(pairs) == sorted((run, r["path"]) for r in rows for run in holds(r, published))
        for run_ids in (None, {"a"}, {"b", "日本"}, set()):
            dead = Lake._unpublished(table, published, run_ids)
            meets = [r for r in rows if run_ids is None or any(
                r["run_id"] is not None and r["run_id"] <= x <= r["run_hi"] for x in run_ids)]
            assert sorted(r["path"] for r in dead) == sorted(r["path"] for r in meets if not holds(r, published))
            assert all(r == next(x for x in rows if x["path"] == r["path"]) for r in dead)  # whole rows: remove actions
            seen_dead += len(dead)
        seen_many += sum(len(holds(r, published)) > 1 for r in rows)
    assert seen_dead > 100 and seen_many > 100  # the cases that matter were drawn
