"""Schema 5 -> 6: per-run rollups of the interval queries (issue 12 item 2).

New Delta table `rollup_device_time` (`tracedb.rollups`: the interval unions per run, rank
and device that kernel_type_breakdown, temporal_breakdown and comm_comp_overlap report
from), filled for every run from its live `kernels` rows by the same code and SQL an
ingest runs (`sql/metrics/device_time.sql`), under the run's live ingest_id. Safe to re-run
after a crash (`rollups.backfill`).
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import rollups

    rollups.backfill(lake, ["rollup_device_time"], tag="rollup-m0008")
