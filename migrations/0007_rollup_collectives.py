"""Schema 4 -> 5: the per-run rollup of `collectives` (issue 12 item 2).

New Delta table `rollup_collectives` (`tracedb.rollups`), filled for every run from its
live `kernels` rows by the same code and SQL an ingest runs (`sql/metrics/collectives.sql`),
under the run's live ingest_id. Safe to re-run after a crash (`rollups.backfill`).
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import rollups

    rollups.backfill(lake, ["rollup_collectives"], tag="rollup-m0007")
