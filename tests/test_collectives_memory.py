"""Issue 28 item 13 and issue 22: collectives in n log n however many kernels one device
holds, both texts: the metric's declaration (sql/metrics/collectives.sql, the raw path:
step ranges, `name_like`, `--dialect`) in standard windows, and the rollup's
(sql/metrics/streamed/collectives.sql, named by its `-- rollup-sql:` header: DuckDB's
streaming windows over an ORDER BY, memory bounded).

Here: both give the rows of a plain Python interval computation (the union of a device's
compute kernels intersected with each collective) and the column types of the rollup table
on random kernels (runs and devices with NULLs, names of every pattern, `name_like`, other
kinds, steps, ties, zero durations, overlapping collectives) for several parameter values,
and each other's rows on 1 and 4 threads; a collective covered by identical compute
kernels is overlapped for its duration, not more; the rollup's text joins nothing; no
step of the declaration's plan holds more rows than a few per kernel where every
collective overlaps every compute kernel (the declaration before session 17 paired them:
n squared rows); and one device of 1 M kernels, every tenth an all-reduce, gives the
figures worked out from its layout in both texts within 64 MB.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
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


def _kernels(con: duckdb.DuckDBPyConnection, seed: int) -> list[tuple]:
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
    return rows


# The metric's name patterns, lower-cased names matched with LIKE (its description's list).
PATTERNS = ["%nccl%", "%allreduce%", "%all_reduce%", "%all-reduce%", "%allgather%", "%all_gather%", "%all-gather%",
            "%reducescatter%", "%reduce_scatter%", "%reduce-scatter%", "%alltoall%", "%all_to_all%", "%all-to-all%"]
TYPES = [schema.duckdb_type(f.type) for f in schema.TABLES["rollup_collectives"]]  # the rollup table's


def _like(pattern: str, text: str) -> bool:
    """SQL LIKE: `%` any run of characters, `_` any one."""
    return re.fullmatch("".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern),
                        text, re.S) is not None


def _covered(union: list[tuple[int, int]], start: int, end: int) -> int:
    """How much of [start, end) the disjoint intervals cover."""
    return sum(max(0, min(end, b) - max(start, a)) for a, b in union)


def _union(spans) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return [(a, b) for a, b in merged]


def _oracle(rows, run_id=None, device=None, name_like=None, step_from=None, step_to=None) -> list[tuple]:
    """The metric worked out in Python from the rows `_kernels` inserted: collectives are
    the names (of any kind, any step, in the run and device asked for) matching a pattern
    or `name_like`; kernels of kind 'kernel' with a start, duration, run and device in the
    steps asked for count; a collective's overlap is its span's intersection with the union
    of its device's other kernels; one row a device and collective name."""
    scoped = [r for r in rows if run_id in (None, r[0]) and device in (None, r[1])]
    names = {r[3] for r in scoped if r[3] is not None
             and (any(_like(p, r[3].lower()) for p in PATTERNS) or (name_like is not None and _like(name_like, r[3])))}
    devices = defaultdict(list)
    for run, dev, _stream, name, kind, step, start, dur in scoped:
        if (kind == "kernel" and None not in (run, dev, start, dur) and (step_from is None or step >= step_from)
                and (step_to is None or step <= step_to)):
            devices[run, dev].append((name, start, start + dur))
    out = []
    for (run, dev), kernels in devices.items():
        union = _union((s, e) for n, s, e in kernels if n not in names)
        kernel_ns = sum(e - s for _, s, e in kernels)
        per_name = defaultdict(lambda: [0, 0, 0])
        for n, s, e in kernels:
            if n in names:
                per_name[n][0] += 1
                per_name[n][1] += e - s
                per_name[n][2] += _covered(union, s, e)
        for n, (count, total, overlapped) in per_name.items():
            out.append((run, dev, n, count, total, 100 * total / kernel_ns if kernel_ns else None, overlapped,
                        total - overlapped, 100 * overlapped / total if total else None))
    return sorted(out, key=repr)


def _same(got: list[tuple], want: list[tuple]) -> bool:
    """Same rows; the two percentages within their rounding to 2 places."""
    def close(a, b):
        return a == b or (isinstance(a, float) and isinstance(b, float) and abs(a - b) <= 0.005 + 1e-9)
    return len(got) == len(want) and all(len(g) == len(w) and all(map(close, g, w)) for g, w in zip(got, want))


CASES = [{}, {"name_like": "fmha%"}, {"name_like": "%"}, {"step_from": 1}, {"step_from": 1, "step_to": 1},
         {"run_id": "b"}, {"device": "GPU:1"}, {"run_id": "a", "device": "GPU:0", "name_like": "gemm"},
         {"run_id": "nothing"}, {"name_like": "k", "step_to": 0}]


@pytest.mark.parametrize("seed", range(1, 9))
def test_both_texts_give_the_rows_of_an_interval_oracle(seed):
    """The declaration and the rollup's text: the oracle's rows and the rollup table's
    column types, for every parameter set."""
    con = duckdb.connect()
    rows = _kernels(con, seed)
    assert TYPES == ["VARCHAR"] * 3 + ["BIGINT"] * 2 + ["DOUBLE"] + ["BIGINT"] * 2 + ["DOUBLE"]
    seen = overlapped = 0
    for case in CASES:
        values = {**PARAMS, **case}
        want = _oracle(rows, **case)
        seen += len(want)
        overlapped += sum(0 < r[6] < r[4] for r in want)
        for sql in (METRIC.sql, ROLLUP):
            types, got = _rows(con, sql, values)
            assert types == TYPES, (case, sql[:40])
            assert _same(got, want), (case, sql[:40], got, want)
    assert seen > 100 and overlapped > 10  # real rows, partly overlapped


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_streamed_rollup_gives_the_rows_of_the_declaration(seed):
    """The rollup's text and the declaration: same rows, same column types, for every
    parameter set (the streamed text also on 4 threads: its windows read their ORDER
    BY's order whatever the threads)."""
    assert METRIC.rollup_sql and "OVER ()" in METRIC.rollup_sql and "OVER ()" not in METRIC.sql
    assert sqllib.bound_names(METRIC.rollup_sql) == sqllib.bound_names(METRIC.sql)
    con = duckdb.connect()
    _kernels(con, seed)
    seen = 0
    for case in CASES:
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


def test_the_declaration_holds_a_few_rows_a_kernel_where_all_overlap(tmp_path):
    """300 all-reduces and 300 compute kernels on other streams, every all-reduce
    overlapping every compute kernel: no operator of the declaration's plan (DuckDB's
    profile) produces more than 2 rows a kernel (the declaration before session 17 paired
    each collective with each kernel running beside it: 90,000 rows, n squared); the rows
    are those worked out from the layout."""
    m = 300
    rows = [("r", "GPU:0", 1, "ncclAllReduce", "kernel", 0, i, 2_000_000 - 2 * i) for i in range(m)]
    rows += [("r", "GPU:0", 2 + i % 3, "gemm", "kernel", 0, 1000 + i, 100_000) for i in range(m)]
    con = duckdb.connect()
    con.execute("CREATE TABLE kernels (run_id VARCHAR, device VARCHAR, stream BIGINT, name VARCHAR, kind VARCHAR, "
                "step BIGINT, start_ns BIGINT, duration_ns BIGINT)")
    con.executemany("INSERT INTO kernels VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    profile = tmp_path / "profile.json"
    con.execute(f"PRAGMA enable_profiling = 'json'; PRAGMA profiling_output = '{profile}'")
    got = _rows(con, METRIC.sql, PARAMS)[1]
    con.execute("PRAGMA disable_profiling")

    def produced(op):
        yield op.get("intermediate_rows", 0)
        for child in op.get("children", []):
            yield from produced(child)

    most = max(n for op in json.loads(profile.read_text())["operator"] for n in produced(op))
    assert 2 * m <= most <= 2 * (2 * m), most  # 900: the compute kernels once, the collectives twice
    # The compute kernels' union: [1000, 101299), all of it inside every all-reduce i
    # ([i, 2e6 - i)); kernel time: the all-reduces' (sum of 2e6 - 2i) + 300 x 100 us.
    total = sum(2_000_000 - 2 * i for i in range(m))
    covered = m * (101_299 - 1000)
    assert got == [("r", "GPU:0", "ncclAllReduce", m, total, round(100.0 * total / (total + m * 100_000), 2), covered,
                    total - covered, round(100.0 * covered / total, 2))]


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


@pytest.mark.parametrize("text", ["rollup", "declaration"])
def test_one_device_of_a_million_kernels_fits_64mb(tmp_path, text):
    """1 M kernels on one device, 100 k of them all-reduces, DuckDB at 64 MB on one thread
    (the rollup writer's setting): the declaration before session 17 ran out of memory here
    (its join's one hash key, ~0.5 s); both sweeps fit, with the figures of the layout."""
    n = 1_000_000
    path = _one_device(tmp_path, n)
    con = duckdb.connect()
    con.execute(f"SET threads = 1; SET memory_limit = '64MB'; SET temp_directory = '{tmp_path / 'spill'}'")
    con.execute(f"CREATE VIEW kernels AS SELECT * FROM read_parquet('{path}')")
    got = _rows(con, ROLLUP if text == "rollup" else METRIC.sql, PARAMS)[1]
    # Worked out from the layout: all-reduce i (i > 0) starts 2 us before kernel i - 1
    # (odd, 12 us) ends and ends before kernel i + 1 starts: 2 us of its 4 overlapped; the
    # first (i = 0) has nothing before it. Kernel time: n / 2 x 4 us + n / 2 x 12 us.
    coll = n // 10
    overlapped = 2000 * (coll - 1)
    assert got == [("r", "GPU:0", "ncclDevKernel_AllReduce_Sum", coll, 4000 * coll,
                    round(100.0 * 4000 * coll / (8000 * n), 2), overlapped, 4000 * coll - overlapped,
                    round(100.0 * overlapped / (4000 * coll), 2))]
