"""Imported first by the ingest forkserver (`tracedb.workers.preload`): its pyarrow, and
so every worker's, treats pandas as not installed (`workers.arrow_without_pandas`), so
no worker imports pandas on its first table and the forkserver does not import it
either (~0.2-0.4 s of CPU beside the caller's start-up on 2 cores)."""

from tracedb.workers import arrow_without_pandas

arrow_without_pandas()
