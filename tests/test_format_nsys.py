"""Nsight Systems SQLite exports (tracedb/formats/nsys.py) on two real exports: nvFuser on
an H200 (nsys 2024.6, export schema 3.16) and rank 0 of an MPI + CUDA saxpy on an A100
(nsys 2022.2, schema 2.9: other table names, no ENUM_* tables).

Every expected value comes from `sqlite3` queries on the raw files (tests/rawtrace.py:
joins with StringIds, the launch call by correlation id, the enclosing NVTX range by a
brute-force correlated subquery), never from tracedb's reader.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import rawtrace
from rawtrace import NSYS_NVFUSER, NSYS_SAXPY
from tracedb import Warehouse, formats
from tracedb.cli import app
from tracedb.errors import TraceFormatError
from tracedb.formats import nsys
from tracedb.formats.base import ReadContext, read_head

DATA = Path(__file__).parent / "data"
REPORT = DATA / "nsys_nvfuser_h200" / "nvfuser_h200_report1.nsys-rep"
FIXTURES = [NSYS_NVFUSER, NSYS_SAXPY]
IDS = ["nvfuser_h200", "saxpy_mpi_a100"]


def _read(path: Path, ctx: ReadContext | None = None) -> dict[str, list[dict]]:
    ctx = ctx or ReadContext("run", path.name)
    out: dict[str, list] = {}
    for table, batch in nsys.read(path, ctx):
        out.setdefault(table, []).append(batch)
    return {t: pa.Table.from_batches(b).to_pylist() for t, b in out.items()}


@pytest.fixture(scope="module", params=FIXTURES, ids=IDS)
def export(request) -> tuple[Path, dict[str, list[dict]], ReadContext]:
    ctx = ReadContext("run", request.param.name)
    return request.param, _read(request.param, ctx), ctx


def test_detected_by_content_not_name(tmp_path):
    for path in FIXTURES + [REPORT]:
        assert formats.detect(path).NAME == "nsys"
        renamed = tmp_path / "trace.bin"
        shutil.copyfile(path, renamed)
        assert formats.detect(renamed).NAME == "nsys"
    other = tmp_path / "other.sqlite"  # an SQLite database that is no nsys export
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    assert not nsys.sniff(read_head(other))
    with pytest.raises(TraceFormatError, match="unknown format"):
        formats.detect(other)
    for trace in (DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz", DATA / "xspace_jax_h200" / "jax_h200.xplane.pb"):
        assert not nsys.sniff(read_head(trace))


def test_kernels_equal_the_raw_table(export):
    path, t, _ = export
    raw = rawtrace.nsys_kernels(path)
    got = [r for r in t["kernels"] if r["kind"] == "kernel"]
    assert len(got) == len(raw) == {NSYS_NVFUSER: 19, NSYS_SAXPY: 5}[path]
    key = lambda r: (r["device"], r["stream"], r["name"], json.loads(r["params"])["short_name"], r["start_ns"],  # noqa: E731
                     r["duration_ns"], r["grid"], r["block"], r["registers_per_thread"], r["shared_memory_bytes"],
                     r["correlation_id"])
    assert sorted(map(key, got)) == sorted(raw)
    assert sum(r["duration_ns"] for r in got) == sum(k[5] for k in raw)
    assert [r["start_ns"] for r in t["kernels"]] == sorted(r["start_ns"] for r in t["kernels"])


def test_copies_and_sets_equal_the_raw_tables(export):
    path, t, _ = export
    raw = rawtrace.nsys_copies(path)
    got = [(r["kind"], r["device"], r["stream"], r["bytes"], r["copy_kind"], r["start_ns"], r["duration_ns"])
           for r in t["kernels"] if r["kind"] != "kernel"]
    assert sorted(got, key=str) == sorted(raw, key=str)
    assert Counter(r[0] for r in raw) == {NSYS_NVFUSER: {"memcpy": 1, "memset": 1}, NSYS_SAXPY: {"memcpy": 15}}[path]
    if path == NSYS_SAXPY:
        assert sum(r[3] for r in raw) == 15 * 262_144_000
        assert Counter(r[4] for r in raw) == {"HtoD": 10, "DtoH": 5}
        assert {r["name"] for r in t["kernels"] if r["kind"] == "memcpy"} == {
            "Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"}


def test_runtime_calls_equal_the_raw_table(export):
    path, t, _ = export
    raw = rawtrace.nsys_runtime(path)
    got = [(r["category"], r["name"], r["start_ns"], r["duration_ns"], r["thread_id"], r["correlation_id"])
           for r in t["runtime_calls"]]
    assert len(got) == {NSYS_NVFUSER: 968, NSYS_SAXPY: 57}[path]  # saxpy: + 38 backtrace rows
    assert sorted(got) == sorted(raw)
    assert "cudaLaunchKernel" in {r[1] for r in got}
    assert any(json.loads(r["params"]).get("api_name") == "cudaLaunchKernel_v7000" for r in t["runtime_calls"])
    if path == NSYS_SAXPY:  # each backtrace's callchain lands on its call
        chains = dict(rawtrace.nsys_sql(path, "SELECT correlationId, callchainId FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                                              "WHERE eventClass = 67"))
        assert {r["correlation_id"]: json.loads(r["params"])["callchain_id"] for r in t["runtime_calls"]
                if "callchain_id" in json.loads(r["params"])} == chains


def test_nvtx_ranges_equal_the_raw_table(export):
    path, t, _ = export
    raw = rawtrace.nsys_ranges(path)
    got = [(r["name"], r["start_ns"], r["duration_ns"], r["thread_id"], json.loads(r["params"]).get("domain"))
           for r in t["annotations"]]
    assert len(got) == {NSYS_NVFUSER: 652, NSYS_SAXPY: 22}[path]
    assert sorted(got, key=str) == sorted(raw, key=str)
    assert {r["category"] for r in t["annotations"]} == {"nvtx"}
    if path == NSYS_SAXPY:  # MPI tracing: ranges in the MPI domain, named by registered strings
        assert Counter(g[0] for g in got if g[4] == "MPI") == {"MPI_Send": 10, "MPI_Recv": 5, "MPI_Init": 1,
                                                               "MPI_Finalize": 1}
        assert Counter(g[0] for g in got if g[4] is None) == {"saxpy": 5}


def test_kernel_launch_links_equal_the_raw_join(export):
    path, t, _ = export
    raw = {(s, c): (cs, name, op) for s, c, cs, name, op in rawtrace.nsys_launches(path)}
    acts = t["kernels"]
    assert len(raw) == len(acts)
    for r in acts:
        call_start, call_name, op = raw[(r["start_ns"], r["correlation_id"])]
        assert r["launch_start_ns"] == call_start
        assert r["node_name"] == op, r["name"]
        assert r["link"] == ("launch" if op else None)
    assert sum(r["launch_start_ns"] is not None for r in acts) == len(acts)  # every activity has its call
    linked = Counter(r["node_name"] for r in acts if r["node_name"])
    assert linked == {NSYS_NVFUSER: {"ExecutorRunFusion::cuLaunchKernel": 1, "fusion_executor::allocations::allocateTensor": 1},
                      NSYS_SAXPY: {"saxpy": 5}}[path]
    # and the other way: each launch call names what it launched
    by_corr = Counter(r["correlation_id"] for r in acts)
    first = {}
    for r in sorted(acts, key=lambda r: r["start_ns"]):
        first.setdefault(r["correlation_id"], r["name"])
    for c in t["runtime_calls"]:
        assert c["kernel_count"] == by_corr.get(c["correlation_id"], 0)
        assert c["kernel_name"] == (first.get(c["correlation_id"]) if c["kernel_count"] else None)


def test_gpu_and_process_metadata(export):
    path, _, ctx = export
    cols = [r[1] for r in rawtrace.nsys_sql(path, "PRAGMA table_info(TARGET_INFO_GPU)")]
    raw = dict(zip(cols, rawtrace.nsys_sql(path, "SELECT * FROM TARGET_INFO_GPU")[0]))
    gpu = ctx.metadata["devices"]["GPU:0"]
    assert (gpu["model"], gpu["sm_count"], gpu["memory_bytes"], gpu["clock_hz"]) == (
        raw["name"], raw["smCount"], raw["totalMemory"], raw["clockRate"])
    assert gpu["model"] == {NSYS_NVFUSER: "NVIDIA H200", NSYS_SAXPY: "NVIDIA A100-SXM4-40GB"}[path]
    info = ctx.metadata["nsys"]
    assert info["schema_version"] == {NSYS_NVFUSER: "3.16.1", NSYS_SAXPY: "2.9.1"}[path]
    [proc] = info["processes"]
    assert proc["name"] == {NSYS_NVFUSER: "./bin/test_matmul", NSYS_SAXPY: "./saxpy-mpi-cuda"}[path]
    if path == NSYS_SAXPY:  # thread "MPI Rank 0"
        assert ctx.metadata["rank"] == 0 and proc["rank"] == 0
    else:
        assert "rank" not in ctx.metadata


def test_syncs_land_in_events(export):
    path, t, _ = export
    raw = rawtrace.nsys_sql(path, "SELECT start, end, streamId, correlationId FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")
    base = rawtrace.nsys_base(path)
    got = [(r["start_ns"] - base, r["start_ns"] + r["duration_ns"] - base, r["stream"], r["correlation_id"])
           for r in t.get("events", []) if r["category"] == "cuda_sync"]
    assert sorted(got) == sorted(raw)
    if path == NSYS_NVFUSER:
        assert [r["name"] for r in t["events"]] == ["Stream wait sync"]


def _step_copy(tmp_path: Path, names: list[str]) -> Path:
    """The saxpy export with its five `saxpy` NVTX ranges renamed (a real trace's timing)."""
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "steps.sqlite"
    shutil.copyfile(NSYS_SAXPY, path)
    con = sqlite3.connect(path)
    rowids = [r for (r,) in con.execute("SELECT rowid FROM NVTX_EVENTS WHERE text = 'saxpy' ORDER BY start")]
    for rowid, name in zip(rowids, names):
        con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE rowid = ?", (name, rowid))
    con.commit()
    con.close()
    return path


def test_steps_from_nvtx_ranges(tmp_path, monkeypatch):
    path = _step_copy(tmp_path, [f"step {i}" for i in range(5)])
    spans = rawtrace.nsys_sql(path, "SELECT start, end FROM NVTX_EVENTS WHERE text LIKE 'step %' ORDER BY start")
    base = rawtrace.nsys_base(path)
    t = _read(path)
    assert [(s["step"], s["start_ns"], s["duration_ns"]) for s in t["steps"]] == [
        (i, base + s, e - s) for i, (s, e) in enumerate(spans)]
    # each step's kernel is launched inside it: one activity a step, its span the device span
    kernels = sorted((r for r in t["kernels"] if r["kind"] == "kernel"), key=lambda r: r["start_ns"])
    assert [k["step"] for k in kernels] == [0, 1, 2, 3, 4]
    for s, k in zip(t["steps"], kernels):
        assert (s["kernel_count"], s["device_start_ns"], s["device_end_ns"]) == (
            1, k["start_ns"], k["start_ns"] + k["duration_ns"])
    assert {c["step"] for c in t["runtime_calls"] if c["kernel_name"] and "saxpy" in c["kernel_name"]} == set(range(5))
    # other spellings of the default rule, and a rule of one's own
    assert [s["step"] for s in _read(_step_copy(tmp_path / "b", ["ProfilerStep#7", "Iteration 8", "train_step_9",
                                                                 "iter:10", "stepping 11"]))["steps"]] == [7, 8, 9, 10]
    monkeypatch.setenv(nsys.STEP_REGEX_ENV, r"batch-(\d+)")
    assert [s["step"] for s in _read(_step_copy(tmp_path / "c", ["batch-1", "batch-2", "step 3"]))["steps"]] == [1, 2]
    monkeypatch.setenv(nsys.STEP_REGEX_ENV, r"batch-\d+")
    with pytest.raises(Exception, match="needs a group"):
        _read(path)




def test_emit_nvtx_op_names(tmp_path):
    """PyTorch's emit_nvtx names a range `aten::mm, seq = N, op_id = N, sizes = [...]`: the
    kernel's and the call's node_name is the op (the nvFuser export with the range that
    encloses its cuLaunchKernel renamed so)."""
    path = tmp_path / "emit.sqlite"
    shutil.copyfile(NSYS_NVFUSER, path)
    full = "aten::mm, seq = 12, op_id = 3, sizes = [[4, 8], [8, 2]]"
    con = sqlite3.connect(path)
    n = con.execute("UPDATE NVTX_EVENTS SET text = ?, textId = NULL WHERE text = 'ExecutorRunFusion::cuLaunchKernel' "
                    "OR textId IN (SELECT id FROM StringIds WHERE value = 'ExecutorRunFusion::cuLaunchKernel')",
                    (full,)).rowcount
    con.commit()
    con.close()
    t = _read(path)
    assert n >= 1 and sum(r["name"] == full for r in t["annotations"]) == n
    assert [r["name"] for r in t["kernels"] if r["node_name"] == "aten::mm"] == [
        r[2] for r in rawtrace.nsys_kernels(path) if r[3] == "nvfuser_none_f0_c0_r0_g0"]
    assert [c["name"] for c in t["runtime_calls"] if c["node_name"] == "aten::mm"] == ["cuLaunchKernel"]


def test_missing_tables_and_columns_are_tolerated(tmp_path):
    """An export of other options or another version: no NVTX, no memset table, a column
    gone: the rest still reads."""
    path = tmp_path / "slim.sqlite"
    shutil.copyfile(NSYS_NVFUSER, path)
    con = sqlite3.connect(path)
    for table in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_MEMSET", "TARGET_INFO_GPU", "META_DATA_EXPORT",
                  "ENUM_CUDA_MEMCPY_OPER", "ThreadNames"):
        con.execute(f"DROP TABLE {table}")
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN mangledName")
    con.commit()
    con.close()
    t = _read(path)
    assert Counter(r["kind"] for r in t["kernels"]) == {"kernel": 19, "memcpy": 1}
    assert len(t["runtime_calls"]) == 968 and "annotations" not in t
    assert all(r["node_name"] is None for r in t["kernels"])


def test_report_file_gets_the_export_command(tmp_path):
    with pytest.raises(TraceFormatError) as e:
        _read(REPORT)
    assert "nsys export --type sqlite nvfuser_h200_report1.nsys-rep" in str(e.value)
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copyfile(REPORT, alone / REPORT.name)
    summary = Warehouse(tmp_path / "wh").ingest(alone, run_id="r")
    assert not summary.ok
    [err] = summary.errors
    assert "nsys export --type sqlite nvfuser_h200_report1.nsys-rep" in str(err) and "\n" not in str(err)


def test_report_beside_its_export_is_skipped(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    [run] = wh.discover(DATA / "nsys_nvfuser_h200")  # loose files: one run, the export's
    assert [p.name for p in run.files] == ["nvfuser_h200_report1.sqlite"]
    assert [(p.name, "exported from" in why) for p, why in run.skipped] == [("nvfuser_h200_report1.nsys-rep", True)]
    [run] = wh.discover(DATA / "nsys_nvfuser_h200", run_id="n")  # a run folder: the same
    assert [p.name for p in run.files] == ["nvfuser_h200_report1.sqlite"]
    summary = wh.ingest(DATA / "nsys_nvfuser_h200", run_id="n")
    assert summary.ok, summary.errors


def test_gzipped_export_reads_the_same(tmp_path):
    import gzip

    gz = tmp_path / "saxpy.sqlite.gz"
    gz.write_bytes(gzip.compress(NSYS_SAXPY.read_bytes()))
    assert formats.detect(gz).NAME == "nsys"
    assert _read(gz) == _read(NSYS_SAXPY)


def test_truncated_export_is_a_one_line_error(tmp_path):
    bad = tmp_path / "cut.sqlite"
    bad.write_bytes(NSYS_NVFUSER.read_bytes()[: 200_000])
    summary = Warehouse(tmp_path / "wh").ingest(bad, run_id="cut")
    assert not summary.ok
    assert "\n" not in str(summary.errors[0])


@pytest.fixture(scope="module")
def nsys_warehouse(tmp_path_factory) -> Warehouse:
    wh = Warehouse(tmp_path_factory.mktemp("nsys") / "wh")
    for run, folder in (("nvfuser", "nsys_nvfuser_h200"), ("saxpy", "nsys_saxpy_mpi_a100")):
        summary = wh.ingest(DATA / folder, run_id=run)
        assert summary.ok, summary.errors
    return wh


def test_warehouse_rows_and_metadata(nsys_warehouse):
    wh = nsys_warehouse
    got = wh.sql("SELECT run_id, kind, count(*) AS n, sum(bytes) AS b FROM kernels GROUP BY ALL ORDER BY ALL").to_pylist()
    assert [(r["run_id"], r["kind"], r["n"]) for r in got] == [
        ("nvfuser", "kernel", 19), ("nvfuser", "memcpy", 1), ("nvfuser", "memset", 1),
        ("saxpy", "kernel", 5), ("saxpy", "memcpy", 15)]
    files = wh.sql("SELECT run_id, format, status, metadata, warnings FROM files ORDER BY run_id").to_pylist()
    assert [(f["run_id"], f["format"], f["status"], f["warnings"]) for f in files] == [
        ("nvfuser", "nsys", "ok", None), ("saxpy", "nsys", "ok", None)]  # no value the validator doubts
    assert json.loads(files[0]["metadata"])["devices"]["GPU:0"]["sm_count"] == 132
    assert wh.sql("SELECT DISTINCT rank FROM kernels WHERE run_id = 'saxpy'").to_pylist() == [{"rank": 0}]


def test_every_canned_query_runs_on_nsys_runs(nsys_warehouse):
    nonempty = 0
    for cq in nsys_warehouse.queries():
        runs = iter(["saxpy", "nvfuser"])
        params = {p.name: next(runs) for p in cq.params if p.required}
        for values in [params] + ([{**params, "run_id": "nvfuser"}] if cq.param("run_id") else []):
            nonempty += nsys_warehouse.query(cq, **values).num_rows > 0
    assert nonempty >= 30
    launches = nsys_warehouse.query("kernel_launch_stats", run_id="saxpy").to_pylist()
    assert len(launches) == 20 and {r["launch_call"] for r in launches} == {"cudaLaunchKernel", "cudaMemcpy"}


def test_report_on_two_nsys_runs(nsys_warehouse):
    result = CliRunner().invoke(app, ["report", "--baseline", "saxpy", "--candidate", "nvfuser", "-f", "json",
                                      "-w", str(nsys_warehouse.path)])
    assert result.exit_code in (0, 1), result.output
    doc = json.loads(result.stdout)
    assert [r["run_id"] for r in doc["baseline_runs"]] == ["saxpy"]
    assert [r["run_id"] for r in doc["candidate_runs"]] == ["nvfuser"]
    metrics = {m["key"]: m for m in doc["metrics"]}
    for run, path in (("saxpy", NSYS_SAXPY), ("nvfuser", NSYS_NVFUSER)):
        side = "baseline" if run == "saxpy" else "candidate"
        kernel_ns = sum(k[5] for k in rawtrace.nsys_kernels(path))  # no step ranges: one window
        copy_bytes = sum(c[3] for c in rawtrace.nsys_copies(path) if c[0] == "memcpy")
        assert metrics["GPU:0/gpu_kernel_time"][side]["per_run"][run] == [kernel_ns]
        assert metrics["GPU:0/copy_bytes"][side]["per_run"][run] == [copy_bytes]


def test_ranks_of_an_mpi_job_from_thread_names(tmp_path):
    """Two ranks' exports in one run folder: the second is rank 0's export with its main
    thread named `MPI Rank 1` (as nsys's MPI tracing names it); each file's rows keep their rank."""
    run = tmp_path / "job"
    run.mkdir()
    shutil.copyfile(NSYS_SAXPY, run / "saxpy_a.sqlite")
    shutil.copyfile(NSYS_SAXPY, run / "saxpy_b.sqlite")
    con = sqlite3.connect(run / "saxpy_b.sqlite")
    [(name_id,)] = con.execute("SELECT id FROM StringIds WHERE value = 'MPI Rank 0'")
    con.execute("UPDATE StringIds SET value = 'MPI Rank 1' WHERE id = ?", (name_id,))
    con.execute("UPDATE NVTX_EVENTS SET text = 'MPI Rank 1' WHERE text = 'MPI Rank 0'")
    con.commit()
    con.close()
    wh = Warehouse(tmp_path / "wh")
    summary = wh.ingest(run, run_id="job")
    assert summary.ok, summary.errors
    got = wh.sql("SELECT source_file, rank, count(*) AS n FROM kernels GROUP BY ALL ORDER BY ALL").to_pylist()
    assert got == [{"source_file": "saxpy_a.sqlite", "rank": 0, "n": 20}, {"source_file": "saxpy_b.sqlite", "rank": 1, "n": 20}]


def test_processes_without_rank_names_get_ranks_by_pid(tmp_path):
    """One export of two CUDA processes (the nvFuser export with the calls and activities of
    correlation ids past 1000 moved to pid + 1): ranks 0 and 1 by pid, with a warning."""
    path = tmp_path / "two.sqlite"
    shutil.copyfile(NSYS_NVFUSER, path)
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = globalTid + 16777216 WHERE correlationId > 1000")
    for t in ("KERNEL", "MEMCPY", "MEMSET", "SYNCHRONIZATION"):
        con.execute(f"UPDATE CUPTI_ACTIVITY_KIND_{t} SET globalPid = globalPid + 16777216 WHERE correlationId > 1000")
    con.commit()
    moved = {c for (c,) in con.execute("SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId > 1000")}
    con.close()
    ctx = ReadContext("run", path.name)
    t = _read(path, ctx)
    assert moved and {(r["correlation_id"] in moved, r["rank"]) for r in t["kernels"] if r["kind"] == "kernel"} == {
        (False, 0), (True, 1)}
    assert all(r["launch_start_ns"] is not None for r in t["kernels"])  # links stay within a process
    assert "rank" not in ctx.metadata and [p["rank"] for p in ctx.metadata["nsys"]["processes"]] == [0, 1]
    assert any("ranks by pid order" in w for w in ctx.warnings)
