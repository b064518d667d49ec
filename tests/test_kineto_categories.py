"""Every Kineto event lands in a table, and every kernel's op equals an independent oracle.

Real traces: our H200 ones and HTA's test traces (tests/data/HTA_TRACES.md: older PyTorch
with External id == correlation, ROCm MI250, MTIA, the old capitalised schema, NCCL
ranks, CPU-only, Triton). Hand-made ones: the cases the issue names, small enough to
check by eye. Expected values come from `rawtrace` (plain json, no tracedb code).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import DATA
from rawtrace import kineto_links, kineto_table, load_json_trace
from tracedb import catalog
from tracedb.ingest import ingest

REAL = {
    "kineto_h200_fp32": "kineto_h200_fp32.json.gz",
    "kineto_h200_annotated": "annotated_h200_bf16.json.gz",
    "hta_alexnet_ext_eq_corr": "alexnet.json.gz",
    "hta_rocm_mi250": "mi250.json.gz",
    "hta_mtia_inference": "mtia_rank_0.json.gz",
    "hta_old_schema": "inference_rank_1.json.gz",
    "hta_cpu_only": "rank-34.json.gz",
    "hta_triton": "triton.json.gz",
    "hta_nccl_two_ranks": "rank-0.json.gz",
    "hta_nccl_allreduce": "rank-0.json.gz",
}


def _trace(events: list[dict], **top) -> dict:
    return {"schemaVersion": 1, "traceEvents": events, **top}


def _x(cat, name, ts, dur, tid=1, pid=1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


# Old schema (capitalised categories, lower-case `external id`) from a PyTorch whose
# launches wrote External id == correlation: the copy's External id 7 names aten::detach,
# but the launch call sits inside aten::copy_.
OLD_SCHEMA_EXT_EQ_CORR = _trace([
    _x("Operator", "aten::detach", 10, 5, **{"external id": 7}),
    _x("Operator", "aten::copy_", 100, 50, **{"external id": 1}),
    _x("Runtime", "cudaMemcpyAsync", 110, 10, correlation=7, **{"external id": 7}),
    _x("Operator", "aten::conv2d", 300, 100, **{"external id": 2}),
    _x("Operator", "aten::convolution", 305, 90, **{"external id": 3}),
    _x("Operator", "aten::cudnn_convolution", 310, 80, **{"external id": 4}),
    _x("Runtime", "cudaLaunchKernel", 320, 10, correlation=9, **{"external id": 9}),
    _x("Memcpy", "Memcpy HtoD (Pageable -> Device)", 200, 30, pid=0, tid=7,
       device=0, stream=7, correlation=7, bytes=64, **{"external id": 7}),
    _x("Kernel", "implicit_convolve_sgemm", 400, 20, pid=0, tid=7, device=0, stream=7,
       correlation=9, **{"external id": 9}),
    _x("Kernel", "orphan_kernel", 500, 5, pid=0, tid=7, device=0, stream=7, correlation=11,
       **{"external id": 1}),
    _x("my_new_category", "something", 600, 1),
], distributedInfo={"rank": 3})

MTIA_STYLE = _trace([
    _x("cpu_op", "aten::mm", 0, 100, tid=5, **{"External id": 1}),
    _x("mtia_runtime", "launchKernel", 10, 10, tid=5, correlation=100),
    _x("mtia_runtime", "memcpyHtoDAsync", 30, 5, tid=5, correlation=101),
    _x("mtia_ccp_events", "pe_exe", 50, 30, pid=3, tid=9, stream=2, correlation=100),
    _x("mtia_ccp_events", "dma_request", 40, 4, pid=3, tid=9, stream=2, correlation=101,
       size=4096, direction="HOST_TO_DEVICE"),
], baseTimeNanoseconds=1_000_000_000)


def _write(tmp_path: Path, name: str, doc: dict) -> Path:
    path = tmp_path / f"{name}.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


@pytest.fixture(scope="module")
def real_wh(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("kineto_cats") / "wh"
    for scenario, name in REAL.items():
        summary = ingest([DATA / scenario / name], wh, run_id=scenario)
        assert summary.ok, summary.errors
    return wh


def _links_of(con, run_id: str) -> list[tuple]:
    return con.execute(
        "SELECT start_ns, name, node_seq, link FROM kernels WHERE run_id = ? "
        "ORDER BY start_ns, name, node_seq NULLS FIRST", [run_id]).fetchall()


def _oracle(doc: dict) -> list[tuple]:
    return sorted(kineto_links(doc), key=lambda r: (r[0], r[1], -1 if r[2] is None else r[2]))


@pytest.mark.parametrize("scenario", list(REAL))
def test_every_kernel_links_to_the_oracles_op(real_wh, scenario):
    doc = load_json_trace(DATA / scenario / REAL[scenario])
    con = catalog.connect(real_wh)
    assert _links_of(con, scenario) == _oracle(doc)


@pytest.mark.parametrize("scenario", list(REAL))
def test_every_event_lands_in_its_table(real_wh, scenario):
    doc = load_json_trace(DATA / scenario / REAL[scenario])
    want = Counter(kineto_table(e) for e in doc["traceEvents"])
    want.pop(None, None)
    con = catalog.connect(real_wh)
    got = {t: con.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", [scenario]).fetchone()[0]
           for t in ("nodes", "kernels", "runtime_calls", "annotations", "allocations", "events")}
    assert got == {t: want.get(t, 0) for t in got}


def test_older_pytorch_links_by_launch_not_by_external_id(real_wh):
    """HTA's alexnet trace: External id == correlation on all 98 activities."""
    con = catalog.connect(real_wh)
    rows = con.execute("""
        SELECT count(*), count(*) FILTER (link = 'launch'),
               count(*) FILTER (k.node_name = n.node_name AND k.correlation_id <> n.correlation_id)
        FROM kernels k JOIN nodes n USING (run_id, source_file)
        WHERE run_id = 'hta_alexnet_ext_eq_corr' AND n.seq = k.node_seq""").fetchone()
    assert rows[:2] == (98, 98)
    # the External id route (kernel External id -> the cpu_op with it) finds no op for 81
    # and another op for the other 17: it agrees with the launch call on none
    by_ext = con.execute("""
        SELECT count(n.seq), count(*) FILTER (n.seq = k.node_seq) FROM kernels k LEFT JOIN nodes n
          ON n.run_id = k.run_id AND n.correlation_id = k.external_id
        WHERE k.run_id = 'hta_alexnet_ext_eq_corr'""").fetchone()
    assert by_ext == (17, 0)


def test_other_accelerators_and_copies(real_wh):
    con = catalog.connect(real_wh)
    assert con.execute("""SELECT device, count(*), count(*) FILTER (kind = 'memcpy'),
                                 sum(bytes) FILTER (kind = 'memcpy')
                          FROM kernels WHERE run_id = 'hta_mtia_inference' GROUP BY 1""").fetchall() == [
        ("MTIA:17", 1313, 877, sum(e["args"]["size"] for e in load_json_trace(
            DATA / "hta_mtia_inference" / REAL["hta_mtia_inference"])["traceEvents"]
            if e.get("cat") == "mtia_ccp_events" and e["name"].startswith("dma")))]
    # ROCm copies: no `bytes` arg; the hipMemcpyWithStream call's size (2560) each
    assert con.execute("""SELECT device, bytes, copy_kind FROM kernels
                          WHERE run_id = 'hta_rocm_mi250' AND kind = 'memcpy'""").fetchall() == [
        ("GPU:2", 2560, "HtoD"), ("GPU:2", 2560, "HtoD")]
    assert con.execute("SELECT count(*) FROM runtime_calls WHERE run_id = 'hta_rocm_mi250' "
                       "AND name LIKE 'hip%Launch%' AND kernel_count = 1").fetchone()[0] == 14
    # old capitalised schema: read by the Kineto reader
    assert con.execute("SELECT format FROM files WHERE run_id = 'hta_old_schema'").fetchone()[0] == "kineto"
    assert con.execute("SELECT count(*) FROM runtime_calls WHERE run_id = 'hta_old_schema'").fetchone()[0] == 8


def test_steps_have_host_and_device_spans(real_wh):
    doc = load_json_trace(DATA / "kineto_h200_fp32" / REAL["kineto_h200_fp32"])
    con = catalog.connect(real_wh)
    rows = con.execute("""SELECT step, start_ns, duration_ns, kernel_count FROM steps
                          WHERE run_id = 'kineto_h200_fp32' ORDER BY step""").fetchall()
    from rawtrace import kineto

    raw = kineto(doc)
    assert [(r[0], r[1], r[2]) for r in rows] == [(n, s, e - s) for n, (s, e) in sorted(raw.steps.items())]
    # device work of a step = activities whose launching op (else launch) is in the step
    per_step = Counter(k.step for k in raw.kernels if k.step is not None)
    assert [r[3] for r in rows] == [per_step[n] for n in (1, 2, 3)]
    spans = con.execute("""SELECT s.step, s.device_start_ns = min(k.start_ns),
                                  s.device_end_ns = max(k.start_ns + k.duration_ns)
                           FROM steps s JOIN kernels k USING (run_id, step)
                           WHERE run_id = 'kineto_h200_fp32' GROUP BY s.step, s.device_start_ns, s.device_end_ns
                           ORDER BY 1""").fetchall()
    assert spans == [(1, True, True), (2, True, True), (3, True, True)]


def test_hand_made_old_schema_and_mtia(tmp_path):
    wh = tmp_path / "wh"
    old = _write(tmp_path, "old", OLD_SCHEMA_EXT_EQ_CORR)
    mtia = _write(tmp_path, "mtia", MTIA_STYLE)
    assert ingest([old], wh, run_id="old").ok and ingest([mtia], wh, run_id="mtia").ok
    con = catalog.connect(wh)
    got = con.execute("SELECT name, node_name, link, bytes FROM kernels WHERE run_id = 'old' "
                      "ORDER BY start_ns").fetchall()
    assert got == [("Memcpy HtoD (Pageable -> Device)", "aten::copy_", "launch", 64),
                   ("implicit_convolve_sgemm", "aten::cudnn_convolution", "launch", None),
                   ("orphan_kernel", "aten::copy_", "external_id", None)]
    for name, doc in (("old", OLD_SCHEMA_EXT_EQ_CORR), ("mtia", MTIA_STYLE)):
        assert _links_of(con, name) == _oracle(json.loads(json.dumps(doc)))
    warnings = json.loads(con.execute("SELECT warnings FROM files WHERE run_id = 'old'").fetchone()[0])
    assert warnings == {"unknown event category 'my_new_category' (kept in events)": 1}
    assert con.execute("SELECT category, name FROM events WHERE run_id = 'old'").fetchall() == [
        ("my_new_category", "something")]
    assert con.execute("SELECT DISTINCT rank FROM kernels WHERE run_id = 'old'").fetchall() == [(3,)]
    assert con.execute("""SELECT device, stream, kind, bytes, copy_kind, node_name, start_ns
                          FROM kernels WHERE run_id = 'mtia' ORDER BY start_ns""").fetchall() == [
        ("MTIA:3", 2, "memcpy", 4096, "HtoD", "aten::mm", 1_000_040_000),
        ("MTIA:3", 2, "kernel", None, None, "aten::mm", 1_000_050_000)]
    assert con.execute("""SELECT name, duration_ns, node_name, kernel_name, kernel_count
                          FROM runtime_calls WHERE run_id = 'mtia' ORDER BY start_ns""").fetchall() == [
        ("launchKernel", 10_000, "aten::mm", "pe_exe", 1),
        ("memcpyHtoDAsync", 5_000, "aten::mm", "dma_request", 1)]


def test_a_claimed_file_without_kineto_events_falls_back(tmp_path):
    """A Chrome trace with Kineto's top-level key but TF-timeline events: the Kineto reader
    finds nothing of its own, and the generic reader reads it."""
    doc = {"deviceProperties": [], "traceEvents": [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/job:localhost/replica:0/task:0/device:CPU:0 Compute"}},
        {"ph": "X", "cat": "Op", "name": "MatMul", "pid": 1, "tid": 0, "ts": 10, "dur": 5,
         "args": {"name": "dense/MatMul", "op": "MatMul"}},
    ]}
    path = _write(tmp_path, "tf_like", doc)
    wh = tmp_path / "wh"
    assert ingest([path], wh, run_id="tf").ok
    con = catalog.connect(wh)
    fmt, warnings = con.execute("SELECT format, warnings FROM files").fetchone()
    assert fmt == "chrome_trace"
    assert json.loads(warnings) == {
        "read by chrome_trace: kineto failed: no Kineto events (no cpu_op, kernel, runtime or annotation category)": 1}
    assert con.execute("SELECT node_name, source_format, duration_ns FROM nodes").fetchall() == [
        ("dense/MatMul", "chrome_trace", 5000)]


# The GPU runs behind the CPU: step 1's kernels run during step 2's host time, and one of
# them (stream 8) still runs when step 2's first kernel starts.
LAGGING_GPU = _trace([
    _x("user_annotation", "ProfilerStep#1", 0, 100),
    _x("cpu_op", "aten::a", 10, 40, **{"External id": 1}),
    _x("cuda_runtime", "cudaLaunchKernel", 20, 5, correlation=1),
    _x("cuda_runtime", "cudaLaunchKernel", 30, 5, correlation=2),
    _x("user_annotation", "ProfilerStep#2", 100, 100),
    _x("cpu_op", "aten::b", 110, 40, **{"External id": 2}),
    _x("cuda_runtime", "cudaLaunchKernel", 120, 5, correlation=3),
    _x("kernel", "k1", 150, 110, pid=0, tid=7, device=0, stream=7, correlation=1),
    _x("kernel", "k2", 200, 120, pid=0, tid=8, device=0, stream=8, correlation=2),
    _x("kernel", "k3", 300, 80, pid=0, tid=7, device=0, stream=7, correlation=3),
], baseTimeNanoseconds=0)


def test_lagging_gpu_windows_tile_the_timeline(tmp_path):
    from rawtrace import rows

    wh = tmp_path / "wh"
    assert ingest([_write(tmp_path, "lag", LAGGING_GPU)], wh, run_id="lag").ok
    con = catalog.connect(wh)
    assert con.execute("SELECT name, step, node_name FROM kernels ORDER BY start_ns").fetchall() == [
        ("k1", 1, "aten::a"), ("k2", 1, "aten::a"), ("k3", 2, "aten::b")]
    assert con.execute("SELECT step, start_ns, duration_ns, device_start_ns, device_end_ns FROM steps "
                       "ORDER BY step").fetchall() == [
        (1, 0, 100_000, 150_000, 320_000), (2, 100_000, 100_000, 300_000, 380_000)]
    got = [(r["step"], r["start_ns"], r["end_ns"], r["busy_ns"], r["idle_ns"])
           for r in rows("gpu_busy_idle", wh, run_id="lag")]
    # step 1's window ends where step 2's work starts (300 µs): k2's last 20 µs count in
    # step 2's window, so the windows add up to the 230 µs of GPU timeline
    assert got == [(1, 150_000, 300_000, 150_000, 0), (2, 300_000, 380_000, 80_000, 0)]
