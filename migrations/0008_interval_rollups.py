"""Schema 5 -> 6: per-run rollups of the interval queries (issue 12 item 2).

New Delta tables (`tracedb.rollups`), filled for every run from its live rows by the same
code and SQL an ingest runs, under the run's live ingest_id: `rollup_step_times` (from
`nodes` and `kernels`, sql/metrics/step_times.sql) and `rollup_kernel_launch_config`
(sql/metrics/kernel_launch_config.sql). Safe to re-run after a crash (`rollups.backfill`).
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import rollups

    rollups.backfill(lake, ["rollup_step_times", "rollup_kernel_launch_config"], tag="rollup-m0008")
