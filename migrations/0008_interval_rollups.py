"""Schema 5 -> 6: per-run rollups of the interval queries (issue 12).

New Delta tables (`tracedb.rollups`) `rollup_stream_time` (idle gaps and queue length per
source file and stream, read by `idle_time_breakdown` and `queue_length`) and
`rollup_memory_bandwidth` (per copy type, read by `memory_bandwidth`), filled for every
run from its live `kernels` rows by the same code and SQL an ingest runs
(`sql/metrics/stream_time.sql`, `sql/metrics/memory_bandwidth.sql`), under the run's live
ingest_id. Safe to re-run after a crash (`rollups.backfill`).
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import rollups

    rollups.backfill(lake, ["rollup_stream_time", "rollup_memory_bandwidth"], tag="rollup-m0008")
