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


def test_one_run_query_imports_only_duckdb_and_pyarrow(tmp_path):
    from tracedb.ingest import ingest

    wh = tmp_path / "wh"
    assert ingest([scenario("kineto_h200_fp32")], wh, run_id="r1").ok
    args = ("query", "top_kernels", "--param", "run_id=r1", "--format", "csv", "--warehouse", str(wh))
    subprocess.run([sys.executable, "-m", "tracedb.cli", *args], check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})  # publish the snapshot first
    # pyarrow brings numpy; nothing else heavy: not the lake's deltalake (pandas), not sqlglot.
    assert imported(*args, cwd=tmp_path) & HEAVY == {"duckdb", "pyarrow", "numpy"}


@pytest.mark.parametrize("attr", ["SCHEMA_VERSION", "Warehouse"])
def test_lazy_package_attributes_still_resolve(attr):
    import tracedb

    assert getattr(tracedb, attr) is not None
