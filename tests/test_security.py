"""Issue 13, finding 8: user SQL (`tracedb query`, `Warehouse.sql`, `.sql` files) runs
sandboxed: it reads only the warehouse's data, writes no file, attaches no database, and
`--allow-external` / `allow_external=True` is the explicit way out."""

from __future__ import annotations

import hashlib
import json
import os

import pytest
from typer.testing import CliRunner

import rawtrace
from conftest import scenario
from tracedb import Warehouse, catalog, schema
from tracedb.cli import app
from tracedb.errors import TracedbError

runner = CliRunner()
ESCAPES = [
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_text('/proc/self/environ')",
    "SELECT * FROM read_blob('/etc/hostname')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_text('{root}/../../../../etc/passwd')",
    "SELECT * FROM read_csv('http://127.0.0.1:9/x.csv')",
]


@pytest.fixture(scope="module")
def lstm(tmp_path_factory):
    wh = tmp_path_factory.mktemp("sandbox") / "wh"
    assert Warehouse(wh).ingest(scenario("tf_stepstats_gpu_streams"), run_id="lstm").ok
    return wh


def _expected_kernels():
    ks = rawtrace.tf().kernels
    return len(ks), sum(k.dur for k in ks)


def _data_files(wh):
    files = sorted(p for t in schema.TABLES for p in (wh / t).rglob("*.parquet"))
    assert files
    return files


def _digest(paths):
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def test_queries_over_the_views_still_run(lstm):
    n, total = _expected_kernels()
    t = Warehouse(lstm).sql("SELECT count(*) n, sum(duration_ns) d FROM kernels WHERE run_id = $r", r="lstm")
    assert t.to_pylist() == [{"n": n, "d": total}] and n == 755


@pytest.mark.parametrize("sql", ESCAPES)
def test_no_file_outside_the_warehouse_is_read(lstm, sql):
    with pytest.raises(TracedbError, match="sandbox refused it"):
        Warehouse(lstm).sql(sql.format(root=lstm.resolve()))


def test_copy_over_a_listed_data_file_is_refused_and_queries_keep_working(lstm):
    files = _data_files(lstm)
    before = _digest(files)
    target = files[0].relative_to(lstm).as_posix()
    for sql in (f"COPY (SELECT 1) TO '{target}'", f"COPY (SELECT 1) TO '{files[0]}' (FORMAT parquet)",
                "SELECT 1; COPY (SELECT 1 AS x) TO 'x.csv'", "EXPORT DATABASE 'dump'"):
        with pytest.raises(TracedbError, match="not allowed"):
            Warehouse(lstm).sql(sql)
    assert _digest(files) == before
    assert Warehouse(lstm).sql("SELECT count(*) n FROM kernels").to_pylist() == [{"n": _expected_kernels()[0]}]


@pytest.mark.parametrize("sql", [
    "ATTACH '{tmp}/evil.duckdb' AS evil",
    "ATTACH ':memory:' AS m",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET enable_external_access = true",
    "RESET allowed_directories",
    "CREATE TEMP TABLE t AS SELECT 1",
    "PRAGMA enable_profiling",
])
def test_no_attach_install_or_settings(lstm, tmp_path, sql):
    with pytest.raises(TracedbError, match="not allowed"):
        Warehouse(lstm).sql(sql.format(tmp=tmp_path))
    assert not (tmp_path / "evil.duckdb").exists()


def test_relative_paths_do_not_reach_the_current_folder(lstm, tmp_path, monkeypatch):
    # The views' relative paths resolve against the warehouse; a folder named like a
    # table in the current directory must not become readable through them.
    (tmp_path / "nodes").mkdir()
    (tmp_path / "nodes" / "secret.csv").write_text("a\n1\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TracedbError, match="sandbox refused it"):
        Warehouse(lstm).sql("SELECT * FROM read_csv('nodes/secret.csv')")
    assert Warehouse(lstm).sql("SELECT count(*) n FROM nodes").to_pylist() == [{"n": len(rawtrace.tf().nodes)}]


def test_sql_file_with_an_innocent_header_cannot_copy_passwd(lstm, tmp_path):
    q = tmp_path / "innocent.sql"
    out = tmp_path / "passwd.csv"
    q.write_text("-- title: Kernel count\n-- description: counts kernels\n"
                 f"COPY (SELECT * FROM read_csv('/etc/passwd')) TO '{out}';\n")
    r = runner.invoke(app, ["query", str(q), "-w", str(lstm)])
    assert r.exit_code == 2 and "COPY statements are not allowed" in r.output
    assert not out.exists()


def test_cli_refuses_reading_passwd(lstm):
    r = runner.invoke(app, ["query", "-", "-w", str(lstm)], input="SELECT * FROM read_text('/etc/passwd')")
    assert r.exit_code == 2 and "sandbox refused it" in r.output and "root:" not in r.output


def test_allow_external_opts_out(lstm, tmp_path):
    extra = tmp_path / "owners.csv"
    extra.write_text("kernel,owner\nMatMul,alice\n")
    sql = (f"SELECT o.owner, count(*) n FROM kernels k JOIN read_csv('{extra}') o ON k.name = o.kernel "
           "GROUP BY o.owner")
    with pytest.raises(TracedbError, match="sandbox refused it"):
        Warehouse(lstm).sql(sql)
    matmul = sum(1 for k in rawtrace.tf().kernels if k.name == "MatMul")
    assert Warehouse(lstm).sql(sql, allow_external=True).to_pylist() == [{"owner": "alice", "n": matmul}]
    assert matmul == 83
    r = runner.invoke(app, ["query", "-", "-w", str(lstm), "--allow-external", "-f", "json"], input=sql)
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == [{"owner": "alice", "n": 83}]
    out = tmp_path / "copied.csv"
    r = runner.invoke(app, ["query", "-", "-w", str(lstm), "--allow-external"],
                      input=f"COPY (SELECT count(*) n FROM kernels) TO '{out}'")
    assert r.exit_code == 0, r.output
    assert out.read_text().split() == ["n", "755"]


def test_catalog_connect_is_unchanged_for_tracedb_itself(lstm):
    # The sandbox is applied by query.run_query; catalog.connect keeps its signature and
    # Warehouse.connect stays a plain connection (documented in the README).
    con = Warehouse(lstm).connect()
    try:
        assert con.execute("SELECT current_setting('enable_external_access')").fetchone() == (True,)
    finally:
        con.close()
    assert os.path.isfile(lstm / catalog.CATALOG)


def test_sandbox_locks_a_python_connection_as_the_readme_says(lstm):
    from tracedb.query import sandbox

    con = sandbox(Warehouse(lstm).connect(), lstm)
    try:
        assert con.execute("SELECT count(*) FROM kernels").fetchone() == (_expected_kernels()[0],)
        for sql in ("SELECT * FROM read_text('/etc/passwd')", "SET enable_external_access = true",
                    f"COPY (SELECT 1) TO '{lstm}/../out.csv'"):
            with pytest.raises(Exception, match="Permission|locked"):
                con.execute(sql)
    finally:
        con.close()
    assert not (lstm.parent / "out.csv").exists()
