"""A query's result written a batch at a time (`tracedb.output.Writer`, `run_query(sink=)`):
the bytes equal the whole result written at once, memory is a batch's, and a failed query
leaves no file. Oracles: pyarrow's CSV and Parquet writers and `json.dumps` of the whole
result, and DuckDB's own count of the rows."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

import tracedb
from tracedb import output as out
from tracedb import query as q
from tracedb import sqllib

# Every kind of column a `Rows` batch holds (text with quotes, commas, newlines and a
# formula-like start; a HUGEINT beyond int64; NULLs; lists), and the Arrow-only ones
# (DECIMAL, TIMESTAMP).
VALUES_SQL = """
SELECT i,
       CASE WHEN i % 5 = 0 THEN NULL ELSE 'k"' || i || ',x' || chr(10) || '=y' END AS name,
       i * 0.1::DOUBLE AS f,
       i % 3 = 0 AS b,
       [i, i + 1] AS l,
       CAST(i AS HUGEINT) * CASE WHEN i = 17 THEN 1000000000000000000000 ELSE 1 END AS h
FROM range(40) t(i)
"""
ARROW_SQL = "SELECT i, CAST(i AS DECIMAL(10, 3)) / 7 AS d, TIMESTAMP '2026-01-01' + INTERVAL (i) SECOND AS t FROM range(23) t(i)"


def _batches(sql: str, rows: bool, size: int, monkeypatch) -> tuple[list, int]:
    monkeypatch.setattr(q, "BATCH_ROWS", size)
    got: list = []
    count = q.stream(duckdb.connect(), sql, {}, rows, got.append)
    return got, count


def _whole_csv(table: pa.Table, safe: bool = False) -> str:
    buf = io.BytesIO()
    cols = [pa.array([json.dumps(v) if v is not None else None for v in c.to_pylist()])
            if pa.types.is_list(c.type) else c for c in table.columns]
    pacsv.write_csv(pa.Table.from_arrays(cols, names=table.column_names), buf)
    return buf.getvalue().decode()


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "arrow"])
@pytest.mark.parametrize("size", [1, 7, 40, 1000])
def test_batches_cover_the_result_once(rows, size, monkeypatch):
    got, count = _batches(VALUES_SQL, rows, size, monkeypatch)
    assert count == 40 == sum(b.num_rows for b in got)
    assert len(got) == -(-40 // size)  # full batches, no empty one after them
    assert all(isinstance(b, out.Rows) == rows for b in got)
    whole = duckdb.connect().sql(VALUES_SQL).to_arrow_table()
    assert [r["i"] for b in got for r in b.to_pylist()] == whole.column("i").to_pylist()


@pytest.mark.parametrize("rows", [True, False], ids=["rows", "arrow"])
def test_an_empty_result_is_one_empty_batch_with_its_columns(rows, monkeypatch):
    got, count = _batches("SELECT 1 AS a, 'x' AS b WHERE false", rows, 5, monkeypatch)
    assert count == 0 and len(got) == 1 and got[0].num_rows == 0
    assert got[0].column_names == ["a", "b"]


@pytest.mark.parametrize("fmt", ["csv", "json", "ndjson"])
@pytest.mark.parametrize("rows", [True, False], ids=["rows", "arrow"])
def test_text_written_a_batch_at_a_time_equals_the_whole_result(fmt, rows, monkeypatch):
    """(A HUGEINT column with a value beyond int64 is Decimal, which JSON writes as text,
    only in the batches that hold one: CSV writes the digits either way.)"""
    sql = VALUES_SQL if fmt == "csv" else VALUES_SQL.replace("1000000000000000000000", "1")
    whole = q.plain_numbers(duckdb.connect().sql(sql).to_arrow_table())
    expect = {"csv": _whole_csv(whole),
              "json": json.dumps(whole.to_pylist(), default=str, indent=1) + "\n",
              "ndjson": "".join(json.dumps(r, default=str) + "\n" for r in whole.to_pylist())}[fmt]
    for size in (1, 6, 1000):
        got, _ = _batches(sql, rows, size, monkeypatch)
        buf = io.StringIO()
        with out.Writer(fmt, stream=buf) as w:
            for b in got:
                w(b)
        assert buf.getvalue() == expect, (fmt, size)


@pytest.mark.parametrize("fmt", ["csv", "json", "ndjson"])
def test_an_empty_result_writes_what_the_whole_one_does(fmt, monkeypatch):
    got, _ = _batches("SELECT 1 AS a, 'x' AS b WHERE false", True, 5, monkeypatch)
    buf = io.StringIO()
    with out.Writer(fmt, stream=buf) as w:
        w(got[0])
    assert buf.getvalue() == {"csv": '"a","b"\n', "json": "[]\n", "ndjson": ""}[fmt]


def test_parquet_written_a_batch_at_a_time_holds_the_whole_result(tmp_path, monkeypatch):
    whole = q.plain_numbers(duckdb.connect().sql(ARROW_SQL).to_arrow_table())
    got, _ = _batches(ARROW_SQL, False, 4, monkeypatch)
    assert len(got) == 6
    with out.Writer("parquet", tmp_path / "r.parquet") as w:
        for b in got:
            w(b)
    assert pq.read_table(tmp_path / "r.parquet").equals(whole)
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]


PEAK_CHILD = """
import sys
import tracedb
from tracedb import query as q

def kb(field):
    return int(next(l for l in open("/proc/self/status") if l.startswith(field)).split()[1])

q.BATCH_ROWS = 10_000
wh = tracedb.Warehouse(sys.argv[1])
wh.sql("SELECT 1", output="rows", sink=lambda b: None)  # imports and the snapshot, both ways
wh.sql("SELECT 1", output="rows")
sql = "SELECT i, 'kernel_' || (i % 97) AS name, i * 1.5::DOUBLE AS f FROM range(1500000) t(i)"
before = kb("VmRSS")
if sys.argv[2] == "sink":
    seen = []
    assert wh.sql(sql, output="rows", sink=lambda b: seen.append(type(b).__name__)) == 1_500_000
    assert seen == ["Rows"] * 150, seen[:3]
else:
    assert type(wh.sql(sql, output="rows")).__name__ == "Rows"
print((kb("VmHWM") - before) // 1024)
"""


def test_a_fleet_sized_result_needs_a_batchs_memory(seed_warehouse):
    """1.5 M rows through a sink that keeps none, in a fresh process: its peak grows by a
    batch's memory, while the same rows fetched whole add ~200 MB of Python tuples (VmHWM
    over VmRSS once DuckDB, pyarrow and the snapshot are loaded)."""
    grew = {}
    for how in ("sink", "whole"):
        r = subprocess.run([sys.executable, "-c", PEAK_CHILD, str(seed_warehouse), how],
                           capture_output=True, text=True, check=True)
        grew[how] = int(r.stdout.split()[-1])
    assert grew["sink"] < 80 and grew["whole"] > 200, grew  # measured: 29 and 339 MB


def test_a_canned_query_through_a_sink_gives_its_rows(seed_warehouse, monkeypatch):
    monkeypatch.setattr(q, "BATCH_ROWS", 3)
    wh = tracedb.Warehouse(seed_warehouse)
    whole = wh.query("top_kernels", output="rows", limit=10)
    parts: list = []
    assert wh.query("top_kernels", output="rows", sink=parts.append, limit=10) == whole.num_rows == 10
    assert [r for p in parts for r in p.rows] == whole.rows and len(parts) == 4
    with pytest.raises(tracedb.TracedbError, match="batches are arrow or rows"):
        wh.query("top_kernels", output="pandas", sink=parts.append)


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracedb", *args], input=stdin, capture_output=True, text=True)


def test_the_cli_streams_to_a_file_and_a_failure_leaves_none(seed_warehouse, tmp_path):
    """A query that fails after DuckDB has handed out its first batches (error() at row
    250,000) exits 2 with one line, and leaves neither the file nor a partial one; the
    same query without the failure writes every row."""
    failing = "SELECT i, CASE WHEN i = 250000 THEN error('boom at ' || i) ELSE i END AS v FROM range(300000) t(i)"
    target = tmp_path / "out.csv"
    for fmt in ("csv", "parquet"):
        r = _cli("query", "-", "-w", str(seed_warehouse), "-f", fmt, "-o", str(target), stdin=failing)
        assert r.returncode == 2 and "boom at 250000" in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert list(tmp_path.iterdir()) == []
    r = _cli("query", "-", "-w", str(seed_warehouse), "-f", "csv", "-o", str(target),
             stdin=failing.replace("= 250000", "< 0"))
    assert r.returncode == 0, r.stderr
    lines = target.read_text().splitlines()
    assert lines[0] == '"i","v"' and len(lines) == 300_001 and lines[-1] == "299999,299999"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("fmt", ["csv", "table"])
def test_a_full_disk_under_stdout_is_one_line_and_exit_2(seed_warehouse, fmt):
    """stdout on a full device (/dev/full: every write fails with ENOSPC), whether it is
    streamed (csv) or written whole (table): one line naming the cause, exit 2, no
    traceback, and nothing more printed at the exit's flush."""
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "tracedb", "query", "SELECT range AS i FROM range(200000)",
                            "-w", str(seed_warehouse), "-f", fmt], stdout=full, stderr=subprocess.PIPE,
                           text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == ["tracedb: error: No space left on device"], r.stderr


def test_a_reader_that_leaves_early_stops_the_query_quietly(seed_warehouse):
    """`tracedb query ... | head -1`: the reader closes the pipe after the first line; the
    query stops with exit 1 and prints nothing on stderr (no BrokenPipeError traceback, no
    'Exception ignored' at the exit)."""
    p = subprocess.Popen([sys.executable, "-m", "tracedb", "query", "SELECT range AS i FROM range(3000000)",
                          "-w", str(seed_warehouse), "-f", "csv"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.readline() == b'"i"\n'
    p.stdout.close()
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 1
    assert err == "", err
