"""Schema 8 -> 9: the lake names the files that may hold dead rows (issue 22).

From schema 8 a file holds many runs, and a run re-ingested or removed leaves its old rows
in files that other runs keep live; every data view filtered every row on `(run_id,
ingest_id)` in `runs`, a semi-join that took 2.3x a fleet-wide scan's time at 1,000
runs. From schema 9 each commit that supersedes or removes runs first names, in
`_tracedb/dead_rows.json`, the live files whose run and ingest ranges hold their old
rows (`Lake._mark_dead_rows`), and the snapshot filters only those files
(`Lake.whole_files`). A tracedb of schema 8 would not keep the list, hence the bump.

This migration writes the list for the files already there: each live data file's
`run_id` and `ingest_id` columns are read, and a file holding a pair that is not live is
named. It writes no data file; re-running it writes the same list.
"""

from __future__ import annotations

TARGET = "lake"


def up(lake) -> None:
    lake.ensure_tables()
    lake.mark_dead_rows_by_reading()
