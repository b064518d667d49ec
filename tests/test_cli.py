"""The CLI end to end on real seeds: ingest summary and exit codes, query formats, params."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from conftest import SCENARIOS, scenario
from tracedb.cli import app

runner = CliRunner()


@pytest.fixture
def lstm_warehouse(tmp_path):
    wh = tmp_path / "wh"
    result = runner.invoke(app, ["ingest", str(scenario("tf_stepstats_gpu_streams")), "--run-id", "lstm", "-w", str(wh)])
    assert result.exit_code == 0, result.output
    assert "lstm: 1/1 files, 577 nodes, 755 kernels" in result.output
    return wh


def test_top_kernels_on_stepstats_seed(lstm_warehouse):
    result = runner.invoke(app, ["query", "top_kernels", "-w", str(lstm_warehouse), "--format", "json", "-p", "limit=1000"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows[0]["name"] == "MatMul"
    assert rows[0]["instances"] == 83 and rows[0]["total_ns"] == 3_071_000
    # every kernel-kind row is counted once, and the shares of kernel time add up to 100
    assert sum(r["instances"] for r in rows) == 729 and sum(r["total_ns"] for r in rows) == 7_485_000
    assert abs(sum(r["time_pct"] for r in rows) - 100) < 0.01 * len(rows)


def test_query_formats_and_output(lstm_warehouse, tmp_path):
    out = tmp_path / "top.parquet"
    r = runner.invoke(app, ["query", "top_kernels", "-w", str(lstm_warehouse), "-f", "parquet", "-o", str(out), "-p", "limit=3"])
    assert r.exit_code == 0, r.output
    assert pq.read_table(out).column("name").to_pylist()[0] == "MatMul"
    r = runner.invoke(app, ["query", "top_kernels", "-w", str(lstm_warehouse), "-f", "csv", "-p", "limit=2"])
    lines = r.output.strip().splitlines()
    assert lines[0].startswith('"name","instances"') and len(lines) == 3
    r = runner.invoke(app, ["query", "top_kernels", "-w", str(lstm_warehouse), "-p", "limit=1"])
    assert "MatMul" in r.output and "(1 row)" in r.output


def test_stdin_sql_and_bound_params(lstm_warehouse):
    sql = "SELECT count(*) AS n FROM kernels WHERE run_id = $run"
    r = runner.invoke(app, ["query", "-", "-w", str(lstm_warehouse), "-f", "json", "-p", "run=lstm"], input=sql)
    assert json.loads(r.output) == [{"n": 755}]
    # a value is bound, never pasted: an injection attempt matches nothing
    r = runner.invoke(app, ["query", "-", "-w", str(lstm_warehouse), "-f", "json", "-p", "run=x' OR '1'='1"], input=sql)
    assert json.loads(r.output) == [{"n": 0}]


def test_param_errors_are_clean(lstm_warehouse):
    r = runner.invoke(app, ["query", "top_kernels", "-w", str(lstm_warehouse), "-p", "bogus=1"])
    assert r.exit_code == 2 and "unknown parameter(s) bogus" in r.output
    r = runner.invoke(app, ["query", "top_kernels", "-w", str(lstm_warehouse), "-p", "limit=ten"])
    assert r.exit_code == 2 and "limit must be BIGINT" in r.output
    r = runner.invoke(app, ["query", "no_such_query", "-w", str(lstm_warehouse)])
    assert r.exit_code == 2 and "no canned query named 'no_such_query'" in r.output


def test_sql_given_inline_runs_as_from_stdin(seed_warehouse):
    """`tracedb query "SELECT ..."` (as `duckdb -c`) is the same query as the SQL piped in,
    sandboxed alike; a typo of a canned name still gets the list of names."""
    wh = str(seed_warehouse)
    sql = "SELECT run_id, count(*) AS n FROM kernels GROUP BY run_id ORDER BY run_id"
    inline = runner.invoke(app, ["query", sql, "-w", wh, "-f", "json"])
    piped = runner.invoke(app, ["query", "-", "-w", wh, "-f", "json"], input=sql)
    assert inline.exit_code == 0, inline.output
    rows = json.loads(inline.output)
    assert rows == json.loads(piped.output) and len(rows) > 3 and all(r["n"] > 0 for r in rows)
    r = runner.invoke(app, ["query", "  with t AS (FROM runs) SELECT count(*) AS n FROM t", "-w", wh, "-f", "csv"])
    assert r.exit_code == 0 and r.output == f'"n"\n{len(SCENARIOS)}\n', r.output
    r = runner.invoke(app, ["query", "SELECT * FROM read_csv('/etc/passwd')", "-w", wh])
    assert r.exit_code == 2 and "sandbox refused" in r.output
    r = runner.invoke(app, ["query", "top_kernel", "-w", wh])
    assert r.exit_code == 2 and "no canned query named 'top_kernel'" in r.output


def test_dialect_prints_transpiled_sql():
    r = runner.invoke(app, ["query", "top_kernels", "--dialect", "trino"])
    assert r.exit_code == 0
    assert "run_id = ?" in r.output and "$run_id" not in r.output
    assert r.output.startswith("-- title: Top kernels")


def test_ingest_exit_code_is_one_when_a_file_fails(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(scenario("node_shape_dump"), runs / "good.txt")
    (runs / "bad.json").write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": ')  # claimed, then cut short
    r = runner.invoke(app, ["ingest", str(runs), "-w", str(tmp_path / "wh")])
    assert r.exit_code == 1
    assert "bad.json" in r.output and "good: 1/1 files, 178 nodes" in r.output


def test_help_shows_examples():
    for cmd in ("ingest", "query", "queries", "migrate", "formats", "export", "report", "runs", "rm", "vacuum"):
        r = runner.invoke(app, [cmd, "--help"])
        assert r.exit_code == 0 and "Example: tracedb" in r.output, cmd


def test_export_command_writes_viewable_json(tmp_path):
    wh = tmp_path / "wh"
    assert runner.invoke(app, ["ingest", str(scenario("xspace_jax_h200")), "--run-id", "jax", "-w", str(wh)]).exit_code == 0
    out = tmp_path / "jax.json"
    r = runner.invoke(app, ["export", "--run", "jax", "-o", str(out), "-w", str(wh)])
    assert r.exit_code == 0, r.output
    events = json.loads(out.read_text())["traceEvents"]
    gpu = [e for e in events if e["ph"] == "X" and e.get("cat") == "kernel"]
    assert len(gpu) == 30
    r = runner.invoke(app, ["export", "--run", "missing", "-o", str(out), "-w", str(wh)])
    assert r.exit_code == 2 and "no events for run 'missing'" in r.output


def test_warehouse_from_environment(tmp_path, monkeypatch):
    wh = tmp_path / "env_wh"
    env = {"TRACEDB_WAREHOUSE": str(wh)}
    r = runner.invoke(app, ["ingest", str(scenario("node_name_list")), "--run-id", "names"], env=env)
    assert r.exit_code == 0, r.output
    assert (wh / "catalog.duckdb").is_file()
    r = runner.invoke(app, ["query", "-", "-f", "csv"], input="select count(*) n from nodes", env=env)
    assert r.output.split() == ['"n"', "2467"]
    # and the default is ./tracedb-warehouse
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRACEDB_WAREHOUSE", raising=False)
    assert runner.invoke(app, ["ingest", str(scenario("node_name_list"))]).exit_code == 0
    assert (tmp_path / "tracedb-warehouse" / "catalog.duckdb").is_file()


def test_runs_rm_and_vacuum(tmp_path):
    wh = tmp_path / "wh"
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(scenario("node_shape_dump"), runs / "dump.txt")
    shutil.copy(scenario("tf_stepstats_gpu_streams"), runs / "lstm.txt")
    assert runner.invoke(app, ["ingest", str(runs), "-w", str(wh)]).exit_code == 0
    r = runner.invoke(app, ["runs", "-w", str(wh), "-f", "json"])
    listed = {row["run_id"]: row for row in json.loads(r.output)}
    assert listed["lstm"]["kernels"] == 755 and listed["dump"]["nodes"] == 178
    assert listed["lstm"]["formats"] == ["tf_stepstats"]
    # an orphan, as a crash between moving files and committing would leave
    orphan = wh / "nodes" / "part-x.parquet"
    shutil.copy(next(wh.glob("nodes/*.parquet")), orphan)
    r = runner.invoke(app, ["vacuum", "-w", str(wh)])  # default retention: 7 days, the orphan is new
    assert r.exit_code == 0 and "removed 0" in r.output and orphan.exists()
    r = runner.invoke(app, ["vacuum", "-w", str(wh), "--retention-hours", "0"])
    assert r.exit_code == 0 and "removed 1" in r.output
    assert not orphan.exists()
    from tracedb.lake import Lake

    [group] = Lake(wh).live_files("nodes")[0]  # both runs, one ingest: one file
    r = runner.invoke(app, ["rm", "dump", "-w", str(wh)])
    assert r.exit_code == 0 and "removed 1 run(s): dump" in r.output
    assert Lake(wh).live_files("nodes")[0] == [group]  # dump's rows stay in it, hidden, until compaction
    r = runner.invoke(app, ["vacuum", "-w", str(wh), "--retention-hours", "0"])
    assert r.exit_code == 0 and "removed 2" in r.output  # the rewritten runs and files tables' old files
    r = runner.invoke(app, ["query", "-", "-w", str(wh), "-f", "csv"], input="select count(*) n from nodes")
    assert r.output.split() == ['"n"', "577"]
    assert runner.invoke(app, ["optimize", "-w", str(wh)]).exit_code == 0  # drops dump's rows: lstm's alone
    r = runner.invoke(app, ["vacuum", "-w", str(wh), "--retention-hours", "0"])
    assert r.exit_code == 0 and not (wh / group).exists()
    [kept] = Lake(wh).live_files("nodes")[0]
    assert pq.read_table(wh / kept, columns=["run_id"]).column("run_id").to_pylist() == ["lstm"] * 577
    r = runner.invoke(app, ["rm", "dump", "-w", str(wh)])
    assert r.exit_code == 2 and "no such run(s): dump" in r.output


def test_param_bounds_are_checked_before_running(lstm_warehouse):
    r = runner.invoke(app, ["query", "top_kernels", "-w", str(lstm_warehouse), "-p", "limit=-1"])
    assert r.exit_code == 2 and "parameter limit must be >=0, got -1" in r.output
    r = runner.invoke(app, ["query", "kernel_duration_histogram", "-w", str(lstm_warehouse), "-p", "bucket_ns=0"])
    assert r.exit_code == 2 and "parameter bucket_ns must be >0, got 0" in r.output
    r = runner.invoke(app, ["query", "top_kernels", "-w", str(lstm_warehouse), "-p", "limit=0", "-f", "json"])
    assert r.exit_code == 0 and json.loads(r.output) == []
