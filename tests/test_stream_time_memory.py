"""Issue 28 item 13: stream_time's rollup in memory bounded however many kernels one
stream or device holds, with the rows of its declaration.

The metric's file (sql/metrics/stream_time.sql, with metrics/idle_gaps.sql and
metrics/queue_summary.sql included) is its declaration; their windows hold a whole device
(`PARTITION BY run_id, device`), so the ingest computes the rollup with the text its
`-- rollup-sql:` header names (sql/metrics/streamed/stream_time.sql): DuckDB's streaming
windows over ORDER BYs, which spill. Here: both give the same rows and column types on
random kernels (runs, files, devices and streams with NULLs, ties, zero durations, rows
overlapping within a stream, launches before, after and missing) for several parameter
values; and one stream of 2 M kernels, which the streamed text before session 16 could not
compute within 48 MB, fits, with the figures worked out from its layout.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pytest

from conftest import typed_rows as _rows
from tracedb import rollups, schema, sqllib

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


def _one_stream(folder: Path, n: int) -> Path:
    """A kernels file of `n` kernels on one stream: kernel i at 10 us * i, 4 us long (i
    even) or 12 us (i odd, ending 2 us after the next starts), launched 3 us before it
    starts."""
    given = {"run_id": "'r'", "device": "'GPU:0'", "rank": "0", "step": "0", "stream": "7", "kind": "'kernel'",
             "start_ns": "10000 * i", "duration_ns": "CASE WHEN i % 2 = 0 THEN 4000 ELSE 12000 END",
             "name": "'k'", "source_file": "'f'", "launch_start_ns": "10000 * i - 3000"}
    sel = [f"CAST({given.get(c, 'NULL')} AS {schema.duckdb_type(schema.TABLES['kernels'].field(c).type)}) AS {c}"
           for c in rollups.WHOLE_SOURCES["kernels"]]
    path = folder / "kernels.parquet"
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT {', '.join(sel)} FROM range({n}) t(i)) TO '{path}' (FORMAT parquet)")
    return path


def test_one_big_stream_fits_48mb(tmp_path):
    """2 M kernels on one stream, DuckDB at 48 MB on one thread (the rollup writer's
    setting): the streamed text before session 16 ran out of memory here (~1 s: its two
    sorts' merges squeezed by five hash aggregates' reservations); one sort of two rows a
    kernel, one narrow GROUP BY and windows fit, with the figures of the layout."""
    n = 2_000_000
    path = _one_stream(tmp_path, n)
    con = duckdb.connect()
    con.execute(f"SET threads = 1; SET memory_limit = '48MB'; SET temp_directory = '{tmp_path / 'spill'}'")
    con.execute(f"CREATE VIEW kernels AS SELECT * FROM read_parquet('{path}')")
    [got] = _rows(con, METRIC.rollup_sql, PARAMS)[1]
    # Worked out from the layout. Gaps: after an even kernel 6 us, launched 3 us before
    # the start, so after the end before: host wait (n / 2 of them); after an odd one -2
    # us (it ends after the next starts), launched before that end, under the 30 us
    # threshold: kernel wait (n / 2 - 1). Queue: launch (1) then start (0) each kernel, 2 n
    # changes, half at each length; 1 held 3 us n times, 0 held 7 us n - 1 times.
    host, kernel = n // 2, n // 2 - 1
    assert got[:12] == ("r", "f", 0, "GPU:0", 7, 6000 * host, host, -2000 * kernel, kernel, 0, 0, 2 * n)
    assert got[12:14] == (0.5, 0) and got[17] == 1  # mean, min, max
    assert [float(p) for p in got[14:17]] == [0.0, 0.5, 1.0]  # p25, p50, p75
    assert got[18] == round(3000 * n / (3000 * n + 7000 * (n - 1)), 4)
