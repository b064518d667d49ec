"""Schema 9 -> 10: per-run rollups of the fleet-wide canned queries that aggregated raw
rows (issue 22: every fleet-wide canned query in about a second).

New Delta tables (`tracedb.rollups`), each filled for every run from its live rows by the
same code and SQL an ingest runs (`sql/metrics/<metric>.sql`), under the run's live
ingest_id:

- `rollup_kernel_names`: per device, activity kind and name, read by `kernel_summary`;
- `rollup_kernel_histogram`: per device, activity kind and power-of-two duration bucket,
  read by `kernel_duration_histogram`;
- `rollup_op_summary`: per device, op name and op type, read by `top_ops`;
- `rollup_nccl_bandwidth`: what `nccl_bandwidth` reports for the whole run;
- `rollup_memcpy_summary`: what `memcpy_summary` reports;
- `rollup_run_summary`: a row per run, what `fleet_trend` compares across runs;
- `rollup_step_flops`: per rank, step and precision, the FLOPs `mfu` divides.

Each group of 50 runs gets a file a table (`rollups.backfill`), and then every table's
files are compacted as `tracedb optimize` would (`Lake.compaction_plan`, everything): a few
files a table, not one a run or a group. Safe to re-run after a crash (`rollups.backfill`:
a run that has a table's rollup is left alone in it; the compaction commits each merge
alone). A lake migrated from before schema 6 gets the tables created (empty) by an
earlier migration's `ensure_tables`; this one fills them.
"""

from __future__ import annotations

TARGET = "lake"
TABLES = ["rollup_kernel_names", "rollup_kernel_histogram", "rollup_op_summary", "rollup_nccl_bandwidth",
          "rollup_memcpy_summary", "rollup_run_summary", "rollup_step_flops"]


def up(lake) -> None:
    from tracedb import rollups

    rollups.backfill_in_run_order(lake, TABLES, tag="rollup-m0015")
    published = lake.published()
    for table in TABLES:
        for chunk in lake.compaction_plan(table, published, everything=True):
            merged = lake.write_compacted(table, chunk, published, "rollup-m0015")
            lake.commit_compacted(table, chunk, merged, published)
