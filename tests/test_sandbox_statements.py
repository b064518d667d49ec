"""Issue 28 item 5: the sandbox lets through only what cannot execute a side effect.

`EXPLAIN ANALYZE` runs the statement it explains, so `EXPLAIN ANALYZE COPY ... TO
'<warehouse>/kernels/.../part.parquet'` overwrote live data files. Every statement type
DuckDB's parser knows gets a statement here, bare, under EXPLAIN, EXPLAIN ANALYZE and
EXPLAIN (ANALYZE): only queries (and EXPLAIN of a query) run, through `Warehouse.sql`,
stdin and `.sql` files, and no data file changes.
"""

from __future__ import annotations

import hashlib

import duckdb
import pytest
from typer.testing import CliRunner

import rawtrace
from conftest import scenario
from tracedb import Warehouse, schema
from tracedb.cli import app
from tracedb.errors import TracedbError

runner = CliRunner()

# One statement of each type DuckDB's Python API names ({target}: a live data file).
SAMPLES = {
    "SELECT": "SELECT count(*) FROM kernels",
    "INSERT": "INSERT INTO tracedb_meta VALUES ('k', 'v')",
    "UPDATE": "UPDATE tracedb_meta SET value = 'x'",
    "CREATE": "CREATE TABLE t AS SELECT 1",
    "DELETE": "DELETE FROM tracedb_meta",
    "PREPARE": "PREPARE p AS SELECT 1",
    "EXECUTE": "EXECUTE p",
    "ALTER": "ALTER TABLE tracedb_meta RENAME TO m",
    "TRANSACTION": "BEGIN TRANSACTION",
    "COPY": "COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)",
    "VACUUM": "VACUUM",  # ANALYZE parses as VACUUM too
    "EXPLAIN": "EXPLAIN SELECT 1",
    "DROP": "DROP VIEW kernels",
    "EXPORT": "EXPORT DATABASE '{root}/dump'",
    "PRAGMA": "PRAGMA version",
    "CALL": "CALL pragma_version()",
    "SET": "SET threads = 1",
    "LOAD": "LOAD json",
    "ATTACH": "ATTACH '{root}/evil.duckdb' AS evil",
    "DETACH": "DETACH tracedb",
    "MULTI": "PIVOT (SELECT 1 AS a) ON a",
    "MERGE_INTO": "MERGE INTO tracedb_meta USING (SELECT 1 AS a) s ON true WHEN MATCHED THEN DELETE",
}
# More spellings of the side-effecting kinds, and statement types the Python enum lacks.
MORE = [
    "ANALYZE", "SET VARIABLE v = 1", "CREATE MACRO m(a) AS a", "INSTALL json", "CHECKPOINT",
    "USE memory", "RESET threads", "COPY FROM DATABASE tracedb TO memory", "UPDATE EXTENSIONS",
    "CREATE SECRET s (TYPE s3, KEY_ID 'a', SECRET 'b')", "COMMENT ON VIEW kernels IS 'x'",
]
# Types no SQL text parses to (built by the API, or the parser's error value).
NOT_FROM_TEXT = {"INVALID", "RELATION", "LOGICAL_PLAN", "EXTENSION", "COPY_DATABASE", "ANALYZE",
                 "VARIABLE_SET", "CREATE_FUNC"}


@pytest.fixture(scope="module")
def lstm(tmp_path_factory):
    wh = tmp_path_factory.mktemp("sandbox_statements") / "wh"
    assert Warehouse(wh).ingest(scenario("tf_stepstats_gpu_streams"), run_id="lstm").ok
    return wh


def _files(wh):
    return sorted(p for t in schema.TABLES for p in (wh / t).rglob("*.parquet"))


def _digest(wh):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in _files(wh)}


def _fill(sql, wh):
    return sql.format(target=_files(wh)[0].as_posix(), root=wh.resolve().as_posix())


def test_every_statement_type_has_a_sample():
    con = duckdb.connect()
    for kind, sql in SAMPLES.items():
        assert [st.type.name for st in con.extract_statements(sql)] == [kind], sql
    named = set(duckdb.StatementType.__members__)
    assert named - set(SAMPLES) - NOT_FROM_TEXT == set(), "a new DuckDB statement type: add a sample"


def _variants(sql):
    return [sql, f"EXPLAIN {sql}", f"EXPLAIN ANALYZE {sql}", f"EXPLAIN ANALYSE {sql}",
            f"EXPLAIN (ANALYZE) {sql}", f"EXPLAIN (ANALYZE, FORMAT json) {sql}",
            f"EXPLAIN /* c */ ANALYZE\n{sql}", f"SELECT 1; EXPLAIN ANALYZE {sql}"]


@pytest.mark.parametrize("sql", [s for k, s in SAMPLES.items() if k not in ("SELECT", "EXPLAIN")] + MORE)
def test_only_queries_run_even_under_explain_analyze(lstm, sql):
    before = _digest(lstm)
    sql = _fill(sql, lstm)
    for variant in _variants(sql):
        with pytest.raises(TracedbError, match="not allowed|does not parse"):
            Warehouse(lstm).sql(variant)
    assert _digest(lstm) == before
    assert not (lstm / "dump").exists() and not (lstm / "evil.duckdb").exists()


def test_explain_of_a_query_still_runs(lstm):
    n = len(rawtrace.tf().kernels)
    wh = Warehouse(lstm)
    for variant in _variants(SAMPLES["SELECT"])[1:-1]:
        assert wh.sql(variant).num_rows >= 1, variant
    assert wh.sql("SELECT count(*) AS n FROM kernels").to_pylist() == [{"n": n}] and n == 755


def test_explain_analyze_copy_over_a_data_file_is_refused_from_stdin_and_files(lstm, tmp_path):
    """The reported attack, through each way SQL comes in; the run keeps its nodes."""
    nodes = len(rawtrace.tf().nodes)
    before = _digest(lstm)
    attack = _fill("EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)", lstm)
    sql_file = tmp_path / "innocent.sql"
    sql_file.write_text("-- title: Innocent\n-- description: nothing to see\n" + attack + "\n")
    for args, stdin in ((["query", "-"], attack), (["query", str(sql_file)], None)):
        r = runner.invoke(app, [*args, "--warehouse", str(lstm)], input=stdin)
        assert r.exit_code == 2, r.output
        assert "EXPLAIN of COPY statements are not allowed" in r.output
    with pytest.raises(TracedbError, match="EXPLAIN of COPY"):
        Warehouse(lstm).query(str(sql_file))
    assert _digest(lstm) == before
    got = Warehouse(lstm).sql("SELECT count(*) AS n FROM nodes WHERE run_id = 'lstm'").to_pylist()
    assert got == [{"n": nodes}]


def test_allow_external_still_runs_explain_analyze_of_a_copy(lstm, tmp_path):
    out = tmp_path / "out.csv"
    Warehouse(lstm).sql(f"EXPLAIN ANALYZE COPY (SELECT 42 AS x) TO '{out}'", allow_external=True)
    assert out.read_text().split() == ["x", "42"]
