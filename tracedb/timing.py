"""TRACEDB_TIMING=FILE: where an ingest's time goes, phase by phase and process by process.

Every process of an ingest (the caller and each worker) appends one JSON line per phase
to FILE: {"pid", "phase", "start", "end" (time.time(), so the processes share a clock),
"cpu" (the process's CPU seconds during the phase, all its threads)}. bench/bench_jobs.py
--phases turns them into the serial start-up, the workers' busy time and the serial tail
of `--jobs N`. Unset (the default), a phase costs one environment lookup.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def phase(name: str) -> Iterator[None]:
    path = os.environ.get("TRACEDB_TIMING")
    if not path:
        yield
        return
    start, cpu = time.time(), time.process_time()
    try:
        yield
    finally:
        line = json.dumps({"pid": os.getpid(), "phase": name, "start": start, "end": time.time(),
                           "cpu": time.process_time() - cpu})
        with open(path, "a") as f:  # one short O_APPEND write per line: processes do not interleave
            f.write(line + "\n")


def read(path: str | os.PathLike) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
