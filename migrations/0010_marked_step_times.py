"""Schema 6 -> 7: host step time is the step marker's span (issue 24 item 3).

`step_times.host_step_ns` (and `host_start_ns`) now read the step marker's span from
`steps` (`ProfilerStep#N`, JAX's `StepTraceAnnotation`) where the trace marks steps, and
the first-to-last host op span only where it does not, as `steps.duration_ns` and
`fleet_trend` do. `rollup_step_times` is computed anew for every run from its live
`kernels`, `nodes` and `steps` files by the ingest's own code and SQL
(`sql/metrics/step_times.sql`), and swapped in one Delta commit. XSpace runs ingested
before schema 7 have no `steps` rows (the reader now reads `step_num` markers):
re-ingest them to gain their steps.
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    from tracedb import rollups

    # (host_start_ns / host_step_ns are restated: the runner refreshes the columns' docs first)
    rollups.backfill(lake, ["rollup_step_times"], tag="rollup-m0010", anew=True)
