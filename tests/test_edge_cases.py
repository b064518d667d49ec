"""Odd but legal input found by review: each test reproduces a bug that was fixed.

Counts: the node_shape_dump seed has 178 non-empty lines, one node each (wc -l style
count with a plain Python loop; the same number the CLI prints on ingest).
"""

from __future__ import annotations

import json
import shutil

from typer.testing import CliRunner

from conftest import scenario
from tracedb import catalog
from tracedb.cli import app
from tracedb.ingest import ingest

DUMP_NODES = sum(1 for ln in scenario("node_shape_dump").read_text().splitlines() if ln.strip())
runner = CliRunner()


def _run(tmp_path, labels: dict | None = None, name: str = "r1"):
    run = tmp_path / "runs" / name
    run.mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), run / "dump.txt")
    if labels is not None:
        (run / "run.json").write_text(json.dumps(labels))
    return tmp_path / "runs"


def test_dump_seed_count(tmp_path):
    """The oracle above (a line count of the raw file) is what `tracedb ingest` reports and
    lands: 178 nodes, one per non-empty line."""
    assert DUMP_NODES == 178
    r = runner.invoke(app, ["ingest", str(scenario("node_shape_dump")), "-w", str(tmp_path / "wh")])
    assert r.exit_code == 0, r.output
    assert f": 1/1 files, {DUMP_NODES} nodes (" in r.output and f"{DUMP_NODES} rows, 0 error(s)" in r.output
    con = catalog.connect(tmp_path / "wh")
    assert con.execute("SELECT count(*), count(DISTINCT seq) FROM nodes").fetchone() == (DUMP_NODES, DUMP_NODES)
    con.close()


def test_run_whose_files_all_fail_is_recorded_in_files(tmp_path, warehouse):
    # README: a bad file "is recorded in `files` (status `error`)", and the CLI tells the
    # user to look there; a run with no readable file was only written to ingest_log.
    bad = tmp_path / "garbage.bin"
    bad.write_bytes(b"not a trace at all\n")
    summary = ingest([bad], warehouse)
    assert not summary.ok
    con = catalog.connect(warehouse)
    rows = con.execute("SELECT run_id, path, status FROM files WHERE status = 'error'").fetchall()
    assert rows == [("garbage", "garbage.bin", "error")]


def test_warehouse_path_with_comma_works(tmp_path):
    # Schema 1 refused "a,b" (DuckDB's file_search_path is a comma list); the snapshot's
    # views list absolute, quoted paths, so any folder name works.
    wh = tmp_path / "a,b" / "wh"
    r = runner.invoke(app, ["ingest", str(scenario("node_shape_dump")), "-w", str(wh)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["query", "-", "-w", str(wh), "-f", "csv"], input="select count(*) n from nodes")
    assert r.output.split() == ['"n"', str(DUMP_NODES)]


def test_empty_label_key_does_not_crash_ingest(tmp_path, warehouse):
    # run.json {"": 1} made the runs view `... AS ""`: ParserException out of ingest().
    runs = _run(tmp_path, {"": 1, "model": "m"})
    ingest([runs], warehouse)
    con = catalog.connect(warehouse)
    assert con.execute("SELECT run_id, model FROM runs").fetchall() == [("r1", "m")]
    assert con.execute("SELECT count(*) FROM nodes").fetchone()[0] == DUMP_NODES


def test_non_ascii_label_key_becomes_a_column(tmp_path, warehouse):
    # The JSON path is built with json.dumps (ASCII escapes), which DuckDB's path does not decode.
    runs = _run(tmp_path, {"gpü": "h200"})
    assert ingest([runs], warehouse).ok
    con = catalog.connect(warehouse)
    assert con.execute('SELECT "gpü" FROM runs').fetchall() == [("h200",)]


def test_report_label_selector_non_ascii_key(tmp_path, warehouse):
    runs = _run(tmp_path, {"ärm": "a"}, "base")
    _run(tmp_path, {"ärm": "b"}, "cand")
    assert ingest([runs], warehouse).ok
    r = runner.invoke(app, ["report", "-w", str(warehouse), "--baseline-label", "ärm=a",
                            "--candidate-label", "ärm=b", "-f", "json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert [x["run_id"] for x in rep["baseline_runs"]] == ["base"]


def test_adhoc_param_is_not_turned_into_a_number(tmp_path, warehouse):
    # Ad-hoc SQL params are "guessed" as int/float: run id "007" became 7, so
    # `run_id = $r` cast the run_id column to INT32 and failed on the run named "abc".
    for rid in ("007", "abc"):
        assert ingest([scenario("node_shape_dump")], warehouse, run_id=rid).ok
    sql = tmp_path / "adhoc.sql"
    sql.write_text("select count(*) AS n from nodes where run_id = $r\n")
    r = runner.invoke(app, ["query", str(sql), "-p", "r=007", "-w", str(warehouse), "-f", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output) == [{"n": DUMP_NODES}]


def test_symlinked_folder_in_a_run_is_followed(tmp_path, warehouse):
    # A run folder holding only a symlink to its traces ingested nothing and exited 0.
    store = tmp_path / "store"
    store.mkdir()
    shutil.copy(scenario("node_shape_dump"), store / "dump.txt")
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "linked").symlink_to(store, target_is_directory=True)
    r = runner.invoke(app, ["ingest", str(tmp_path / "runs"), "-w", str(warehouse)])
    assert r.exit_code == 0, r.output
    con = catalog.connect(warehouse)
    # the linked folder directly holds the trace: it is the run (contract: nested run folders)
    assert con.execute("SELECT count(*) FROM nodes WHERE run_id = 'r1/linked'").fetchone()[0] == DUMP_NODES
    assert con.execute("SELECT path FROM files").fetchall() == [("dump.txt",)]
    con.close()
    # with --run-id the folder is one run of everything below it, links followed
    r = runner.invoke(app, ["ingest", str(run), "--run-id", "r1", "-w", str(warehouse)])
    assert r.exit_code == 0, r.output
    con = catalog.connect(warehouse)
    assert con.execute("SELECT count(*) FROM nodes WHERE run_id = 'r1'").fetchone()[0] == DUMP_NODES
    assert con.execute("SELECT path FROM files WHERE run_id = 'r1'").fetchall() == [("linked/dump.txt",)]


def test_run_folder_without_trace_files_is_not_exit_0(tmp_path, warehouse):
    # Contract: exit 0 only when every file was ingested; a profiler that wrote nothing
    # must not look like success to a nightly job.
    (tmp_path / "runs" / "empty").mkdir(parents=True)
    (tmp_path / "runs" / "empty" / "run.json").write_text("{}")
    (tmp_path / "runs" / "good").mkdir()
    shutil.copy(scenario("node_shape_dump"), tmp_path / "runs" / "good" / "dump.txt")
    r = runner.invoke(app, ["ingest", str(tmp_path / "runs"), "-w", str(warehouse)])
    assert r.exit_code == 1
    assert "no trace files in this run folder" in r.output and "good: 1/1 files" in r.output


def test_compare_runs_matches_unnamed_activity(tmp_path, warehouse):
    # A NULL kernel name must match itself across runs, not show up as new + vanished.
    import pyarrow.parquet as pq
    from tracedb.query import run_query

    for rid in ("a", "b"):
        assert ingest([scenario("tf_stepstats_gpu_streams")], warehouse, run_id=rid).ok
    # blank one kernel's name in both runs, through the stored parquet (a reader with no names)
    for path in warehouse.glob("kernels/*.parquet"):
        t = pq.read_table(path)
        names = t.column("name").to_pylist()
        names[0] = None
        pq.write_table(t.set_column(t.schema.get_field_index("name"), "name", [names]), path)
    rows = run_query("compare_runs", {"baseline": "a", "candidate": "b"}, warehouse).to_pylist()
    unnamed = [r for r in rows if r["name"] is None]
    assert len(unnamed) == 1 and unnamed[0]["status"] == "unchanged"
