"""Issue 28 item 13: stream_time's rollup in memory bounded however many kernels one
stream or device holds, with the rows of its declaration.

The metric's file (sql/metrics/stream_time.sql, with metrics/idle_gaps.sql and
metrics/queue_summary.sql included) is its declaration; their windows hold a whole device
(`PARTITION BY run_id, device`), so the ingest computes the rollup with the text its
`-- rollup-sql:` header names (sql/metrics/streamed/stream_time.sql): DuckDB's streaming
windows over ORDER BYs, which spill. Here: both give the same rows and column types on
random kernels (runs, files, devices and streams with NULLs, ties, zero durations, rows
overlapping within a stream, launches before, after and missing) for several parameter
values. (Its memory is not bounded yet: one stream of 3 M kernels runs out at 64 MB as the
declaration does; bench/RESULTS.md, session 15 rollmem15.)
"""

from __future__ import annotations

import random
import duckdb
import pytest

from tracedb import rollups, sqllib

METRIC = rollups.metrics()["rollup_stream_time"]
PARAMS = {"run_id": None, "rank": None, "step_from": None, "step_to": None, "kernel_wait_ns": 30000}


def _kernels(con: duckdb.DuckDBPyConnection, seed: int) -> None:
    """Random kernels: 2 runs x 2 files (a file is one rank; one file NULL) x 3 devices (one
    NULL) x 3 streams (one NULL); starts on a coarse grid (ties), durations 0 to long; the
    launch a function of start and duration (rows alike in the window order are then alike
    in what they count), before the start, or missing; a few rows without start or duration."""
    rnd = random.Random(seed)
    rows = []
    for run in ("a", "b"):
        for source_file, rank in (("f0", 0), ("f1", 1), (None, 2)):
            for device in ("GPU:0", "GPU:1", None):
                for stream in (7, None, 21):
                    t = rnd.randrange(0, 50)
                    for _ in range(rnd.randrange(0, 30)):
                        t += rnd.choice([0, 0, 1, 3, 10, 40, 50_000])
                        d = rnd.choice([0, 0, 2, 5, 10, 30, 200, 40_000])
                        start = None if rnd.random() < 0.02 else t
                        dur = None if rnd.random() < 0.02 else d
                        launch = None if (t + d) % 7 == 0 else t - (3 * t + d) % 60_000
                        rows.append((run, source_file, rank, device, stream, rnd.randrange(3), start, dur, launch))
    rnd.shuffle(rows)
    con.execute("CREATE TABLE kernels (run_id VARCHAR, source_file VARCHAR, rank BIGINT, device VARCHAR, stream BIGINT, "
                "step BIGINT, start_ns BIGINT, duration_ns BIGINT, launch_start_ns BIGINT)")
    con.executemany("INSERT INTO kernels VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)


def _rows(con: duckdb.DuckDBPyConnection, sql: str, values: dict) -> tuple[list, list]:
    used = sqllib.bound_names(sql)
    cur = con.execute(sql, {k: v for k, v in values.items() if k in used})
    rows = cur.fetchall()
    return [str(d[1]) for d in cur.description], sorted(rows, key=repr)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streamed_rollup_gives_the_rows_of_the_declaration(seed):
    """The rollup's text and the declaration: same rows, same column types, for every
    parameter set (the streamed text also on 4 threads: its windows read their ORDER BY's
    order whatever the threads)."""
    assert METRIC.rollup_sql and "OVER ()" in METRIC.rollup_sql and "PARTITION BY run_id, device" in METRIC.sql
    assert sqllib.bound_names(METRIC.rollup_sql) == sqllib.bound_names(METRIC.sql)
    con = duckdb.connect()
    _kernels(con, seed)
    cases = [{}, {"kernel_wait_ns": 0}, {"kernel_wait_ns": 100}, {"step_from": 1}, {"step_from": 1, "step_to": 1},
             {"run_id": "b"}, {"run_id": "a", "rank": 1}, {"rank": 9}]
    seen = 0
    for case in cases:
        values = {**PARAMS, **case}
        want = _rows(con, METRIC.sql, values)
        seen += len(want[1])
        for threads in (1, 4):
            con.execute(f"SET threads = {threads}")
            assert _rows(con, METRIC.rollup_sql, values) == want, (case, threads)
    assert seen > 100
