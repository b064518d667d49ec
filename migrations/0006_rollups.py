"""Schema 3 -> 4: per-run rollups for fleet-wide queries (issue 12 item 2).

New Delta tables `rollup_gpu_busy_idle` and `rollup_stream_overlap` (`tracedb.rollups`),
filled for every run from its live `kernels` rows by the same code and SQL an ingest
runs, under the run's live ingest_id (so the views keep them and a later re-ingest
replaces them like the run's other files). Safe to re-run after a crash: a run that
already has a table's rollup is left alone in that table (`rollups.backfill`).
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import rollups

    rollups.backfill(lake, ["rollup_gpu_busy_idle", "rollup_stream_overlap"], tag="rollup-m0006")
