"""Chrome-trace export of an ingested run (the XSpace fixture).

Expected counts come from the XSpace fixture (see tests/test_format_xspace.py for how
they were derived): 30 GPU kernels summing 3,910,125 ns on stream 14, 158 timed host
nodes on threads 635 and "python3", 20 allocator events on GPU:0.
"""

from __future__ import annotations

import collections
import importlib.util
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest

from tracedb.errors import TracedbError
from tracedb.export import _us, export_chrome
from tracedb.ingest import ingest

FIXTURE = Path(__file__).parent / "data" / "xspace_jax_h200" / "jax_h200.xplane.pb"
RUN = "jax"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    wh = tmp_path_factory.mktemp("wh")
    summary = ingest([FIXTURE], wh, run_id=RUN)
    assert summary.ok, summary.errors
    return wh


def _load(path: Path) -> list[dict]:
    # Decimal keeps the ns digits of ts/dur exactly, as written.
    return json.loads(path.read_text(), parse_float=Decimal)["traceEvents"]


def test_export_events(warehouse, tmp_path):
    out = tmp_path / "trace.json"
    n = export_chrome(warehouse, RUN, out)
    doc = json.loads(out.read_text())
    assert doc["displayTimeUnit"] == "ns"
    events = _load(out)
    assert n == len(events) == 215
    counts = collections.Counter((e["ph"], e.get("cat")) for e in events)
    assert counts == {("X", "gpu"): 30, ("X", "op"): 158, ("C", None): 20, ("M", None): 7}

    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(procs.values()) == ["CPU:0", "GPU:0"]
    threads = {(procs[e["pid"]], e["args"]["name"]) for e in events if e["name"] == "thread_name"}
    assert threads == {("GPU:0", "stream 14"), ("CPU:0", "Host Threads/635"), ("CPU:0", "python3")}

    gpu = [e for e in events if e.get("cat") == "gpu"]
    assert sum(e["dur"] for e in gpu) == Decimal("3910.125")
    assert gpu[0]["ts"] == Decimal("17251.073") and gpu[0]["dur"] == Decimal("197.727")
    assert {e["args"]["kind"] for e in gpu} == {"kernel"}
    assert gpu[0]["args"]["name"] == "command_buffer_1"  # the launching op
    assert gpu[0]["args"]["grid"] == [512, 1, 1]
    ops = [e for e in events if e.get("cat") == "op"]
    assert sum(e["dur"] for e in ops) == Decimal("73314.496")
    # all tids are small non-negative ints, as Perfetto wants
    assert all(0 <= e["tid"] < 2**31 for e in events)
    mem = [e["args"]["bytes_in_use"] for e in events if e["ph"] == "C"]
    assert max(mem) == 134_218_240  # GPU_0_bfc bytes_allocated after the 64 MiB buffer


def test_timestamps_keep_ns_digits():
    # An epoch-based ns time (this fixture's profile_start_time) has 19 digits: a float µs
    # value would round it, the exported text keeps it exactly.
    assert _us(1_795_653_288_812_422_002) == "1795653288812422.002"
    assert _us(5) == "0.005" and _us(-1500) == "-1.500"


def test_export_device_filter_and_streams(warehouse):
    buf = io.StringIO()
    n = export_chrome(warehouse, RUN, buf, devices=["gpu0"])
    events = json.loads(buf.getvalue())["traceEvents"]
    assert n == len(events) == 53  # 30 kernels, 20 counters, 3 metadata
    raw = io.BytesIO()
    assert export_chrome(warehouse, RUN, raw, devices=["CPU:0"]) == 158 + 4
    assert len(json.loads(raw.getvalue())["traceEvents"]) == 162


def test_export_unknown_run(warehouse, tmp_path):
    with pytest.raises(TracedbError, match="no events for run 'nope'"):
        export_chrome(warehouse, "nope", tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


@pytest.mark.skipif(importlib.util.find_spec("tracedb.formats.chrome_trace") is None,
                    reason="chrome_trace reader not written yet")
def test_round_trip(warehouse, tmp_path):
    from tracedb import catalog

    out = tmp_path / "exported.json"
    export_chrome(warehouse, RUN, out)
    wh2 = tmp_path / "wh2"
    summary = ingest([out], wh2, run_id="again")
    assert summary.ok, summary.errors
    con = catalog.connect(wh2)
    try:
        fmt = con.execute("SELECT formats FROM runs").fetchone()[0]
        count, total, stream, ops = con.execute(
            "SELECT count(*), sum(duration_ns), min(stream), list(DISTINCT node_name) "
            "FROM kernels WHERE device = 'GPU:0'"
        ).fetchone()
        nodes, node_ns = con.execute("SELECT count(*), sum(duration_ns) FROM nodes").fetchone()
    finally:
        con.close()
    assert fmt == ["chrome_trace"]
    assert (count, total, stream, ops) == (30, 3_910_125, 14, ["command_buffer_1"])
    assert (nodes, node_ns) == (158, 73_314_496)


_SUMMARY = """
    SELECT (SELECT count(*) FROM kernels WHERE run_id = $r),
           (SELECT sum(duration_ns) FROM kernels WHERE run_id = $r),
           (SELECT list(DISTINCT stream ORDER BY stream) FROM kernels WHERE run_id = $r),
           (SELECT count(*) FROM nodes WHERE run_id = $r AND start_ns IS NOT NULL),
           (SELECT sum(duration_ns) FROM nodes WHERE run_id = $r),
           (SELECT list(DISTINCT device ORDER BY device) FROM nodes
            WHERE run_id = $r AND start_ns IS NOT NULL)
"""


@pytest.mark.skipif(importlib.util.find_spec("tracedb.formats.chrome_trace") is None,
                    reason="chrome_trace reader not written yet")
@pytest.mark.parametrize("scenario", ["tf_stepstats_gpu_streams", "tf_runmetadata_text"])
def test_round_trip_other_formats(scenario, tmp_path):
    """TF runs have ops placed on GPU:0 beside the GPU streams: they must come back as
    nodes on GPU:0, and the kernels as the same kernels."""
    from tracedb import catalog

    src, back = tmp_path / "src", tmp_path / "back"
    assert ingest([Path(__file__).parent / "data" / scenario], src, run_id="a").ok
    export_chrome(src, "a", tmp_path / "t.json")
    assert ingest([tmp_path / "t.json"], back, run_id="b").ok
    rows = []
    for wh, run in ((src, "a"), (back, "b")):
        con = catalog.connect(wh)
        try:
            rows.append(con.execute(_SUMMARY, {"r": run}).fetchone())
        finally:
            con.close()
    assert rows[0] == rows[1]
    assert rows[0][3] > 0 and "GPU:0" in rows[0][5]


def test_round_trip_keeps_kineto_steps(tmp_path):
    """Steps survive export -> chrome_trace ingest (args.step), for ops and GPU activity."""
    from tracedb import catalog

    src = Path(__file__).parent / "data" / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
    wh = tmp_path / "wh"
    assert ingest([src], wh, run_id="torch").ok
    out = tmp_path / "torch.json.gz"
    export_chrome(wh, "torch", out)
    assert ingest([out], wh, run_id="again").ok
    con = catalog.connect(wh)
    q = "SELECT step, count(*) FROM {t} WHERE run_id = ? GROUP BY step ORDER BY step NULLS LAST"
    for table in ("kernels", "nodes"):
        before = con.execute(q.format(t=table), ["torch"]).fetchall()
        assert con.execute(q.format(t=table), ["again"]).fetchall() == before
    # the fixture's numbers: 3 steps of 2415 ops; 314 GPU activities a step, 260 before step 1
    assert con.execute(q.format(t="nodes"), ["again"]).fetchall() == [(1, 2415), (2, 2415), (3, 2415)]
    assert con.execute(q.format(t="kernels"), ["again"]).fetchall() == [(1, 314), (2, 314), (3, 314), (None, 260)]


def test_export_draws_launch_arrows_xspace(warehouse, tmp_path):
    # XSpace: each kernel's host launch event (cuGraphLaunch) shares its correlation_id.
    out = tmp_path / "t.json"
    export_chrome(warehouse, RUN, out)
    events = _load(out)
    gpu = [e for e in events if e.get("cat") == "gpu"]
    sources = {e["bind_id"]: e for e in events if e.get("flow_out")}
    assert len(gpu) == 30 and all(e.get("flow_in") for e in gpu)
    assert {sources[e["bind_id"]]["name"] for e in gpu} == {"cuGraphLaunch (CudaGraph:2)"}
    for e in gpu:  # the launch comes before the kernel it launched
        assert sources[e["bind_id"]]["ts"] <= e["ts"]


def test_export_kineto_runtime_lane_and_flows(tmp_path):
    from rawtrace import load_kineto_json, us_ns

    src = Path(__file__).parent / "data" / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
    wh = tmp_path / "wh"
    assert ingest([src], wh, run_id="torch").ok
    out = tmp_path / "torch.json"
    export_chrome(wh, "torch", out)
    events = _load(out)
    # expected from the raw trace: every GPU activity whose correlation has a runtime call
    doc = load_kineto_json(src)
    base = int(doc["baseTimeNanoseconds"])
    runtime = {e["args"]["correlation"]: e for e in doc["traceEvents"]
               if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu_raw = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launched = [e for e in gpu_raw if e["args"].get("correlation") in runtime]
    assert len(gpu_raw) == 1038 + 48 + 116
    lane = [e for e in events if e.get("cat") == "cuda_runtime"]
    assert len(lane) == len(launched) == 942  # 260 activities have no runtime call in the window
    procs = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {(procs[e["pid"]], threads[(e["pid"], e["tid"])]) for e in lane} == {("CPU:0", "CUDA runtime")}
    assert sorted(int(e["ts"] * 1000) for e in lane) == sorted(
        base + us_ns(runtime[e["args"]["correlation"]]["ts"]) for e in launched)
    # each runtime slice starts one arrow that ends on a GPU slice
    out_ids = [e["bind_id"] for e in lane if e.get("flow_out")]
    in_ids = [e["bind_id"] for e in events if e.get("cat") == "gpu" and e.get("flow_in")]
    assert len(set(out_ids)) == len(out_ids) == len(lane) and sorted(in_ids) == sorted(out_ids)
    # (memory counter tracks: test_export_events, on the XSpace fixture's allocator events)


def test_export_untimed_run_is_refused(tmp_path):
    from typer.testing import CliRunner

    from tracedb.cli import app

    wh = tmp_path / "wh"
    assert ingest([Path(__file__).parent / "data" / "node_shape_dump"], wh, run_id="dump").ok
    with pytest.raises(TracedbError, match=r"run 'dump' has no timed events \(node_dump record no times\)"):
        export_chrome(wh, "dump", tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
    r = CliRunner().invoke(app, ["export", "--run", "dump", "-o", str(tmp_path / "x.json"), "-w", str(wh)])
    assert r.exit_code == 2 and "has no timed events" in r.output
