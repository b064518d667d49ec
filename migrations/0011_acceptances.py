"""Schema 6 -> 7 (this part): the `acceptances` table of the regression report (issue 27).

`tracedb accept RUN --note TEXT` records that a change which started at RUN is the new
normal, and `tracedb revoke` withdraws it; `tracedb report --history` starts a metric's
baseline at its latest live acceptance (docs/report.md, "The baseline rule"). The table
is an empty, unpartitioned Delta table with no ingest_id (its rows belong to no ingest).
Safe to re-run: an existing table is left alone.
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    lake.ensure_tables()  # creates the tables schema.py names and the lake lacks: acceptances
