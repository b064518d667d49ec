"""The lake's choice of live and superseded files, made with Arrow over a table's add
actions (`Lake.live_files_by_run`, `Lake._unpublished`), against the rule written out row
by row: a file is live when its ingest_id range holds its run's live ingest (mixed when
the range is not that one ingest alone); a file is removed when it is wholly of one ingest
that is not its run's live one (a run not published has none); a file whose range spans
several ingests is rewritten instead. Random add actions, including files without
statistics and runs without a live ingest."""

from __future__ import annotations

import random

import pyarrow as pa

from tracedb.lake import Lake

SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("rows", pa.int64()), ("run_id", pa.string()),
                    ("device", pa.string()), ("min_ingest", pa.string()), ("max_ingest", pa.string())])
INGESTS = [None, "i1", "i2", "i3"]


def live_rule(rows: list[dict], published: dict) -> tuple[list, bool]:
    files, mixed = [], False
    for r in rows:
        live = published.get(r["run_id"])
        if live is None or r["min_ingest"] is None:
            continue
        if r["min_ingest"] == r["max_ingest"] == live:
            files.append((r["run_id"], r["path"]))
        elif r["min_ingest"] <= live <= r["max_ingest"]:
            files.append((r["run_id"], r["path"]))
            mixed = True
    return sorted(files), mixed


def unpublished_rule(rows: list[dict], published: dict, run_ids: set | None) -> tuple[list, set]:
    whole, partial = [], set()
    for r in rows:
        if run_ids is not None and r["run_id"] not in run_ids:
            continue
        if r["min_ingest"] == r["max_ingest"] and r["min_ingest"] != published.get(r["run_id"]):
            whole.append(r["path"])
        elif r["min_ingest"] != r["max_ingest"]:
            partial.add(r["run_id"])
    return sorted(whole), partial


def random_actions(rng: random.Random) -> list[dict]:
    rows = []
    for k in range(rng.randint(0, 40)):
        lo = rng.choice(INGESTS)
        hi = None if lo is None else rng.choice([i for i in INGESTS if i and i >= lo])
        rows.append({"path": f"kernels/p{k}.parquet", "size": 10 + k, "rows": k, "run_id": rng.choice(["a", "b", "c", None]),
                     "device": "GPU:0", "min_ingest": lo, "max_ingest": hi})
    return rows


def test_arrow_selection_follows_the_rule():
    rng = random.Random(22)
    for _ in range(400):
        rows = random_actions(rng)
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        published = {r: rng.choice(INGESTS) for r in rng.sample(["a", "b", "c"], rng.randint(0, 3))}
        lake = Lake.__new__(Lake)  # no folder: only the selection is under test
        lake.add_actions = lambda _table, t=table: t
        files, mixed = lake.live_files_by_run("kernels", published)
        assert (sorted(files), mixed) == live_rule(rows, published)
        for run_ids in (None, {"a"}, {"b", "c"}, set()):
            whole, partial = Lake._unpublished(table, published, run_ids)
            assert (sorted(r["path"] for r in whole), partial) == unpublished_rule(rows, published, run_ids)
            by_path = {r["path"]: r for r in rows}
            assert all(r == by_path[r["path"]] for r in whole)  # whole rows, for the remove actions
