"""Fault injection for the crash and stall tests: one call, `step(name)`, at each step of
the commit protocol where a test may kill or pause the process.

`step` is a no-op unless the process's environment names that step:
TRACEDB_CRASH_AT=<name> kills the process there (SIGKILL, as a power cut or the OOM
killer would); TRACEDB_STOP_AT=<name> stops it there (SIGSTOP, until the test sends
SIGCONT), as a paused VM or a writer stalled past its lease would be. The tests set
these variables for a `tracedb` process they start, never in their own process.

The steps: ingest_before_commit, ingest_after_add, ingest_after_files,
ingest_after_publish, ingest_after_cleanup, cleanup_after_published,
rm_after_unpublish, optimize_merged_<table> (a merge written outside the lock),
optimize_after_<table>, snapshot_before_rename,
m0013_before_unpartition, m0013_after_unpartition (migration 0013), and
"reading <file name>" in an ingest worker.
"""

from __future__ import annotations

import os
import signal


def step(name: str) -> None:
    """Kill or stop this process here if TRACEDB_CRASH_AT / TRACEDB_STOP_AT names `name`."""
    if os.environ.get("TRACEDB_CRASH_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("TRACEDB_STOP_AT") == name:
        os.kill(os.getpid(), signal.SIGSTOP)
