"""Schema 3 -> 4: per-run rollups for fleet-wide queries (issue 12 item 2).

New Delta tables `rollup_gpu_busy_idle` and `rollup_stream_overlap` (`tracedb.rollups`),
filled for every run from its live `kernels` rows by the same code and SQL an ingest
runs, under the run's live ingest_id (so the views keep them and a later re-ingest
replaces them like the run's other files). Safe to re-run after a crash: a run that
already has a table's rollup is left alone in that table.
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import rollups, schema

    lake.ensure_tables()
    live = {r["run_id"]: r["ingest_id"] for r in lake.read_table("runs", ["run_id", "ingest_id"]).to_pylist()}
    have = {t: {r["run_id"] for r in lake.add_actions(t).to_pylist()} for t in schema.ROLLUPS}
    kernels: dict[str, list[str]] = {}
    for r in lake.add_actions("kernels").to_pylist():
        ingest = live.get(r["run_id"])
        if ingest is not None and r["min_ingest"] <= ingest <= r["max_ingest"]:
            kernels.setdefault(r["run_id"], []).append(r["path"])
    files = []
    roll = rollups.Writer()
    try:
        by_missing: dict[tuple[str, ...], list] = {}  # all runs miss both, unless re-run after a crash
        for r in sorted(kernels):
            missing = tuple(t for t in schema.ROLLUPS if r not in have[t])
            if missing:
                by_missing.setdefault(missing, []).append((r, live[r], sorted(kernels[r])))
        for missing, todo in by_missing.items():
            for i in range(0, len(todo), 50):  # groups of runs, as an ingest commits them
                files += roll.write_runs(lake.root, todo[i:i + 50], tables=list(missing), tag="rollup-m0006")
        lake._add_files(files)  # one Delta commit per rollup table, checksums recorded
    except BaseException:
        lake.discard(files)
        raise
    finally:
        roll.close()
