"""The CLI as a new user meets it: help with an example and plain type names for every
command, --version, --dry-run, a progress bar on a terminal (a real pseudo-terminal),
a line per run and a summary otherwise, NDJSON, `tracedb schema`, clear errors."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tracedb
from conftest import DATA, scenario
from tracedb.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["ingest", "query", "queries", "formats", "schema", "export", "runs", "rm", "vacuum", "optimize", "check", "ddl",
            "migrate", "report", "accept", "revoke"]


def _command_names() -> list[str]:
    r = runner.invoke(app, ["--help"])
    section = r.output.split("Commands:")[1]
    return re.findall(r"^  (\w+)\s", section, flags=re.M)


def test_every_command_is_listed():
    assert sorted(_command_names()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", [None] + COMMANDS)
def test_help_has_an_example_and_plain_types(command):
    r = runner.invoke(app, ([command] if command else []) + ["--help"])
    assert r.exit_code == 0, r.output
    assert re.search(r"^\s+Example: tracedb ", r.output, flags=re.M), r.output
    # no Python annotations or braces as types (typer's `<bool>`, `{paths}...`, `<list[Path]>`)
    assert not re.search(r"<\w|\{\w|list\[|\bbool\b|Optional", r.output), r.output
    for line in r.output.splitlines():  # flags show no type; valued options a plain one
        m = re.match(r"^\s+(?:-\w, )?(--[\w-]+)(?: ([A-Z][A-Z=.|]*|\[[^\]]+\]))?\s{2,}", line)
        if m and m[1] in ("--help", "--quiet", "--dry-run", "--version"):
            assert m[2] is None, line


def test_defaults_are_shown():
    out = runner.invoke(app, ["ingest", "--help"]).output
    assert re.search(r"--jobs N\s+Parallel reader processes\s+\[default: the number of\s+cores\]", out)
    assert "[default: $TRACEDB_WAREHOUSE, else ./tracedb-warehouse]" in " ".join(out.split())
    assert "PATH..." in out.splitlines()[0]


def test_version():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output == f"tracedb {tracedb.__version__}\n"


def _jax_and_dump(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(DATA / "jax_profile_folder", runs / "jax")
    (runs / "dump").mkdir()
    shutil.copy(scenario("node_shape_dump"), runs / "dump" / "graph.txt")
    return runs


def test_dry_run_prints_what_was_found_and_writes_nothing(tmp_path):
    runs = _jax_and_dump(tmp_path)
    r = runner.invoke(app, ["ingest", str(runs), "--dry-run", "-w", str(tmp_path / "wh")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].startswith("found 2 run(s), 2 file(s), ")
    assert lines[1].startswith("  dump: 1 file(s), 0.0 MB in ")
    assert lines[2].startswith("  jax/2026_11_26_04_20_26: 1 file(s), 0.2 MB in ")
    assert "    skipped perfetto_trace.json.gz: a Perfetto rendering of vm.xplane.pb, which is read instead" in lines
    assert not (tmp_path / "wh").exists()


def test_ingest_not_on_a_terminal_prints_a_line_per_run_and_a_summary(tmp_path):
    runs = _jax_and_dump(tmp_path)
    r = runner.invoke(app, ["ingest", str(runs), "-w", str(tmp_path / "wh")])
    assert r.exit_code == 0, r.output
    assert "found 2 run(s)" in r.output
    assert re.search(r"^dump: 1/1 files, 178 nodes", r.output, flags=re.M)
    # 128 host events and the 24 XLA ops the GPU ran (nodes on GPU:0)
    assert re.search(r"^jax/2026_11_26_04_20_26: 1/1 files, 152 nodes, 48 kernels, 16 allocations", r.output, flags=re.M)
    assert re.search(r"^ingested 2 run\(s\), 2 file\(s\), 394 rows, 0 error\(s\) in ", r.output, flags=re.M)
    q = runner.invoke(app, ["ingest", str(runs), "-q", "-w", str(tmp_path / "wh")])
    assert q.exit_code == 0 and q.output == ""


def test_ingest_on_a_terminal_shows_a_progress_bar(tmp_path):
    runs = _jax_and_dump(tmp_path)
    for i in range(6):  # enough work for the bar to draw
        shutil.copytree(runs / "jax", runs / f"jax{i}")
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "150"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "tracedb.cli", "ingest", str(runs), "-w", str(tmp_path / "wh")],
                            stdin=slave, stdout=slave, stderr=slave, env=env, cwd=tmp_path)
    os.close(slave)
    out = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert proc.wait(timeout=60) == 0, out.decode(errors="replace")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))
    assert "found 8 run(s), 8 file(s)" in text
    assert re.search(r"ingest\s.*━", text), text  # the bar
    assert re.search(r"\d+/8 runs, \d+/8 files", text), text  # runs and files done
    assert "MB" in text and re.search(r"\d+(\.\d+)? [kMG]?B/s", text), text  # size and rate
    # and the summary table after it
    assert re.search(r"│ dump\s+│\s+1/1 │\s+178 │", text), text


def test_query_ndjson_and_unknown_run(tmp_path):
    wh = tmp_path / "wh"
    assert runner.invoke(app, ["ingest", str(scenario("tf_stepstats_gpu_streams")), "--run-id", "lstm", "-w", str(wh)]).exit_code == 0
    r = runner.invoke(app, ["query", "-", "-f", "ndjson", "-w", str(wh)],
                      input="select kind, count(*) n from kernels group by kind order by kind")
    assert r.exit_code == 0, r.output
    assert [json.loads(line) for line in r.output.splitlines()] == [{"kind": "kernel", "n": 729}, {"kind": "memcpy", "n": 26}]
    r = runner.invoke(app, ["query", "top_kernels", "-p", "run_id=lstn", "-w", str(wh)])
    assert r.exit_code == 2 and "no run 'lstn' in the warehouse (parameter run_id" in r.output


def test_empty_folder_is_no_trace_files_found(tmp_path):
    (tmp_path / "runs" / "a").mkdir(parents=True)
    r = runner.invoke(app, ["ingest", str(tmp_path / "runs"), "-w", str(tmp_path / "wh")])
    assert r.exit_code == 2 and "no trace files found in" in r.output and "failed" not in r.output


def test_schema_command_prints_every_view_with_units():
    from tracedb import schema

    r = runner.invoke(app, ["schema", "-f", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert {row["view"] for row in rows} == set(schema.VIEWS) >= {"files", "ingest_log"}
    assert len(rows) == sum(len(s) for s in schema.VIEWS.values())
    dur = next(x for x in rows if x["view"] == "kernels" and x["column"] == "duration_ns")
    assert dur == {"view": "kernels", "column": "duration_ns", "type": "BIGINT", "unit": "ns", "description": "duration, ns"}
    err = next(x for x in rows if x["view"] == "files" and x["column"] == "error")
    assert err["type"] == "VARCHAR" and err["description"]
    table = runner.invoke(app, ["schema", "files"])
    assert "size_bytes" in table.output and "bytes" in table.output
    assert runner.invoke(app, ["schema", "nope"]).exit_code == 2


def test_pandas_keeps_integer_columns_integer(tmp_path):
    pd = pytest.importorskip("pandas")
    wh = tracedb.Warehouse(tmp_path / "wh")
    assert wh.ingest(scenario("tf_runmetadata_text"), run_id="tf").ok  # steps 0
    assert wh.ingest(scenario("node_shape_dump"), run_id="dump").ok  # no steps: NULL
    df = wh.sql("SELECT run_id, step, duration_ns FROM nodes ORDER BY run_id", output="pandas")
    assert str(df["step"].dtype) == "Int64" and str(df["duration_ns"].dtype) == "Int64"
    assert df["step"].isna().sum() == 178 and (df["step"].dropna() == 0).all()
    assert df.loc[df.run_id == "tf", "duration_ns"].sum() == wh.sql(
        "SELECT sum(duration_ns) s FROM nodes WHERE run_id = 'tf'").column("s")[0].as_py()


def test_warehouse_methods_have_docstrings():
    for name in ("ingest", "discover", "query", "sql", "queries", "runs", "rm", "vacuum", "migrate",
                 "report", "export_chrome", "schema", "transpile", "connect"):
        assert getattr(tracedb.Warehouse, name).__doc__, name


def test_shell_completion_script(monkeypatch):
    # Without this typer detects the shell from the process tree and ignores "bash": a
    # suite run whose parent shell has exited (a detached CI job) got "Shell  not supported".
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    r = runner.invoke(app, ["--show-completion", "bash"], prog_name="tracedb")
    assert r.exit_code == 0, r.output
    assert "_TRACEDB_COMPLETE=complete_bash" in r.output and "complete -o default -F _tracedb_completion tracedb" in r.output
