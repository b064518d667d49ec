"""`tracedb query` prints DuckDB's own Python values (`tracedb.output.Rows`) where they print
the same as the Arrow table the API returns (issue 12 item 6: no pyarrow import). The
oracle is the Arrow path itself: pyarrow's CSV writer and `Table.to_pylist`, on every
canned query of real warehouses and on values chosen to hit each formatting rule."""

from __future__ import annotations

import io
import random
import struct

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from tracedb import catalog
from tracedb import output as out
from tracedb import query as q
from tracedb import sqllib

TEXT_FORMATS = ("table", "csv", "json", "ndjson")
QUERIES = sqllib.list_queries()
# Required VARCHAR parameters (baseline/candidate, run_a/run_b) get these runs, in order.
RUNS = {"seed": ["tf_runmetadata_text", "tf_stepstats_gpu_streams"], "fleet": ["day1", "slow_extra2"]}


def printed(result, fmt: str) -> str:
    buf = io.StringIO()
    out.write(result, fmt, stream=buf)
    return buf.getvalue()


def both_ways(con: duckdb.DuckDBPyConnection, cq: sqllib.CannedQuery, values: dict):
    return q.execute(con, cq, values, rows=True), q.execute(con, cq, values)


@pytest.mark.parametrize("which", ["seed", "fleet"])
def test_every_canned_query_prints_the_same_without_arrow(which, seed_warehouse, fleet_warehouse):
    wh = seed_warehouse if which == "seed" else fleet_warehouse
    con = catalog.connect(wh)
    as_rows = 0
    for cq in QUERIES:
        runs = iter(RUNS[which])
        values = sqllib.bind(cq, {p.name: next(runs) for p in cq.params if p.required})
        rows, table = both_ways(con, cq, values)
        assert rows.num_rows == table.num_rows, cq.name
        as_rows += isinstance(rows, out.Rows)
        for fmt in TEXT_FORMATS:
            assert printed(rows, fmt) == printed(table, fmt), (which, cq.name, fmt)
    # Only fleet_trend (timestamps) needs Arrow (queue_length's DECIMAL quartiles are DOUBLE
    # since its rollup, in both of its branches).
    assert as_rows == len(QUERIES) - 1


EDGE_SQL = r"""
SELECT * FROM (VALUES
    (1, 'plain', 1.5::DOUBLE, true, 5::HUGEINT, [1, 2], ['a', NULL], [[1], []], 18446744073709551615::UBIGINT),
    (2, 'quote " comma , newline
tab	end', 'nan'::DOUBLE, false, NULL, [], [], NULL, 0::UBIGINT),
    (3, 'ünïcödé ✓ 😀', 'inf'::DOUBLE, NULL, -9223372036854775808::HUGEINT, NULL, ['"x"'], [[NULL, 3]], NULL),
    (4, '', '-inf'::DOUBLE, true, 9223372036854775807::HUGEINT, [NULL], NULL, [], 7::UBIGINT),
    (5, NULL, -0.0::DOUBLE, false, 0::HUGEINT, [-5], [''], [[0]], 8::UBIGINT),
    (6, 'x', 1e-7::DOUBLE, true, 1::HUGEINT, [3], ['b'], [[1, 2]], 9::UBIGINT),
    (7, 'y', 123456789012.5::DOUBLE, NULL, 2::HUGEINT, [4], ['c'], [[3]], 10::UBIGINT),
    (8, 'z', NULL, false, 3::HUGEINT, [5], ['d'], [[4]], 11::UBIGINT)
) t(i, s, d, b, h, li, ls, ll, u)
"""


@pytest.mark.parametrize("sql", [
    EDGE_SQL,
    "SELECT 170141183460469231731687303715884105727::HUGEINT AS big, 1::HUGEINT AS one",  # beyond int64
    "SELECT 1::TINYINT AS a, 2::SMALLINT AS b, 3::INTEGER AS c, 4::UTINYINT AS d, 5::USMALLINT AS e, 6::UINTEGER AS f",
    "SELECT 1 AS dup, 'two' AS dup",  # a repeated name: to_pylist keeps the last
    "SELECT 1 AS a WHERE false",  # no rows: the header alone
])
def test_edge_values_print_the_same(sql):
    con = duckdb.connect()
    cq = sqllib.parse(sql, "edge")
    rows, table = both_ways(con, cq, {})
    assert isinstance(rows, out.Rows)
    for fmt in TEXT_FORMATS:
        assert printed(rows, fmt) == printed(table, fmt), fmt


@pytest.mark.parametrize("sql", [
    "SELECT 1.25::DECIMAL(10, 2) AS d",  # Arrow's decimal->float64 cast is not float(Decimal)
    "SELECT 1.5::FLOAT AS f",
    "SELECT TIMESTAMP '2024-01-02 03:04:05' AS t",
    "SELECT [1::HUGEINT] AS l",  # Arrow keeps list elements decimal
    "SELECT {'a': 1} AS s",
])
def test_other_types_take_the_arrow_path(sql):
    rows = q.execute(duckdb.connect(), sqllib.parse(sql, "other"), {}, rows=True)
    assert isinstance(rows, pa.Table)


def test_csv_double_is_pyarrows_text():
    rng = random.Random(12)
    values = [0.0, -0.0, 1.0, 0.1, 1e-6, 1e-7, 999999999.5, 1e10, 9999999999.0, 5e-324, 1.7976931348623157e308]
    values += [rng.random() * 10 ** rng.randint(-12, 14) * rng.choice((1, -1)) for _ in range(20000)]
    values += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(20000)]
    values += [round(rng.random() * 10 ** rng.randint(0, 12), rng.randint(0, 3)) for _ in range(20000)]
    buf = io.BytesIO()
    pacsv.write_csv(pa.table({"x": pa.array(values, pa.float64())}), buf, pacsv.WriteOptions(include_header=False))
    expected = buf.getvalue().decode().splitlines()
    got = [out.csv_double(v) for v in values]
    assert got == expected
    assert got[:10] == ["0", "-0", "1", "0.1", "0.000001", "1e-7", "999999999.5", "1e+10", "9999999999", "5e-324"]
