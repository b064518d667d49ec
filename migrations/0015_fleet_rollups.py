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

The backfill (`rollups.backfill_in_run_order`) reads each live file of the source tables
once: a table's files are merged by run (each file is in run order; many runs a file, and
their run ranges overlap), the runs' rows go to the metrics a group of runs at a time in
run order, and each rollup table's rows are written as they come, in run order, into a
file a table (`lake.OrderedWriter`); its memory is bounded whatever the lake's runs.
(Its first version computed groups of 50 runs, each from the files holding its runs:
every file was read once a group it overlapped; bench/RESULTS.md "Session 17: mig17".) Then every table's
files are compacted as `tracedb optimize` would (`Lake.compaction_plan`, everything): a
re-run after a crash leaves files to merge. Safe to re-run after a crash (the backfill
commits at its end, one Delta commit a table; a run that has a table's rollup is left
alone in it; the compaction commits each merge alone). A lake migrated from before
schema 6 gets the tables created (empty) by an earlier migration's `ensure_tables`; this
one fills them.
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
