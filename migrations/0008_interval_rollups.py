"""Schema 5 -> 6: per-run rollups of the interval queries (issue 12 item 2).

New Delta tables (`tracedb.rollups`), each filled for every run from its live rows by the
same code and SQL an ingest runs (`sql/metrics/<metric>.sql`), under the run's live
ingest_id:

- `rollup_stream_time`: idle gaps and queue length per source file and stream, read by
  `idle_time_breakdown` and `queue_length` (`stream_time.sql`);
- `rollup_memory_bandwidth`: per copy type, read by `memory_bandwidth`;
- `rollup_device_time`: the interval unions per run, rank and device that
  `kernel_type_breakdown`, `temporal_breakdown` and `comm_comp_overlap` report from;
- `rollup_step_times`: what `step_times` reports, per run, rank and step, from the run's
  `nodes` as well as its `kernels`;
- `rollup_kernel_launch_config`: what `kernel_launch_config` reports, per run, device,
  kernel name and launch configuration;
- `rollup_kernel_launches`: each runtime call joined with the activity it launched, the
  rows `kernel_launch_stats` filters, flags and orders.

Safe to re-run after a crash (`rollups.backfill`).
"""

from __future__ import annotations

TARGET = "lake"
TABLES = ["rollup_stream_time", "rollup_memory_bandwidth", "rollup_device_time", "rollup_step_times",
          "rollup_kernel_launch_config", "rollup_kernel_launches"]


def up(lake) -> None:
    from tracedb import rollups

    rollups.backfill(lake, TABLES, tag="rollup-m0008")
