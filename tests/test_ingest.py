"""Ingest semantics on real seed traces: run discovery, replace, errors, atomicity."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import duckdb
import pytest

import rawtrace
from conftest import DATA, data_files, scenario
from tracedb import catalog
from tracedb.errors import TracedbError
from tracedb.ingest import discover_runs, ingest


def counts(wh: Path) -> dict:
    con = catalog.connect(wh)
    try:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("nodes", "kernels", "tensors", "allocations", "runs")}
    finally:
        con.close()


def make_runs(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    (runs / "dump").mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), runs / "dump" / "graph.txt")
    (runs / "dump" / "run.json").write_text(json.dumps({"model": "alexnet", "batch": 128}))
    shutil.copy(scenario("node_name_list"), runs / "names.txt")
    return runs


def test_runs_folder_subfolder_and_loose_file(tmp_path, warehouse):
    runs = make_runs(tmp_path)
    summary = ingest([runs], warehouse)
    assert summary.ok
    assert [r.run_id for r in summary.runs] == ["dump", "names"]
    con = catalog.connect(warehouse)
    rows = con.execute("SELECT run_id, count(*) FROM nodes GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("dump", 178), ("names", 2467)]
    # run.json labels: known ones as columns, others as extra view columns
    model, batch, files = con.execute("SELECT model, batch, source_files FROM runs WHERE run_id = 'dump'").fetchone()
    assert (model, batch, files) == ("alexnet", "128", ["graph.txt"])


def test_run_id_for_single_file_and_folder(tmp_path, warehouse):
    runs = make_runs(tmp_path)
    assert [r.run_id for r in discover_runs([runs / "dump"], run_id="x")] == ["x"]
    assert [r.run_id for r in discover_runs([scenario("node_name_list")])] == ["003_5bf2854c930b1b8f"]
    with pytest.raises(TracedbError, match="exactly one PATH"):
        discover_runs([runs, runs], run_id="x")
    with pytest.raises(TracedbError, match="no such file"):
        discover_runs([tmp_path / "missing"])


def test_reingest_replaces_run_without_duplicates(tmp_path, warehouse):
    runs = make_runs(tmp_path)
    ingest([runs], warehouse)
    first = counts(warehouse)
    ingest([runs], warehouse)
    assert counts(warehouse) == first
    # the lake lists one live file a table for the ingest's group of runs (both runs, every
    # device); the old generation's files stay on disk (open snapshots read them) until
    # vacuum's retention has passed
    from tracedb.lake import Lake

    # (a run of nodes alone also has its row of rollup_run_summary: fleet_trend's row a run)
    tables = ("nodes", "rollup_run_summary")
    live = [f for t in tables for f in Lake(warehouse).live_files(t)[0]]
    assert len(live) == 2
    assert Counter(p.split("/")[0] for p in data_files(warehouse)) == {t: 2 for t in tables}
    Lake(warehouse).vacuum(retention_hours=0)
    assert data_files(warehouse) == sorted(live)


def test_run_ids_and_devices_are_columns_of_the_files(tmp_path, warehouse):
    """From schema 8 a table's files lie in its folder (no folder a run and device) and
    hold run_id and device as they are, whatever their characters."""
    import pyarrow.parquet as pq

    ingest([scenario("node_shape_dump")], warehouse, run_id="a b/c")
    path, summary = data_files(warehouse)  # the nodes, and the run's row of rollup_run_summary
    assert path.startswith("nodes/part-") and path.count("/") == 1
    assert summary.startswith("rollup_run_summary/part-") and summary.count("/") == 1
    rows = pq.read_table(warehouse / path, columns=["run_id", "device"])
    assert set(rows.column("run_id").to_pylist()) == {"a b/c"}
    assert set(rows.column("device").to_pylist()) == {"CPU:0", "GPU:0"}
    con = catalog.connect(warehouse)
    assert con.execute("SELECT DISTINCT run_id FROM nodes").fetchall() == [("a b/c",)]


@pytest.mark.parametrize("bad,message", [
    ("json_cut", "truncated"),  # claimed by the JSON reader, cut short
    ("gzip_cut", "ended before the end-of-stream"),  # a node dump, its gzip cut short
])
def test_bad_files_are_recorded_and_others_land(tmp_path, warehouse, bad, message):
    """A run with a bad file (one a reader claims and fails on: a file no reader claims
    is skipped, test_run_layouts.py) does not land by default (no half run); --partial
    lands the readable files, marked partial. Other runs of the batch land either way."""
    run = tmp_path / "runs" / "mixed"
    run.mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), run / "a.txt")
    whole = gzip.compress(scenario("node_shape_dump").read_bytes())
    content = {"json_cut": b'{"traceEvents": [{"ph": "X", "name": "a", "ts": ', "gzip_cut": whole[:len(whole) // 2]}[bad]
    (run / "b.bin").write_bytes(content)
    shutil.copy(scenario("node_name_list"), tmp_path / "runs" / "other.txt")
    summary = ingest([tmp_path / "runs"], warehouse)
    assert not summary.ok
    [(path, err)] = summary.errors
    assert path.endswith("b.bin") and message in err and "\n" not in err
    assert [(r.run_id, r.replaced) for r in summary.runs] == [("mixed", False), ("other", True)]
    con = catalog.connect(warehouse)
    assert con.execute("SELECT run_id, status FROM runs").fetchall() == [("other", "complete")]
    status = con.execute("SELECT path, status, error IS NOT NULL FROM files WHERE run_id = 'mixed' ORDER BY path").fetchall()
    assert status == [("a.txt", "ok", False), ("b.bin", "error", True)]
    con.close()
    assert [p for p in data_files(warehouse) if "mixed" in p] == []  # its written files were deleted
    summary = ingest([tmp_path / "runs"], warehouse, partial=True)
    assert counts(warehouse)["nodes"] == 178 + 2467
    con = catalog.connect(warehouse)
    assert con.execute("SELECT run_id, status FROM runs ORDER BY 1").fetchall() == [("mixed", "partial"), ("other", "complete")]


def test_run_with_a_failing_file_keeps_its_previous_complete_version(tmp_path, warehouse):
    """Issue 13 #1: a re-ingest where one file fails (here: the TF trace cut in half, still
    claimed by its reader) must not replace a complete run with a partial one."""
    run = tmp_path / "runs" / "job"
    run.mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), run / "a.txt")
    shutil.copy(scenario("tf_stepstats_gpu_streams"), run / "b.txt")
    assert ingest([tmp_path / "runs"], warehouse).ok
    full = counts(warehouse)
    text = scenario("tf_stepstats_gpu_streams").read_bytes()
    (run / "b.txt").write_bytes(text[:len(text) // 2])
    summary = ingest([tmp_path / "runs"], warehouse)
    assert not summary.ok and not summary.runs[0].replaced
    assert [f.format for f in summary.runs[0].files] == ["node_dump", "tf_stepstats"]
    assert counts(warehouse) == full


def test_failed_run_keeps_previous_data(tmp_path, warehouse):
    trace = tmp_path / "t.txt"
    shutil.copy(scenario("node_shape_dump"), trace)
    ingest([trace], warehouse)
    trace.write_bytes(b"\x00\x01garbage" * 100)
    summary = ingest([trace], warehouse)
    assert not summary.ok
    assert counts(warehouse)["nodes"] == 178
    con = catalog.connect(warehouse)
    log = con.execute("SELECT status FROM ingest_log ORDER BY ingested_at").fetchall()
    assert log == [("ok",), ("error",)]


def test_warehouse_can_be_moved(tmp_path, warehouse):
    ingest([scenario("node_shape_dump")], warehouse)
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(warehouse, moved)
    shutil.rmtree(warehouse)
    assert counts(moved)["nodes"] == 178
    # a plain DuckDB client: open the file, point file_search_path at the folder
    con = duckdb.connect(str(moved / "catalog.duckdb"), read_only=True)
    con.execute(f"SET file_search_path = '{moved}'")
    assert con.execute("SELECT count(*) FROM nodes").fetchone()[0] == 178


def test_parallel_jobs_give_the_same_rows(tmp_path):
    runs = make_runs(tmp_path)
    ingest([runs], tmp_path / "serial")
    ingest([runs], tmp_path / "parallel", jobs=2)
    assert counts(tmp_path / "serial") == counts(tmp_path / "parallel")


def test_no_warehouse_is_a_clear_error(tmp_path):
    with pytest.raises(TracedbError, match="no warehouse"):
        catalog.connect(tmp_path / "nothing")


def test_commit_failure_leaves_previous_run_intact(tmp_path, warehouse, monkeypatch):
    """If the commit fails after the data files were added to the log but before `runs`
    published them, readers keep seeing the old run, and the new files are deleted."""
    from tracedb.lake import Lake

    trace = tmp_path / "t.txt"
    shutil.copy(scenario("node_shape_dump"), trace)
    ingest([trace], warehouse)
    before = data_files(warehouse)

    def boom(self, runs):
        raise RuntimeError("simulated crash while committing")

    monkeypatch.setattr(Lake, "_write_file_rows", boom)
    shutil.copy(scenario("node_name_list"), trace)  # same run id, different content
    with pytest.raises(RuntimeError, match="simulated crash"):
        ingest([trace], warehouse)
    monkeypatch.undo()
    assert counts(warehouse)["nodes"] == 178
    lake = Lake(warehouse)
    assert sorted(lake.live_files("nodes")[0] + lake.live_files("rollup_run_summary")[0]) == before
    # the log lists the unpublished files: vacuum (not ingest) removes them
    Lake(warehouse).vacuum(retention_hours=0)
    assert data_files(warehouse) == before


def test_source_metadata_kept_per_file_and_per_run(warehouse):
    assert ingest([scenario("xspace_jax_h200")], warehouse, run_id="jax").ok
    con = catalog.connect(warehouse)
    file_meta = json.loads(con.execute("SELECT metadata FROM files").fetchone()[0])
    run_meta = json.loads(con.execute("SELECT metadata FROM runs").fetchone()[0])
    assert file_meta == run_meta
    assert "GPU:0" in file_meta["devices"]


def test_odd_run_labels(tmp_path, warehouse):
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    shutil.copy(scenario("node_name_list"), run / "names.txt")
    labels = {"model": "bert", "Model": "dup", "started_at": "2026-11-01T10:00:00Z",
              "batch": 32, "tags": ["a", "b"], "it's": "quoted"}
    (run / "run.json").write_text(json.dumps(labels))
    assert ingest([tmp_path / "runs"], warehouse).ok
    con = catalog.connect(warehouse)
    row = con.execute("SELECT model, started_at, batch, tags, \"it's\" FROM runs").fetchone()
    assert row[0] == "bert" and row[1].isoformat() == "2026-11-01T10:00:00+00:00"
    assert row[2:] == ("32", '["a","b"]', "quoted")  # `Model` is dropped: it would collide with `model`
    con.close()
    # a started_at that is no timestamp is an error on run.json: the run keeps its previous
    # version and labels (issue 13 #5), and the error is on record in `files`
    labels["started_at"] = "last tuesday"
    (run / "run.json").write_text(json.dumps(labels))
    summary = ingest([tmp_path / "runs"], warehouse)
    [(path, err)] = summary.errors
    assert path == "r1/run.json" and "not an ISO 8601 timestamp" in err
    con = catalog.connect(warehouse)
    assert con.execute("SELECT count(*), max(started_at) FROM nodes, runs").fetchone()[0] == 2467
    assert con.execute("SELECT model, started_at IS NOT NULL FROM runs").fetchone() == ("bert", True)
    assert con.execute("SELECT status, error FROM files WHERE path = 'run.json'").fetchone()[1].endswith("timestamp")
    con.close()
    # --partial lands it without the bad label
    summary = ingest([tmp_path / "runs"], warehouse, partial=True)
    con = catalog.connect(warehouse)
    assert con.execute("SELECT count(*), max(started_at) FROM nodes, runs").fetchone() == (2467, None)


def test_two_ingests_in_one_second_keep_their_order(tmp_path, warehouse, monkeypatch):
    """On a quiet machine both ingests of test_odd_run_labels start within one second. Ingest
    ids had whole seconds and a random suffix, so the failed second attempt's id sorted before
    the live one half the time, its `files` rows were taken for a crash's leftovers and
    replaced from the ingest log: the error on run.json vanished (issue 28, the whole-suite
    failure of session 8). Here every suffix is smaller than the one before, one second."""
    import datetime as dt
    import itertools
    import secrets

    import tracedb.ingest as ingest_mod

    ticks = itertools.count()

    class OneSecond(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2026, 11, 27, 8, 0, 0, next(ticks) % 1_000_000, tzinfo=tz)

    suffixes = (format(0xFFFFFF - i, "06x") for i in itertools.count())
    real = secrets.token_hex
    monkeypatch.setattr(secrets, "token_hex", lambda n=None: next(suffixes) if n == 3 else real(n))
    monkeypatch.setattr(ingest_mod, "datetime", OneSecond)
    test_odd_run_labels(tmp_path, warehouse)


def _runs_per_commit(warehouse: Path) -> list[int]:
    """Rows each Delta commit of the `runs` table added, read from its log with json and
    pyarrow: one commit per group of runs."""
    import pyarrow.parquet as pq

    out = []
    for entry in sorted((warehouse / "runs" / "_delta_log").glob("*.json")):
        adds = [json.loads(ln)["add"]["path"] for ln in entry.read_text().splitlines() if '"add"' in ln]
        if adds:
            out.append(sum(pq.read_metadata(warehouse / "runs" / a).num_rows for a in adds))
    return out


def test_many_runs_land_in_groups(tmp_path, warehouse, monkeypatch):
    import tracedb.ingest as ingest_mod

    runs = tmp_path / "runs"
    runs.mkdir()
    n = 120  # more than one commit group (ingest.COMMIT_EVERY_RUNS)
    data = scenario("node_shape_dump").read_bytes()
    for i in range(n):
        (runs / f"job{i:03d}.txt").write_bytes(data)
    landed = []
    # groups by count alone: a loaded machine would otherwise also commit every 10 s
    monkeypatch.setattr(ingest_mod, "COMMIT_EVERY_SECONDS", 3600.0)
    summary = ingest([runs], warehouse, on_run=lambda r: landed.append(r.run_id))
    assert summary.ok and landed == [f"job{i:03d}" for i in range(n)]
    every = ingest_mod.COMMIT_EVERY_RUNS
    assert _runs_per_commit(warehouse) == [every] * (n // every) + [n % every]  # 50, 50, 20: not 1, not 120
    con = catalog.connect(warehouse)
    assert con.execute("SELECT count(DISTINCT run_id), count(*) FROM nodes").fetchone() == (n, n * 178)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == n


def test_exclude_skips_non_trace_files(tmp_path, warehouse):
    run = tmp_path / "runs" / "r1"
    (run / "logs").mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), run / "graph.txt")
    (run / "README.md").write_text("# notes about this run\n")
    (run / "logs" / "loss.csv").write_text("step,loss\n1,0.5\n")
    (tmp_path / "runs" / "NOTES.md").write_text("not a run\n")
    summary = ingest([tmp_path / "runs"], tmp_path / "strict")  # files no reader claims are skipped
    assert summary.ok and [(r.run_id, f.rel) for r in summary.runs for f in r.skipped] == [
        ("NOTES", "NOTES.md"), ("r1", "README.md"), ("r1/logs", "loss.csv")]
    summary = ingest([tmp_path / "runs"], warehouse, exclude=["*.md", "logs/*"])
    assert summary.ok and [r.run_id for r in summary.runs] == ["r1"]
    assert [f.rel for f in summary.runs[0].files] == ["graph.txt"]


def test_filter_on_run_skips_other_runs_files(tmp_path, warehouse):
    for rid in ("a/b", "c"):
        assert ingest([scenario("node_shape_dump")], warehouse, run_id=rid).ok
    con = catalog.connect(warehouse)
    assert con.execute("SELECT run_id, count(*) FROM nodes GROUP BY 1 ORDER BY 1").fetchall() == [("a/b", 178), ("c", 178)]
    plan = con.execute("EXPLAIN ANALYZE SELECT count(*) FROM nodes WHERE run_id = 'c'").fetchall()[0][1]
    # each ingest wrote one nodes file (one row group); the view lists both files, and the
    # scan skips a/b's row group unread by its run_id statistics
    assert plan.count("READ_PARQUET") == 1  # one list (both files hold live rows only: no live filter)
    assert "Row Groups Scanned: 1 / 2" in plan.replace("│", "")


def test_catalog_opens_in_the_duckdb_cli(warehouse):
    """A plain DuckDB CLI (its own, possibly older, DuckDB) opens catalog.duckdb from the
    warehouse folder and queries the views."""
    import subprocess
    import sys

    pytest.importorskip("duckdb_cli")
    assert ingest([scenario("tf_stepstats_gpu_streams")], warehouse, run_id="lstm").ok
    out = subprocess.run(
        [sys.executable, "-m", "duckdb_cli", "-readonly", "-csv", "catalog.duckdb",
         "-c", "SELECT kind, count(*) AS n, sum(duration_ns) AS ns FROM kernels GROUP BY kind ORDER BY kind"],
        cwd=warehouse, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["kind,n,ns", "kernel,729,7485000", "memcpy,26,105000"]


def test_disk_full_keeps_the_previous_run_and_blames_the_warehouse(tmp_path, warehouse):
    """Issue 13 #1: a file-size limit (as a full disk would) during a re-ingest: the run
    keeps its complete version and the error names the warehouse, not the source."""
    import subprocess
    import sys

    run = tmp_path / "runs" / "job"
    run.mkdir(parents=True)
    shutil.copy(scenario("node_shape_dump"), run / "a.txt")
    assert ingest([tmp_path / "runs"], warehouse).ok
    shutil.copy(scenario("tf_stepstats_gpu_streams"), run / "b.txt")
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000)); "
            "from tracedb.cli import main; sys.argv = ['tracedb', 'ingest', sys.argv[1], '-w', sys.argv[2]]; main()")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "runs"), str(warehouse)],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "warehouse" in r.stderr and "File too large" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert counts(warehouse)["nodes"] == 178 and counts(warehouse)["kernels"] == 0


def test_a_dying_worker_costs_only_its_file(tmp_path):
    """A reader process that dies mid-read (as the OOM killer or a native crash would
    leave it: TRACEDB_CRASH_AT SIGKILLs the worker reading that file) gives that file a
    one-line error; every other run still lands, and no BrokenProcessPool traceback."""
    import os
    import subprocess
    import sys

    runs = tmp_path / "runs"
    for i, name in enumerate(["node_shape_dump", "node_name_list", "megengine_graph_profile",
                              "tf_runmetadata_text", "kineto_h200_fp32"]):
        (runs / f"r{i}").mkdir(parents=True)
        shutil.copy(scenario(name), runs / f"r{i}" / scenario(name).name)
    doomed = scenario("megengine_graph_profile").name
    wh = tmp_path / "wh"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           "TRACEDB_CRASH_AT": f"reading {doomed}"}
    proc = subprocess.run([sys.executable, "-m", "tracedb.cli", "ingest", str(runs), "--warehouse", str(wh),
                           "--jobs", "2", "--quiet"], capture_output=True, text=True, env=env)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "BrokenProcessPool" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert errors == [f"error: {runs / 'r2' / doomed}: the worker process reading this file died (killed, e.g. for "
                      "running out of memory, or a crash in native code); the other files went on"], proc.stderr
    con = catalog.connect(wh)
    try:
        landed = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()]
        failed = con.execute("SELECT run_id, path, status FROM files WHERE status = 'error'").fetchall()
    finally:
        con.close()
    assert landed == ["r0", "r1", "r3", "r4"]
    assert failed == [("r2", doomed, "error")]


def test_the_forkserver_preloads_every_reader():
    from tracedb import formats, workers

    assert workers.PRELOAD[0] == "tracedb.ingest"  # (in any order: the sniff imports lazily, in its own)
    assert sorted(workers.PRELOAD[1:]) == sorted(f"tracedb.formats.{m}" for m in formats.FORMAT_MODULES)
    assert workers.preload() == ["tracedb.arrow_no_pandas"] + workers.PRELOAD  # first, before any table


WORKER_IMPORTS = r"""
import concurrent.futures, json, sys
from pathlib import Path
from tracedb import ingest as ing
from tracedb import storage, workers

modules = "sorted({m.split('.')[0] for m in __import__('sys').modules})"  # eval: nothing to unpickle
path = Path(sys.argv[1])
fmt, err, _ = ing._sniff(path)
job = ing._Job(path, str(path), path.name, "r", fmt, 0, storage.open_storage(sys.argv[2]), "i1", "i1-00000", err)
workers.preload_forkserver()  # as `tracedb ingest` does, before the process's forkserver starts
pool = concurrent.futures.ProcessPoolExecutor(1, mp_context=workers.context())
try:
    before = pool.submit(eval, modules).result()
    res = pool.submit(ing._read_one, job).result()
    after = pool.submit(eval, modules).result()
finally:
    pool.shutdown()
print(json.dumps({"ok": res.ok, "error": res.error, "kernels": res.rows.get("kernels", 0) if res.rows else 0,
                  "before": before, "after": after}))
"""


def test_a_worker_reads_without_importing_anything_more(tmp_path):
    """What a worker needs is imported once, in the forkserver `tracedb ingest` preloads
    (`workers.preload_forkserver`; in a fresh interpreter, as the command's: a process has
    one forkserver, started once): a worker's first file costs
    no import (pandas, which pyarrow pulls in on first use where installed, cost ~0.25 s of
    CPU each: neither the forkserver nor a worker imports it), and none of the caller's
    duckdb or deltalake."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-c", WORKER_IMPORTS, str(scenario("kineto_h200_fp32")), str(tmp_path / "wh")],
                       capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    before, after = set(got["before"]), set(got["after"])
    assert got["ok"] and got["kernels"] > 0, got["error"]
    assert {"pyarrow", "tracedb"} <= before
    assert after - before <= {"gzip", "_compression", "zlib"}, after - before
    assert not {"duckdb", "deltalake", "pandas", "numpy"} & after


def test_the_ingest_command_forks_its_workers_from_itself(tmp_path):
    """`tracedb ingest --jobs 2` forks its workers from itself once it has imported the
    readers (workers.ForkPoint): no forkserver is started, two processes other than the
    caller read, and the rows are the traces' (rawtrace counts)."""
    import os
    import subprocess
    import sys

    from tracedb import timing

    code = """if True:
        import os, sys
        from multiprocessing import forkserver
        exit_, me = os._exit, os.getpid()
        def report(code):  # the command ends with os._exit (no teardown); so do its forks
            if os.getpid() == me:
                print(forkserver._forkserver._forkserver_pid, code, flush=True)
            exit_(code)
        os._exit = report
        sys.argv = ["tracedb", "ingest", sys.argv[1], "-w", sys.argv[2], "-q", "--jobs", "2"]
        from tracedb.cli import main
        main()
    """
    runs = tmp_path / "runs"
    for name in ("kineto_h200_fp32", "tf_stepstats_gpu_streams"):
        (runs / name).mkdir(parents=True)
        shutil.copy(scenario(name), runs / name)
    wh, log = tmp_path / "wh", tmp_path / "timing.jsonl"
    r = subprocess.run([sys.executable, "-c", code, str(runs), str(wh)], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent, timeout=120,
                       env={**os.environ, "TRACEDB_TIMING": str(log)})
    assert r.stdout == "None 0\n", (r.stdout, r.stderr)
    lines = timing.read(log)
    caller = next(x["pid"] for x in lines if x["phase"] == "discover")
    readers = {x["pid"] for x in lines if x["phase"] == "read_one"}
    assert len(readers | {caller}) == 3 or (len(readers) == 1 and caller not in readers), readers
    assert {x["pid"] for x in lines if x["phase"] == "worker"} == {x["pid"] for x in lines} - {caller}
    kineto, tf = rawtrace.kineto(rawtrace.load_kineto_json(scenario("kineto_h200_fp32"))), rawtrace.tf()
    assert counts(wh)["kernels"] == len(kineto.kernels) + len(tf.kernels)
    assert counts(wh)["nodes"] == len(kineto.nodes) + len(tf.nodes)


def _in_subprocess(code: str) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0 and r.stdout == "ok\n", (r.stdout, r.stderr)


def test_workers_fork_from_the_caller_only_while_it_runs_no_thread_of_its_own(tmp_path):
    """After ForkPoint.prepare the workers fork from the caller; once it started a thread,
    or where a library with native thread pools was imported before, they come from the
    forkserver. Both read the same file alike."""
    path = scenario("kineto_h200_fp32")
    expected = len(rawtrace.kineto(rawtrace.load_kineto_json(path)).kernels)
    _in_subprocess(f"""if True:
        import threading
        from pathlib import Path
        from tracedb import workers
        workers.ForkPoint.prepare()  # first: pyarrow imported before it would import numpy
        from tracedb import ingest as ing
        def kernels(pool):
            fmt, err, _ = ing._sniff(Path({str(path)!r}))
            job = ing._Job(Path({str(path)!r}), "k", "k", "r", fmt, 0, Path({str(tmp_path)!r}), "i1", "i1-00000", err)
            pool.submit("k", ing._read_one, job, lambda: None)
            return pool.result("k").rows["kernels"]
        assert workers.ForkPoint.ok()
        pool = workers.Workers(2)
        try:
            assert pool.forked and kernels(pool) == {expected}
        finally:
            pool.close()
        stop = threading.Event()
        t = threading.Thread(target=stop.wait)
        t.start()
        assert not workers.ForkPoint.ok()
        pool = workers.Workers(2)
        try:
            assert not pool.forked and kernels(pool) == {expected}
        finally:
            pool.close()
            stop.set()
            t.join()
        print("ok")
    """)
    for first in ("duckdb", "numpy", "pyarrow"):  # numpy: pyarrow imported before the CLI's refusal
        _in_subprocess(f"""if True:
            import {first}
            from tracedb import workers
            workers.ForkPoint.prepare()
            assert not workers.ForkPoint.ok()
            print("ok")
        """)


def test_a_forked_worker_reads_without_importing_anything_more(tmp_path):
    """Forked from the prepared caller, a worker has every reader already (its first file
    costs no import) and none of duckdb, deltalake, pandas or numpy."""
    path = scenario("kineto_h200_fp32")
    _in_subprocess(f"""if True:
        import sys
        from pathlib import Path
        from tracedb import workers
        workers.ForkPoint.prepare()
        from tracedb import ingest as ing
        pool = workers.Workers(2)
        modules = "sorted({{m.split('.')[0] for m in __import__('sys').modules}})"
        fmt, err, _ = ing._sniff(Path({str(path)!r}))
        job = ing._Job(Path({str(path)!r}), "k", "k", "r", fmt, 0, Path({str(tmp_path)!r}), "i1", "i1-00000", err)
        try:
            assert pool.forked
            pool.submit("before", eval, modules, lambda: None)
            before = set(pool.result("before"))
            pool.submit("read", ing._read_one, job, lambda: None)
            res = pool.result("read")
            pool.submit("after", eval, modules, lambda: None)
            after = set(pool.result("after"))
        finally:
            pool.close()
        assert res.ok and res.rows["kernels"] > 0, res.error
        assert {{"pyarrow", "tracedb", "google"}} <= before
        assert after - before <= {{"gzip", "_compression", "zlib"}}, after - before
        assert not {{"duckdb", "deltalake", "pandas", "numpy"}} & after, after
        print("ok")
    """)


def test_arrow_without_pandas_converts_and_leaves_pandas_importable():
    """tracedb's ingest processes tell pyarrow pandas is absent: Python values still convert
    (the lake's rows, a reader's tables: the same Arrow data), pandas is never imported, and
    a later `import pandas` still works. Where pandas is imported already, nothing changes."""
    import subprocess
    import sys

    pytest.importorskip("pandas")
    code = """if True:
        import datetime, sys
        from tracedb.workers import arrow_without_pandas
        import pyarrow as pa
        arrow_without_pandas()
        when = datetime.datetime(2026, 11, 26, 10, 0, tzinfo=datetime.timezone.utc)
        t = pa.Table.from_pylist([{"a": 1, "b": "x", "c": when, "d": [1.5, None]}])
        assert t.to_pylist() == [{"a": 1, "b": "x", "c": when, "d": [1.5, None]}], t.to_pylist()
        assert "pandas" not in sys.modules
        import pandas
        assert "pandas" in sys.modules and not any(type(f).__name__ == "_Refuse" for f in sys.meta_path)
        print("ok")
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    code = """if True:
        import pandas, pyarrow as pa
        from tracedb.workers import arrow_without_pandas
        arrow_without_pandas()
        assert pa.table({"a": [1, None]}).to_pandas()["a"].tolist()[0] == 1
        print("ok")
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_arrow_without_numpy_where_pyarrow_is_not_imported_yet():
    """Called before pyarrow is imported (the ingest command, the forkserver), numpy is
    refused too: Python values and tables still convert, and a later `import numpy` works."""
    import subprocess
    import sys

    code = """if True:
        import datetime, sys
        from tracedb.workers import arrow_without_pandas
        arrow_without_pandas()
        import pyarrow as pa, pyarrow.compute as pc
        when = datetime.datetime(2026, 11, 26, 10, 0, tzinfo=datetime.timezone.utc)
        t = pa.table(pa.Table.from_pylist([{"a": 1, "b": "x", "c": when, "d": [1.5, None]}]))
        assert t.to_pylist() == [{"a": 1, "b": "x", "c": when, "d": [1.5, None]}], t.to_pylist()
        assert pc.sum(t.column("a")).as_py() == 1
        assert "numpy" not in sys.modules and "pandas" not in sys.modules
        import numpy
        assert not any(type(f).__name__ == "_Refuse" for f in sys.meta_path)
        print("ok")
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parent.parent)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


def test_the_ingest_command_imports_neither_numpy_nor_pandas(tmp_path):
    """`tracedb ingest` (one process, and with workers) never imports numpy or pandas: ~75 ms
    and ~0.25 s of CPU a process. The rows are the fixture's (rawtrace counts)."""
    import subprocess
    import sys

    code = """if True:
        import os, sys
        exit_ = os._exit
        def report(code):  # the command ends with os._exit (no teardown)
            print("numpy" in sys.modules, "pandas" in sys.modules, code, flush=True)
            exit_(code)
        os._exit = report
        sys.argv = ["tracedb", "ingest", sys.argv[1], "--run-id", "r", "-w", sys.argv[2], "-q", "--jobs", sys.argv[3]]
        from tracedb.cli import main
        main()
    """
    path = scenario("kineto_h200_fp32")
    for jobs in ("1", "2"):
        wh = tmp_path / f"wh{jobs}"
        r = subprocess.run([sys.executable, "-c", code, str(path), str(wh), jobs], capture_output=True, text=True,
                           cwd=Path(__file__).resolve().parent.parent, timeout=120)
        assert r.stdout == "False False 0\n", (r.stdout, r.stderr)
        expected = rawtrace.kineto(rawtrace.load_kineto_json(path))
        assert (counts(wh)["kernels"], counts(wh)["nodes"]) == (len(expected.kernels), len(expected.nodes))


def test_the_ingest_command_exits_without_teardown_with_its_output_and_status(tmp_path):
    """`tracedb ingest` ends with os._exit once done (no interpreter teardown): its summary
    still reaches a pipe, the exit status is 0 or 1 as before, the lake is complete, and
    multiprocessing's temporary folder of the forkserver is removed (atexit still runs)."""
    import os
    import subprocess
    import sys
    import tempfile

    runs = tmp_path / "runs"
    for i, name in enumerate(["node_shape_dump", "tf_runmetadata_text"]):
        (runs / f"r{i}").mkdir(parents=True)
        shutil.copy(scenario(name), runs / f"r{i}" / scenario(name).name)
    mp_tmp = tmp_path / "mp"
    mp_tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "TMPDIR": str(mp_tmp)}
    wh = tmp_path / "wh"
    proc = subprocess.run([sys.executable, "-m", "tracedb.cli", "ingest", str(runs), "--warehouse", str(wh),
                           "--jobs", "2"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("ingested 2 run(s), 2 file(s), 1083 rows, 0 error(s)"), proc.stdout
    assert counts(wh)["nodes"] == 178 + 292
    assert list(mp_tmp.iterdir()) == [], list(mp_tmp.iterdir())  # pymp-* removed by atexit
    (runs / "r2").mkdir()
    (runs / "r2" / "bad.json").write_text('{"traceEvents": [{not json')  # claimed, then fails (no claim: skipped)
    proc = subprocess.run([sys.executable, "-m", "tracedb.cli", "ingest", str(runs), "--warehouse", str(wh),
                           "--jobs", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith("1 error(s); see"), proc.stderr
    assert tempfile.gettempdir() != str(mp_tmp)


def test_parallel_ingest_writes_nothing_into_a_warehouse_that_needs_migrating(tmp_path):
    """A new warehouse's lake is created while the workers read; any other warehouse is
    opened (and refused, here) before a worker writes a file into it."""
    wh = tmp_path / "wh"
    shutil.copytree(DATA / "frozen_warehouse_schema1", wh)
    before = sorted(p.relative_to(wh) for p in wh.rglob("*"))
    with pytest.raises(TracedbError, match="tracedb migrate"):
        ingest([make_runs(tmp_path)], wh, jobs=2)
    assert sorted(p.relative_to(wh) for p in wh.rglob("*")) == before


def test_timing_names_each_phase_of_a_parallel_ingest(tmp_path, monkeypatch):
    """TRACEDB_TIMING (what bench/bench_jobs.py --phases reads): the caller's phases and
    each worker's tasks and whole life, as JSON lines on one clock."""
    import os

    from tracedb import timing

    log = tmp_path / "timing.jsonl"
    monkeypatch.setenv("TRACEDB_TIMING", str(log))
    assert ingest([make_runs(tmp_path)], tmp_path / "wh", jobs=2).ok  # two files
    lines = timing.read(log)
    mine = [x["phase"] for x in lines if x["pid"] == os.getpid()]
    assert set(mine) == {"discover", "open lake", "start pool", "wait", "rollups", "merge", "commit", "publish",
                         "compact", "close pool"}
    assert mine.count("wait") == 4 and mine.count("commit") == 1  # 2 sniffs and 2 reads; one group
    assert mine.count("rollups") == 1  # 2 runs: fewer than ROLLUP_EVERY_RUNS, rolled up at the commit
    theirs = [x for x in lines if x["pid"] != os.getpid()]
    assert sorted(x["phase"] for x in theirs if x["phase"] != "worker") == ["read_one", "read_one", "sniff", "sniff"]
    assert {x["pid"] for x in theirs if x["phase"] == "worker"} == {x["pid"] for x in theirs}
    assert all(x["end"] >= x["start"] and x["cpu"] >= 0 for x in lines)


def test_killed_parallel_ingest_leaves_no_workers_behind(tmp_path):
    """SIGKILL of `tracedb ingest --jobs 2` mid-commit: its workers (children of the
    forkserver, not of the killed process) exit too, so whoever waits for the command's
    output is not left hanging on pipes they hold open."""
    import os
    import subprocess
    import sys

    runs = make_runs(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent),
           "TRACEDB_CRASH_AT": "ingest_after_add"}
    proc = subprocess.run([sys.executable, "-m", "tracedb.cli", "ingest", str(runs), "--warehouse",
                           str(tmp_path / "wh"), "--jobs", "2", "--quiet"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == -9, proc.stderr


def test_runs_rolled_up_while_the_workers_read_match_their_raw_rows(tmp_path, monkeypatch):
    """With workers, the caller rolls up the runs read so far in batches while it waits
    (ROLLUP_EVERY_RUNS), not all at the commit: each run's rollup rows still equal the
    metric computed from its raw kernel rows (the queries' text before the rollups)."""
    from tracedb import query as q
    from tracedb import sqllib
    from tracedb import timing, workers
    from tracedb import ingest as ing

    monkeypatch.setattr(ing, "ROLLUP_EVERY_RUNS", 2)
    monkeypatch.setattr(workers.Workers, "ready", lambda self, key: False)  # the caller always catches up
    log = tmp_path / "timing.jsonl"
    monkeypatch.setenv("TRACEDB_TIMING", str(log))
    runs = tmp_path / "runs"
    names = ["kineto_h200_fp32", "tf_stepstats_gpu_streams", "megengine_graph_profile"]
    for i in range(7):
        src = scenario(names[i % 3])
        (runs / f"r{i}").mkdir(parents=True)
        shutil.copy(src, runs / f"r{i}" / src.name)
    wh = tmp_path / "wh"
    assert ingest([runs], wh, jobs=2).ok
    phases = [x["phase"] for x in timing.read(log) if x["phase"] in ("rollups", "commit")]
    assert phases == ["rollups"] * 4 + ["commit"], phases  # 2 + 2 + 2 while reading, the last at the commit
    before = Path(__file__).parent / "data" / "sql_before_issue12"  # past SQL: a regression check (its README)
    con = catalog.connect(wh)
    try:
        for name in ("gpu_busy_idle", "stream_overlap"):
            new, old = sqllib.load(name), sqllib.load(before / f"{name}.sql")
            values = sqllib.bind(new, {})
            got, want = q.execute(con, new, values), q.execute(con, old, values)
            assert got.equals(want), name
            assert set(got.column("run_id").to_pylist()) == {f"r{i}" for i in range(7)}, name  # every trace has GPU activity
    finally:
        con.close()


def test_runs_with_many_rows_are_rolled_up_in_smaller_batches(tmp_path, monkeypatch):
    """A rollup batch also closes at ROLLUP_EVERY_ROWS rows of the tables the metrics read
    (kernels, nodes, runtime_calls; a TF run's tensors and allocations do not count), so
    large runs leave fewer of theirs for the rollups after the last read."""
    from tracedb import timing, workers
    from tracedb import ingest as ing

    tf = rawtrace.tf()
    per_run = len(tf.kernels) + len(tf.nodes)  # 755 + 577; no runtime calls
    monkeypatch.setattr(ing, "ROLLUP_EVERY_RUNS", 100)
    monkeypatch.setattr(workers.Workers, "ready", lambda self, key: False)  # the caller always catches up
    log = tmp_path / "timing.jsonl"
    monkeypatch.setenv("TRACEDB_TIMING", str(log))
    runs = tmp_path / "runs"
    for i in range(5):
        (runs / f"r{i}").mkdir(parents=True)
        shutil.copy(scenario("tf_stepstats_gpu_streams"), runs / f"r{i}")
    for rows, batches in ((2 * per_run, 3), (2 * per_run + 1, 2)):  # 2 + 2 + 1 at the commit; 3 + 2
        monkeypatch.setattr(ing, "ROLLUP_EVERY_ROWS", rows)
        log.unlink(missing_ok=True)
        assert ingest([runs], tmp_path / f"wh{rows}", jobs=2).ok
        phases = [x["phase"] for x in timing.read(log) if x["phase"] in ("rollups", "commit")]
        assert phases == ["rollups"] * batches + ["commit"], (rows, phases)
    con = catalog.connect(tmp_path / f"wh{rows}")
    try:  # every run's rollups landed
        assert con.execute("SELECT count(DISTINCT run_id) FROM rollup_step_times").fetchone()[0] == 5
    finally:
        con.close()


def test_data_files_dictionary_encode_repeating_columns_only(tmp_path):
    """Timestamps, durations and ids are written plain (dictionaries of nearly distinct
    values cost write time and space); names, steps, threads keep their dictionaries."""
    import pyarrow.parquet as pq

    ingest([scenario("kineto_h200_fp32")], tmp_path / "wh", run_id="r")
    files = sorted((tmp_path / "wh").glob("nodes/*.parquet"))
    assert files
    meta = pq.ParquetFile(files[0]).metadata.row_group(0)
    enc = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    for plain in ("start_ns", "duration_ns", "seq", "correlation_id"):
        assert "RLE_DICTIONARY" not in enc[plain], (plain, enc[plain])
    for dictionary in ("node_name", "op_type", "step", "thread_id", "params", "input_dtypes.list.element"):
        assert "RLE_DICTIONARY" in enc[dictionary], (dictionary, enc[dictionary])


def test_an_interrupted_ingest_leaves_no_file_of_the_run_being_read(tmp_path):
    """Ctrl-C after the first of a run's three files were read (here: from the progress
    callback) leaves no parquet file behind: the files read of the run being read are
    deleted with those of the runs not committed yet."""
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    for name in ("a", "b", "c"):
        shutil.copy(DATA / "chrome_trace_tf_timeline" / "timeline_step0.json", run / f"{name}.json")
    seen = []

    def interrupt(result):
        seen.append(result)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        ingest([tmp_path / "runs"], tmp_path / "wh", on_file=interrupt)
    assert len(seen) == 1 and seen[0].ok and seen[0].written  # the first file had been written
    assert list((tmp_path / "wh").rglob("*.parquet")) == []
