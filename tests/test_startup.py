"""Start-up stays lazy (issue 12 item 6): which packages a command imports, as
`python -X importtime` reports them in a fresh interpreter. Not timed (times live in
bench/bench_startup.py); each heavy package named here costs 50-700 ms on its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import scenario

ROOT = Path(__file__).resolve().parent.parent
HEAVY = {"deltalake", "pandas", "duckdb", "pyarrow", "scipy", "sqlglot", "numpy", "rich", "polars"}


def imported(*args: str, cwd: Path = ROOT) -> set[str]:
    """Top-level package names a `tracedb` command imports, from -X importtime."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRACEDB_WAREHOUSE", None)
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tracedb.cli", *args],
                          capture_output=True, text=True, env=env, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "tracedb" in names and "typer" in names  # the parse itself works
    return names


def test_help_imports_nothing_heavy(tmp_path):
    assert imported("--help", cwd=tmp_path) & HEAVY == set()


def test_queries_imports_nothing_heavy(tmp_path):
    assert imported("queries", cwd=tmp_path) & HEAVY == set()


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> Path:
    """A one-run warehouse whose snapshot is published (as after any ingest)."""
    from tracedb.ingest import ingest

    wh = tmp_path_factory.mktemp("one_run") / "wh"
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="r1").ok
    return wh


@pytest.mark.parametrize("fmt", ["csv", "table", "json", "ndjson"])
def test_one_run_query_imports_only_duckdb(fmt, one_run, tmp_path):
    # Not the lake (pyarrow, numpy; deltalake, pandas), not sqlglot: the snapshot is fresh
    # (tracedb.snapshot) and the result prints from DuckDB's own values (tracedb.output.Rows).
    args = ("query", "top_kernels", "--param", "run_id=r1", "--format", fmt, "--warehouse", str(one_run))
    assert imported(*args, cwd=tmp_path) & HEAVY == {"duckdb"}


def test_parquet_and_decimal_results_still_use_arrow(one_run, tmp_path):
    base = ("--param", "run_id=r1", "--warehouse", str(one_run))
    assert "pyarrow" in imported("query", "top_kernels", "--format", "parquet", "-o", str(tmp_path / "k.parquet"), *base)
    decimal = tmp_path / "decimal.sql"  # no canned query returns DECIMAL since queue_length reads its rollup
    decimal.write_text("SELECT run_id, 1.5 * count(*) AS x FROM kernels WHERE run_id = $run_id GROUP BY run_id\n")
    assert "pyarrow" in imported("query", str(decimal), "--format", "csv", *base)


def test_snapshot_knows_the_lake_as_the_lake_does(one_run):
    from tracedb import catalog, lake, schema, snapshot

    assert snapshot.TABLES == tuple(schema.ALL_TABLES)
    assert (snapshot.LAKE_JSON, snapshot.CATALOG) == (lake.LAKE_JSON, catalog.CATALOG)
    assert snapshot.lake_state(one_run) == catalog._lake_state(lake.Lake(one_run))


def fresh(wh: Path) -> bool:
    import duckdb

    from tracedb import snapshot

    con = duckdb.connect()
    try:
        ok = snapshot.attach_fresh(con, wh)
        attached = {r[0] for r in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
        assert ("tracedb" in attached) == ok  # nothing left attached when it says no
        return ok
    finally:
        con.close()


def test_a_stale_missing_or_unmigrated_snapshot_takes_the_lake_path(one_run, tmp_path):
    import json
    import shutil

    from tracedb import Warehouse, TracedbError

    wh = tmp_path / "wh"
    shutil.copytree(one_run, wh)
    assert not fresh(wh)  # moved: the snapshot records the old root
    kernels = Warehouse(wh).sql("SELECT count(*) AS n FROM kernels WHERE kind = 'kernel'").column("n")[0].as_py()
    assert kernels > 0 and fresh(wh)  # catalog.connect rebuilt it
    (wh / "catalog.duckdb").unlink()
    assert not fresh(wh)
    rows = Warehouse(wh).query("top_kernels", output="rows", run_id="r1")
    assert sum(r[1] for r in rows.rows) == kernels  # instances of every kernel name
    assert fresh(wh)
    # A commit the snapshot missed (a crash between commit and publish): a new log version.
    log = wh / "runs" / "_delta_log"
    last = max(p for p in log.glob("*.json"))
    shutil.copy(last, log / f"{int(last.name[:20]) + 1:020d}.json")
    assert not fresh(wh)
    (log / f"{int(last.name[:20]) + 1:020d}.json").unlink()
    assert fresh(wh)
    # A migration this lake has not had: the lake path names it.
    meta_path = wh / "_tracedb" / "lake.json"
    meta = json.loads(meta_path.read_text())
    meta["migrations"] = meta["migrations"][:-1]
    meta_path.write_text(json.dumps(meta))
    assert not fresh(wh)
    with pytest.raises(TracedbError, match="tracedb migrate"):
        Warehouse(wh).query("top_kernels", output="rows")


@pytest.mark.parametrize("attr", ["SCHEMA_VERSION", "Warehouse"])
def test_lazy_package_attributes_still_resolve(attr):
    import tracedb

    assert getattr(tracedb, attr) is not None


def test_ingest_off_a_terminal_imports_no_rich(tmp_path):
    """A nightly job's ingest (stderr a pipe) prints lines, no bar: rich stays unimported
    (~29 ms of start-up); the run still lands and its line is printed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "tracedb.cli", "ingest",
                           str(scenario("tf_runmetadata_text")), "--warehouse", str(tmp_path / "wh"), "--jobs", "1"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    names = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in proc.stderr.splitlines()
             if line.startswith("import time:") and line.count("|") == 2}
    assert "tracedb" in names and "rich" not in names
    assert "ingested 1 run(s)" in proc.stdout


_MAINTAIN = """
import sys
from tracedb.cli import main
sys.argv = ["tracedb", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    assert not e.code, e.code
print("pandas" in sys.modules)
"""


@pytest.mark.parametrize("command", [["rm", "r1"], ["vacuum"], ["optimize"]])
def test_maintenance_commands_leave_pandas_unimported(command, one_run, tmp_path):
    """pyarrow's first `pa.table()` of a Delta log imports pandas where installed (1.4 s of
    an `rm` at load 12): the lake's maintenance commands tell pyarrow it is absent."""
    import shutil

    pytest.importorskip("pandas")
    wh = tmp_path / "wh"
    shutil.copytree(one_run, wh)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _MAINTAIN, *command, "--warehouse", str(wh)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines()[-1] == "False", proc.stdout
