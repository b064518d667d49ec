"""Issue 28 item 13: collectives' rollup with CPU ~linear and memory bounded however many
kernels one device holds, with the rows of its declaration.

The metric's file (sql/metrics/collectives.sql) is its declaration: it joins each
collective with the compute kernels of its device running at the same time (on run and
device: every collective compared with every kernel of the device, ~n squared, and one
hash key a device, which ran out of memory at 1 M kernels on one device at 64 MB). The
ingest computes the rollup with the text its `-- rollup-sql:` header names
(sql/metrics/streamed/collectives.sql): one sweep by time, DuckDB's streaming windows over
an ORDER BY. Here: both give the same rows and column types on random kernels (runs and
devices with NULLs, names of every pattern, `name_like`, other kinds, steps, ties, zero
durations) for several parameter values; a collective covered by identical compute
kernels is overlapped for its duration, not more; the rollup's text joins nothing; and one
device of 1 M kernels, every tenth an all-reduce, rolls up within 64 MB with the figures
worked out from its layout.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import duckdb
import pytest

from conftest import typed_rows as _rows
from tracedb import rollups, schema, sqllib

METRIC = rollups.metrics()["rollup_collectives"]
ROLLUP = METRIC.rollup_sql or METRIC.sql  # the text the ingest computes the rollup with
PARAMS = {"run_id": None, "device": None, "name_like": None, "step_from": None, "step_to": None}
NAMES = ["ncclKernel_AllReduce_RING", "gemm", "elementwise", None, "AllGather_x", "fmha_fwd", "all_to_all",
         "allXreduce", "reduce-scatter", "k"]


def _kernels(con: duckdb.DuckDBPyConnection, seed: int) -> None:
    """Random kernels: 3 runs (one NULL) x 3 devices (one NULL) x 3 streams (one NULL);
    starts on a coarse grid (ties), durations 0 to long, names of every kind (`allXreduce`
    matches `%all_reduce%`: `_` is LIKE's one-character wildcard), a few other kinds and
    rows without start or duration."""
    rnd = random.Random(seed)
    rows = []
    for run in ("a", "b", None):
        for device in ("GPU:0", "GPU:1", None):
            for stream in (7, 13, None):
                t = rnd.randrange(0, 50)
                for _ in range(rnd.randrange(0, 30)):
                    t += rnd.choice([0, 0, 1, 3, 10, 40, 500])
                    d = rnd.choice([0, 0, 2, 5, 10, 30, 200, 4000])
                    kind = rnd.choice(["kernel"] * 8 + ["memcpy", None])
                    start = None if rnd.random() < 0.02 else t
                    dur = None if rnd.random() < 0.02 else d
                    rows.append((run, device, stream, rnd.choice(NAMES), kind, rnd.randrange(3), start, dur))
    rnd.shuffle(rows)
    con.execute("CREATE TABLE kernels (run_id VARCHAR, device VARCHAR, stream BIGINT, name VARCHAR, kind VARCHAR, "
                "step BIGINT, start_ns BIGINT, duration_ns BIGINT)")
    con.executemany("INSERT INTO kernels VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_streamed_rollup_gives_the_rows_of_the_declaration(seed):
    """The rollup's text and the declaration: same rows, same column types, for every
    parameter set (the streamed text also on 4 threads: its windows read their ORDER
    BY's order whatever the threads)."""
    assert METRIC.rollup_sql and "OVER ()" in METRIC.rollup_sql and "OVER ()" not in METRIC.sql
    assert sqllib.bound_names(METRIC.rollup_sql) == sqllib.bound_names(METRIC.sql)
    con = duckdb.connect()
    _kernels(con, seed)
    cases = [{}, {"name_like": "fmha%"}, {"name_like": "%"}, {"step_from": 1}, {"step_from": 1, "step_to": 1},
             {"run_id": "b"}, {"device": "GPU:1"}, {"run_id": "a", "device": "GPU:0", "name_like": "gemm"},
             {"run_id": "nothing"}]
    seen = 0
    for case in cases:
        values = {**PARAMS, **case}
        want = _rows(con, METRIC.sql, values)
        seen += len(want[1])
        for threads in (1, 4):
            con.execute(f"SET threads = {threads}")
            assert _rows(con, METRIC.rollup_sql, values) == want, (case, threads)
    assert seen > 100


def test_a_collective_under_identical_kernels_is_overlapped_for_its_duration():
    """A 100 ns all-reduce under four identical compute kernels (and one more ending
    inside it): overlapped 100 ns, exposed 0, in both texts. The declaration before
    session 16 merged rows alike in instance, start and end with two windows that need not
    order them alike: two islands of one span, an overlap longer than the collective."""
    con = duckdb.connect()
    con.execute("CREATE TABLE kernels (run_id VARCHAR, device VARCHAR, stream BIGINT, name VARCHAR, kind VARCHAR, "
                "step BIGINT, start_ns BIGINT, duration_ns BIGINT)")
    rows = [("r", "GPU:0", 20, "ncclAllReduce", "kernel", 0, 1000, 100)]
    rows += [("r", "GPU:0", 7 + i, "gemm", "kernel", 0, 900, 400) for i in range(4)]
    rows += [("r", "GPU:0", 9, "gemm", "kernel", 0, 950, 100)]
    for seed in range(8):  # the order the rows arrive in
        random.Random(seed).shuffle(rows)
        con.execute("DELETE FROM kernels")
        con.executemany("INSERT INTO kernels VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        for threads in (1, 4):
            con.execute(f"SET threads = {threads}")
            for sql in (METRIC.sql, ROLLUP):
                # kernel time 100 + 4 x 400 + 100 ns: 5.56 %
                assert _rows(con, sql, PARAMS)[1] == [("r", "GPU:0", "ncclAllReduce", 1, 100, 5.56, 100, 0, 100.0)], \
                    (seed, threads, sql[:40])


def test_the_rollup_joins_nothing():
    """The rollup's plan reads the kernels once and joins nothing: no collective is
    compared with every kernel of its device (the declaration's join on run and device:
    355 s of CPU for 1 M kernels with 100 k all-reduces, bench/RESULTS.md session 15)."""
    con = duckdb.connect()
    _kernels(con, 1)
    plan = con.execute("EXPLAIN " + ROLLUP, {k: v for k, v in PARAMS.items() if k in sqllib.bound_names(ROLLUP)}).fetchall()
    operators = re.findall(r"─ ([A-Za-z_ ]+?) ─", "\n".join(r[1] for r in plan))
    assert operators.count("Order By") == 1 and operators.count("Seq Scan") == 1, operators
    assert not [o for o in operators if "Join" in o or "Cross" in o or "Product" in o], operators


def _one_device(folder: Path, n: int) -> Path:
    """A run's kernels file of `n` kernels on one device and stream: kernel i at 10 us * i,
    4 us long (i even) or 12 us (i odd, overlapping the next by 2 us); every tenth
    (i % 10 == 0, even) an all-reduce."""
    given = {"run_id": "'r'", "device": "'GPU:0'", "rank": "0", "step": "0", "stream": "7", "kind": "'kernel'",
             "start_ns": "10000 * i", "duration_ns": "CASE WHEN i % 2 = 0 THEN 4000 ELSE 12000 END",
             "name": "CASE WHEN i % 10 = 0 THEN 'ncclDevKernel_AllReduce_Sum' ELSE 'gemm' END"}
    sel = [f"CAST({given.get(c, 'NULL')} AS {schema.duckdb_type(schema.TABLES['kernels'].field(c).type)}) AS {c}"
           for c in rollups.WHOLE_SOURCES["kernels"]]
    path = folder / "kernels.parquet"
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT {', '.join(sel)} FROM range({n}) t(i)) TO '{path}' (FORMAT parquet)")
    return path


def test_one_device_of_a_million_kernels_fits_64mb(tmp_path):
    """1 M kernels on one device, 100 k of them all-reduces, DuckDB at 64 MB on one thread
    (the rollup writer's setting): the declaration ran out of memory here (its join's one
    hash key, ~0.5 s); the sweep fits, with the figures of the layout."""
    n = 1_000_000
    path = _one_device(tmp_path, n)
    con = duckdb.connect()
    con.execute(f"SET threads = 1; SET memory_limit = '64MB'; SET temp_directory = '{tmp_path / 'spill'}'")
    con.execute(f"CREATE VIEW kernels AS SELECT * FROM read_parquet('{path}')")
    got = _rows(con, ROLLUP, PARAMS)[1]
    # Worked out from the layout: all-reduce i (i > 0) starts 2 us before kernel i - 1
    # (odd, 12 us) ends and ends before kernel i + 1 starts: 2 us of its 4 overlapped; the
    # first (i = 0) has nothing before it. Kernel time: n / 2 x 4 us + n / 2 x 12 us.
    coll = n // 10
    overlapped = 2000 * (coll - 1)
    assert got == [("r", "GPU:0", "ncclDevKernel_AllReduce_Sum", coll, 4000 * coll,
                    round(100.0 * 4000 * coll / (8000 * n), 2), overlapped, 4000 * coll - overlapped,
                    round(100.0 * overlapped / (4000 * coll), 2))]
