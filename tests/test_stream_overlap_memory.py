"""Issue 28 item 13: stream_overlap's rollup in memory bounded however many kernels one
stream holds, with the rows of its declaration and of the metric before session 15.

The metric's file (sql/metrics/stream_overlap.sql) is its declaration: header,
parameters, and SQL any engine runs (`tracedb query --dialect`). Its windows hold a
whole stream, so the ingest computes the rollup with the text its `-- rollup-sql:` header
names (sql/metrics/streamed/): DuckDB's streaming windows over ORDER BYs, which spill.
Here: the two texts, and the metric as it was (tests/data/sql_before_overlap15), give
the same rows and column types on random kernels (runs, devices and streams with NULLs,
ties, zero durations, bursts, rows overlapping within a stream) for several parameter
values; and one stream of 300 k kernels, which the metric as it was could not roll up
within a 32 MB cap, rolls up with the figures worked out from its layout.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb
import pytest

from conftest import typed_rows as _rows
from tracedb import rollups, schema, sqllib

BEFORE = Path(__file__).parent / "data" / "sql_before_overlap15" / "stream_overlap.sql"
METRIC = rollups.metrics()["rollup_stream_overlap"]
PARAMS = {"run_id": None, "device": None, "kind": None, "step_from": None, "step_to": None}


def _kernels(con: duckdb.DuckDBPyConnection, seed: int) -> None:
    """Random kernels: 3 runs x 3 devices (one NULL) x 4 streams (one NULL); starts on a
    coarse grid (ties), durations 0 to long (zero lengths, rows overlapping within a
    stream), bursts of back-to-back kernels, a few rows without start or duration."""
    rnd = random.Random(seed)
    rows = []
    for run in ("a", "b", "c"):
        for device in ("GPU:0", "GPU:1", None):
            for stream in (7, 13, None, 21):
                t = rnd.randrange(0, 50)
                for _ in range(rnd.randrange(0, 40)):
                    if rnd.random() < 0.2:  # a burst: kernels end to end, or touching
                        for _ in range(rnd.randrange(1, 6)):
                            d = rnd.choice([0, 1, 5, 10])
                            rows.append((run, device, stream, rnd.choice(["kernel", "memcpy"]), rnd.randrange(3), t, d))
                            t += d
                    t += rnd.choice([0, 0, 1, 3, 10, 40])
                    d = rnd.choice([0, 0, 2, 5, 10, 30, 200])
                    start = None if rnd.random() < 0.02 else t
                    rows.append((run, device, stream, rnd.choice(["kernel", "memcpy", "memset"]), rnd.randrange(3), start, d))
    rows += [("a", "GPU:0", 7, "kernel", 1, 5, None)]
    rnd.shuffle(rows)
    con.execute("CREATE TABLE kernels (run_id VARCHAR, device VARCHAR, stream BIGINT, kind VARCHAR, step BIGINT, "
                "start_ns BIGINT, duration_ns BIGINT)")
    con.executemany("INSERT INTO kernels VALUES (?, ?, ?, ?, ?, ?, ?)", rows)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_streamed_rollup_and_declaration_give_the_rows_of_before(seed):
    """The rollup's text, the declaration and the metric before session 15: same rows,
    same column types, for every parameter set (the streamed text also on 4 threads:
    its windows read their ORDER BY's order whatever the threads)."""
    assert METRIC.rollup_sql and "OVER ()" in METRIC.rollup_sql and "OVER ()" not in METRIC.sql
    assert sqllib.bound_names(METRIC.rollup_sql) == sqllib.bound_names(METRIC.sql)
    before = sqllib.parse(BEFORE.read_text(), "stream_overlap").sql
    con = duckdb.connect()
    _kernels(con, seed)
    cases = [{}, {"kind": "kernel"}, {"kind": "memcpy"}, {"step_from": 1}, {"step_from": 1, "step_to": 1},
             {"run_id": "b"}, {"run_id": "a", "device": "GPU:1", "kind": "kernel"}, {"kind": "nothing"}]
    seen = 0
    for case in cases:
        values = {**PARAMS, **case}
        want = _rows(con, before, values)
        seen += len(want[1])
        assert _rows(con, METRIC.sql, values) == want, case
        for threads in (1, 4):
            con.execute(f"SET threads = {threads}")
            assert _rows(con, METRIC.rollup_sql, values) == want, (case, threads)
    assert seen > 30  # devices with rows (49 for seed 1)


def _one_stream(wh: Path, n: int) -> None:
    """A run's kernels file of `n` kernels on one stream: kernel i at 10 us * i, 4 us long
    (i even) or 12 us (i odd, so it overlaps the next one by 2 us)."""
    given = {"run_id": "'r'", "device": "'GPU:0'", "rank": "0", "step": "0", "stream": "7", "kind": "'kernel'",
             "start_ns": "10000 * i", "duration_ns": "CASE WHEN i % 2 = 0 THEN 4000 ELSE 12000 END", "name": "'k'"}
    sel = [f"CAST({given.get(c, 'NULL')} AS {schema.duckdb_type(schema.TABLES['kernels'].field(c).type)}) AS {c}"
           for c in rollups.WHOLE_SOURCES["kernels"]]
    (wh / "kernels").mkdir(parents=True)
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT {', '.join(sel)}, 'i1' AS ingest_id FROM range({n}) t(i)) "
                    f"TO '{wh / 'kernels' / 'part-0.parquet'}' (FORMAT parquet)")


def test_one_big_stream_rolls_up_within_a_low_cap(tmp_path, monkeypatch):
    """300 k kernels on one stream (600 k rows: all activity and the kernel kind) within
    32 MB: the metric before session 15 ran out of memory here (WarehouseError, ~1 s);
    the streamed text spills its two sorts and fits."""
    n = 300_000
    _one_stream(tmp_path, n)
    monkeypatch.setattr(rollups, "ROLLUP_MEMORY", "32MB")
    monkeypatch.setattr(rollups, "TABLE_ROWS", 10_000)  # read the file, as a big run's
    w = rollups.Writer()
    try:
        [f] = w.write_runs(tmp_path, [("r", "i1", ["kernels/part-0.parquet"])], tables=["rollup_stream_overlap"], rows=n)
    finally:
        w.close()
    got = duckdb.sql(f"SELECT kind, streams, busy_ns, overlap_ns, max_active_streams FROM read_parquet('{tmp_path / f.rel}') "
                     "ORDER BY kind NULLS FIRST").fetchall()
    # Worked out from the layout: a pair of kernels (odd i, then i + 1) is one island of
    # 14 us, kernel 0 one of 4 us, and the last (odd) kernel alone 12 us.
    busy = 4000 + 14000 * ((n - 2) // 2) + 12000
    assert got == [(None, 1, busy, 0, 1), ("kernel", 1, busy, 0, 1)]


def test_rollup_sql_header_names_one_library_file():
    """`-- rollup-sql:` names one .sql file of the library, under a `-- rollup:`; else a
    one-line error naming the metric's file."""
    from tracedb.errors import TracedbError

    head = "-- rollup: rollup_x\n-- columns: a\n"
    assert sqllib.parse(head + "-- rollup-sql: metrics/streamed/stream_overlap.sql\nSELECT 1 AS a", "x").rollup_sql \
        == METRIC.rollup_sql
    for bad in ("metrics/streamed/nothing.sql", "../pyproject.toml", "a.sql b.sql"):
        with pytest.raises(TracedbError, match=r"x\.sql: `-- rollup-sql:` names one file"):
            sqllib.parse(head + f"-- rollup-sql: {bad}\nSELECT 1 AS a", "x", Path("x.sql"))
    with pytest.raises(TracedbError, match="without a `-- rollup:` table"):
        sqllib.parse("-- rollup-sql: metrics/streamed/stream_overlap.sql\nSELECT 1", "x")
