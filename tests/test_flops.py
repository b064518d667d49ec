"""FLOPs and bytes per op, MFU, roofline (issue 26), against oracles from the raw files.

Each oracle reads the trace itself (json / gzip / the XSpace protobuf) and applies the
textbook formula written here, independently of tracedb.flops: a matrix op is 2*M*N*K from
its `Input Dims` (batch dimension for bmm), a convolution 2 * N * Cout * prod(out) *
Cin/groups * prod(kernel) with the output size from stride, padding and dilation in its
`Concrete Inputs`, attention 4*B*H*Sq*Sk*D (halved when causal). MFU per step is the
step's FLOPs (counted once, at the innermost op: mm/addmm/bmm, cudnn_convolution /
convolution_backward, the attention kernels' ops) over (device step time x the NVIDIA H200
datasheet peak: fp32 67 TFLOP/s, bf16 989.5 TFLOP/s dense).
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from tracedb import catalog
from tracedb.ingest import ingest
from tracedb.query import run_query

DATA = Path(__file__).parent / "data"
FP32 = DATA / "kineto_h200_fp32" / "kineto_h200_fp32.json.gz"
BF16 = DATA / "kineto_h200_annotated" / "annotated_h200_bf16.json.gz"
CNN = DATA / "fleet_dev" / "day1" / "trace.json.gz"
MEGENGINE = DATA / "megengine_graph_profile" / "004_825e28a4f520ddc2.txt"
XSPACE = DATA / "xspace_jax_h200" / "jax_h200.xplane.pb"
NCCL = DATA / "hta_nccl_two_ranks" / "rank-0.json.gz"  # HTA's test trace: mm, addmm and bmm
MI250 = DATA / "hta_rocm_mi250" / "mi250.json.gz"
# NVIDIA H200 Tensor Core GPU datasheet (H200 SXM): FP32 67 TFLOPS, BF16 1,979 TFLOPS with
# sparsity = 989.5 dense.
H200_PEAK = {"fp32": 67.0, "bf16": 989.5}


def _ops(path: Path) -> list[dict]:
    return [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("cat") == "cpu_op"]


def _mm(dims: list, name: str) -> int | None:
    if name in ("aten::mm",):
        (m, k), (_, n) = dims[0], dims[1]
        return 2 * m * n * k
    if name == "aten::addmm":
        (m, k), (_, n) = dims[1], dims[2]
        return 2 * m * n * k
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2 * b * m * n * k
    if name == "aten::baddbmm":
        (b, m, k), (_, _, n) = dims[1], dims[2]
        return 2 * b * m * n * k
    return None


def _conv(dims: list, padding: str, stride: str, dilation: str) -> int:
    (n, cin, *spatial), (cout, cin_g, *kernel) = dims[0], dims[1]
    pad, st, dil = json.loads(padding), json.loads(stride), json.loads(dilation)
    out = [(i + 2 * p - d * (k - 1) - 1) // s + 1 for i, k, p, s, d in zip(spatial, kernel, pad, st, dil)]
    return 2 * n * cout * math.prod(out) * cin_g * math.prod(kernel)


def _attention(q: list, causal: bool, bshd: bool = False, factor: int = 1) -> int:
    b, s1, s2, d = q
    h, sq = (s2, s1) if bshd else (s1, s2)
    flops = 4 * b * h * sq * sq * d * factor  # self-attention: Sk = Sq
    return flops // 2 if causal else flops


# The innermost op of each family, with its FLOPs from the raw event (what a step counts).
def _leaf_flops(e: dict) -> int | None:
    a, name = e["args"], e["name"]
    dims, conc = a.get("Input Dims"), a.get("Concrete Inputs")
    if dims is None:
        return None
    if (f := _mm(dims, name)) is not None:
        return f
    if name == "aten::cudnn_convolution":  # (input, weight, padding, stride, dilation, groups, ...)
        return _conv(dims, conc[2], conc[3], conc[4])
    if name == "aten::convolution_backward":  # grad_input + grad_weight: twice the forward
        mask = conc[10].strip("[]").split(", ")
        return _conv(dims[1:3], conc[5], conc[4], conc[6]) * [m == "True" for m in mask[:2]].count(True)
    if name == "aten::_efficient_attention_forward":  # B, S, H, D; custom_mask_type at 9
        return _attention(dims[0], conc[9] != "0", bshd=True)
    if name == "aten::_efficient_attention_backward":  # custom_mask_type at 14
        return _attention(dims[1], conc[14] != "0", bshd=True, factor=2)
    if name == "aten::_cudnn_attention_forward":  # is_causal at 10
        return _attention(dims[0], conc[10] == "True")
    if name == "aten::_cudnn_attention_backward":  # is_causal at 14
        return _attention(dims[1], conc[14] == "True", factor=2)
    return None


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("flops_runs")
    for name, src in (("fp32", FP32), ("bf16", BF16), ("cnn", CNN), ("mge", MEGENGINE), ("jax", XSPACE),
                      ("nccl", NCCL), ("mi250", MI250)):
        (runs / name).mkdir()
        shutil.copy(src, runs / name / src.name)
    out = tmp_path_factory.mktemp("flops_wh") / "wh"
    summary = ingest([runs], out)
    assert summary.ok, summary.errors
    return out


def _nodes(wh: Path, run: str) -> dict[int, dict]:
    con = catalog.connect(wh)
    cur = con.execute("SELECT correlation_id, op_type, flops, memory_bytes, flops_rule, flops_dtype, flops_counted "
                      "FROM nodes WHERE run_id = ?", [run])
    cols = [d[0] for d in cur.description]
    return {r[0]: dict(zip(cols, r)) for r in cur.fetchall()}


@pytest.mark.parametrize("run,path", [("fp32", FP32), ("bf16", BF16), ("cnn", CNN), ("nccl", NCCL), ("mi250", MI250)])
def test_matrix_ops_are_2mnk_of_their_input_dims(wh, run, path):
    got = _nodes(wh, run)
    checked = 0
    for e in _ops(path):
        want = _mm(e["args"]["Input Dims"], e["name"]) if "Input Dims" in e["args"] else None
        if want is None:
            continue
        row = got[e["args"]["External id"]]
        assert (row["op_type"], row["flops"], row["flops_rule"]) == (e["name"], want, "matmul")
        # bytes: both operands (and addmm's bias) read once, the result written once
        dims = e["args"]["Input Dims"]
        size = 4 if e["args"]["Input type"][-1 if e["name"] == "aten::mm" else 1] == "float" else 2
        tensors = [d for d in dims if d]
        out = [tensors[-2][0], tensors[-1][1]] if e["name"] in ("aten::mm", "aten::addmm") else None
        if out:
            assert row["memory_bytes"] == (sum(math.prod(t) for t in tensors) + math.prod(out)) * size
        checked += 1
    assert checked == {"fp32": 153, "bf16": 69, "cnn": 15, "nccl": 378, "mi250": 2}[run]


def test_linear_and_matmul_count_2mnk_but_leave_the_total_to_their_mm(wh):
    got = _nodes(wh, "bf16")
    for e in _ops(BF16):
        dims = e["args"].get("Input Dims")
        if e["name"] == "aten::linear":
            x, w = dims[0], dims[1]
            want = 2 * math.prod(x[:-1]) * w[0] * w[1]
        elif e["name"] == "aten::matmul":
            (*batch, m, k), (_, n) = dims[0], dims[1]
            want = 2 * math.prod(batch) * m * n * k
        else:
            continue
        row = got[e["args"]["External id"]]
        assert (row["flops"], row["flops_counted"], row["flops_dtype"]) == (want, False, "bf16")


def test_convolutions_are_the_textbook_formula(wh):
    got = _nodes(wh, "cnn")
    seen = defaultdict(int)
    for e in _ops(CNN):
        a = e["args"]
        conc = a.get("Concrete Inputs")
        if e["name"] in ("aten::conv2d",):  # (input, weight, bias, stride, padding, dilation, groups)
            want = _conv(a["Input Dims"], conc[4], conc[3], conc[5])
        elif e["name"] in ("aten::cudnn_convolution", "aten::convolution_backward"):
            want = _leaf_flops(e)
        else:
            continue
        row = got[a["External id"]]
        assert (row["flops"], row["flops_rule"]) == (want, "conv"), e
        assert row["flops_counted"] is (e["name"] != "aten::conv2d")
        seen[e["name"]] += 1
    assert dict(seen) == {"aten::conv2d": 40, "aten::cudnn_convolution": 20, "aten::convolution_backward": 20}


@pytest.mark.parametrize("run,path", [("fp32", FP32), ("bf16", BF16)])
def test_sdpa_is_4_b_h_sq_sk_d_halved_when_causal(wh, run, path):
    got = _nodes(wh, run)
    n = 0
    for e in _ops(path):
        if e["name"] != "aten::scaled_dot_product_attention":
            continue
        a = e["args"]
        (b, h, sq, d), sk = a["Input Dims"][0], a["Input Dims"][1][2]
        want = 4 * b * h * sq * sk * d // (2 if a["Concrete Inputs"][5] == "True" else 1)
        row = got[a["External id"]]
        assert (row["flops"], row["flops_rule"], row["flops_counted"]) == (want, "sdpa", False)
        n += 1
    assert n == {"fp32": 12, "bf16": 6}[run]


def _raw_step_flops(path: Path) -> tuple[dict[int, int], str]:
    """Step -> FLOPs of the step's innermost ops (an op belongs to the ProfilerStep#N span
    its start lies in, on any thread), and the precision carrying most of them."""
    events = json.load(gzip.open(path))["traceEvents"]
    spans = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in events
             if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    per_step, per_dtype = defaultdict(int), defaultdict(int)
    for e in events:
        if e.get("cat") != "cpu_op" or (f := _leaf_flops(e)) is None:
            continue
        step = next((s for a, b, s in spans if a <= e["ts"] < b), None)
        per_step[step] += f
        t = next(t for t in e["args"]["Input type"] if t in ("float", "c10::BFloat16"))
        per_dtype["fp32" if t == "float" else "bf16"] += f
    return dict(per_step), max(per_dtype, key=per_dtype.get)


@pytest.mark.parametrize("run,path", [("fp32", FP32), ("bf16", BF16), ("cnn", CNN)])
def test_mfu_per_step_is_step_flops_over_device_step_time_times_datasheet_peak(wh, run, path):
    want_flops, dtype = _raw_step_flops(path)
    rows = run_query("mfu", {"run_id": run}, wh).to_pylist()
    steps = {r["step"]: r for r in rows if r["step"] is not None}
    assert set(steps) == {s for s in want_flops if s is not None}
    for step, r in steps.items():
        assert r["flops"] == want_flops[step]
        assert (r["gpu_name"], r["gpu_model"], r["dtype"], r["peak_tflops"]) == (
            "NVIDIA H200", "H200 SXM", dtype, H200_PEAK[dtype])
        want = 100 * want_flops[step] / (r["device_step_ns"] * 1e-9 * H200_PEAK[dtype] * 1e12)
        assert r["mfu_pct"] == pytest.approx(want, abs=0.0005)
    # the whole run: all numbered steps' FLOPs over their summed device time
    total = sum(want_flops[s] for s in steps)
    run_ns = sum(r["device_step_ns"] for r in steps.values())
    assert rows[0]["run_mfu_pct"] == pytest.approx(100 * total / (run_ns * H200_PEAK[dtype] * 1e3), abs=0.0005)


def test_mfu_peak_override_by_param_and_label(wh):
    con = catalog.connect(wh)
    base = run_query("mfu", {"run_id": "fp32"}, wh).to_pylist()
    half = run_query("mfu", {"run_id": "fp32", "peak_tflops": 33.5}, wh).to_pylist()
    tf32 = run_query("mfu", {"run_id": "fp32", "dtype": "tf32"}, wh).to_pylist()
    for b, h, t in zip(base, half, tf32):
        if b["mfu_pct"] is not None:
            assert h["mfu_pct"] == pytest.approx(2 * b["mfu_pct"], abs=0.002)
            assert t["peak_tflops"] == 494.5 and t["mfu_pct"] == pytest.approx(b["mfu_pct"] * 67 / 494.5, abs=0.002)


def test_megengine_flops_are_its_footprint(wh):
    doc = json.loads(MEGENGINE.read_text())
    ops = doc["graph_exec"]["operator"]
    con = catalog.connect(wh)
    got = {n: (f, m, r) for n, f, m, r in con.execute(
        "SELECT node_name, flops, memory_bytes, flops_rule FROM nodes WHERE run_id = 'mge'").fetchall()}
    fp = doc["profiler"]["opr_footprint"]
    assert len(fp) == 234 and len(got) == 240
    for oid, op in ops.items():
        foot = fp.get(oid, {"computation": None, "memory": None})
        rule = "reported" if foot["computation"] is not None else None
        assert got[op["name"]] == (foot["computation"], foot["memory"], rule)


def test_megengine_convolutions_agree_with_the_conv_rule():
    """The conv rule against MegEngine's own FLOPs for its convolutions (NCHW, groups 1)."""
    from tracedb.flops import op_flops

    doc = json.loads(MEGENGINE.read_text())
    n = 0
    for oid, foot in doc["profiler"]["opr_footprint"].items():
        if doc["graph_exec"]["operator"][oid]["type"] != "ConvolutionForward":
            continue
        p = foot["param"]
        conc = {"Concrete Inputs": ["", "", "", json.dumps([p["stride_h"], p["stride_w"]]),
                                    json.dumps([p["pad_h"], p["pad_w"]]),
                                    json.dumps([p["dilate_h"], p["dilate_w"]]), "1"]}
        flops, _, rule = op_flops("aten::conv2d", foot["in_shapes"], ["float32", "float32"], conc)
        assert (flops, rule) == (foot["computation"], "conv")
        n += 1
    assert n == 53


def test_xspace_device_facts_are_the_planes_own(wh):
    """The XSpace plane states the GPU's name and memory bandwidth, which the run keeps for
    the peaks. It holds no per-op FLOPs stat: FLOPs come from the HLO modules, only on
    the device's XLA ops (tests/test_flops_xspace.py), never on a host event."""
    from tracedb.proto import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(XSPACE.read_bytes())
    stats, flop_stats = {}, 0
    for p in space.planes:
        names = {k: v.name for k, v in p.stat_metadata.items()}
        flop_stats += sum(1 for v in names.values() if "flops" in v.lower())
        if p.name == "/device:GPU:0":
            stats = {names[s.metadata_id]: getattr(s, s.WhichOneof("value")) for s in p.stats}
    con = catalog.connect(wh)
    meta = json.loads(con.execute("SELECT metadata FROM runs WHERE run_id = 'jax'").fetchone()[0])
    assert (meta["gpu_name"], meta["gpu_memory_bytes_per_s"]) == (stats["gpu_device_name"], stats["memory_bandwidth"])
    assert meta["gpu_model"] == "H200 SXM"
    host = con.execute("SELECT count(flops) FROM nodes WHERE run_id = 'jax' AND device = 'CPU:0'").fetchone()[0]
    assert flop_stats == 0 and host == 0


def test_unknown_op_types_are_listed(wh):
    """Every op type of the raw trace that has no FLOPs rule is listed, with the kernel time
    the roofline leaves out; the ones with a rule are not."""
    from tracedb import flops
    rows = run_query("flops_unknown_ops", {"run_id": "fp32", "limit": 10_000}, wh).to_pylist()
    listed = {r["op_type"] for r in rows} - {"(no op)"}
    raw = {e["name"] for e in _ops(FP32)}
    assert listed == raw - set(flops.RULES)
    assert "aten::copy_" in listed and "aten::mm" not in listed
    assert sum(r["kernels"] for r in rows) > 0


def test_every_kernels_time_is_under_known_flops_or_listed(wh, tmp_path):
    """MFU leaves nothing out unseen: the kernel time of ops with known FLOPs (op_flops) and
    the time flops_unknown_ops lists (unknown op types and '(no op)': kernels linked to no
    op) add up to the run's whole kernel time. Kineto: the raw trace's `kernel` events;
    XSpace: the kernels table (the JAX MLP's cuBLAS calls run in a command buffer under
    library names, so they link to no XLA op and are the '(no op)' row)."""
    import rawtrace

    def listed(run: str, at: Path) -> int:
        unknown = run_query("flops_unknown_ops", {"run_id": run, "limit": 10_000}, at).to_pylist()
        known = run_query("op_flops", {"run_id": run}, at).to_pylist()
        return sum(r["kernel_ns"] for r in unknown) + sum(r["kernel_ns"] or 0 for r in known)

    with gzip.open(FP32) as f:
        raw = sum(rawtrace.us_ns(e["dur"]) for e in json.load(f)["traceEvents"] if e.get("cat") == "kernel")
    assert listed("fp32", wh) == raw
    shutil.copytree(DATA / "jax_profile_folder", tmp_path / "runs" / "mlp")
    assert ingest([tmp_path / "runs"], tmp_path / "wh").ok
    con = catalog.connect(tmp_path / "wh")
    total, unlinked = con.execute("SELECT sum(duration_ns), count(*) FILTER (WHERE node_seq IS NULL) FROM kernels "
                                  "WHERE kind = 'kernel'").fetchone()
    [run] = con.execute("SELECT run_id FROM runs").fetchone()
    con.close()
    assert listed(run, tmp_path / "wh") == total
    no_op = [r for r in run_query("flops_unknown_ops", {"run_id": run, "limit": 10_000}, tmp_path / "wh").to_pylist()
             if r["op_type"] == "(no op)"]
    assert unlinked > 0 and [r["kernels"] for r in no_op] == [unlinked]


def test_roofline_attributes_op_flops_to_kernels(wh):
    """Per kernel: the FLOPs of the ops that launched it (time-shared among an op's kernels)
    sum to the FLOPs of the ops with kernels; the ceiling is min(peak, intensity x bandwidth)."""
    con = catalog.connect(wh)
    rows = run_query("roofline", {"run_id": "fp32", "limit": 10_000}, wh).to_pylist()
    want = con.execute("""SELECT sum(flops) FROM nodes n WHERE run_id = 'fp32' AND flops IS NOT NULL
                          AND EXISTS (SELECT 1 FROM kernels k WHERE k.run_id = n.run_id AND k.kind = 'kernel'
                                      AND k.source_file = n.source_file AND k.node_seq = n.seq)""").fetchone()[0]
    assert sum(r["flops"] for r in rows) == pytest.approx(want, rel=1e-9)
    for r in rows:
        ceiling = min(67.0, r["flops"] / r["bytes"] * 4800 / 1000)
        assert r["ceiling_tflops"] == pytest.approx(ceiling, abs=0.001)
        assert r["bound"] == ("memory" if r["flops"] / r["bytes"] < 67_000 / 4800 else "compute")


def test_gpu_models_of_trace_names():
    from tracedb.flops import gpu_model

    assert gpu_model("NVIDIA H200") == "H200 SXM"
    assert gpu_model("NVIDIA H100 80GB HBM3") == "H100 SXM"
    assert gpu_model("NVIDIA H100 PCIe") == "H100 PCIe"
    assert gpu_model("NVIDIA A100-PG509-200", 42297524224) == "A100 SXM 40GB"
    assert gpu_model("NVIDIA A100-SXM4-80GB") == "A100 SXM 80GB"
    assert gpu_model("NVIDIA L4") == "L4"
    assert gpu_model("AMD Instinct MI300X") == "MI300X"
    assert gpu_model("AMD Radeon Graphics") is None


def test_every_model_the_code_names_has_datasheet_peaks():
    from tracedb import flops
    from tracedb.resources import sql_dir

    text = (sql_dir() / "metrics" / "gpu_peaks.sql").read_text()
    models = {m for *_, m in flops._MODELS}
    models = {m for m in models if not m.startswith("A100")} | {
        f"A100 {f} {g}" for f in ("SXM", "PCIe") for g in ("40GB", "80GB")}
    for m in models:
        assert f"('{m}', 'fp32'," in text and f"('{m}', 'bf16'," in text, m


def test_migration_fills_old_runs_flops_from_their_stored_columns(tmp_path):
    """Migrations 0009-0012 on the frozen schema-6 lake: the old PyTorch run's nodes get the
    FLOPs its raw trace gives (the rows kept shapes, dtypes and Concrete Inputs), the
    same a fresh ingest gives; other tables' files are untouched (until 0013 rewrites every
    table into files of many runs)."""
    from conftest import data_files

    from tracedb.migrate import migrate_warehouse

    wh = tmp_path / "wh"
    shutil.copytree(DATA / "frozen_warehouse_schema6", wh)
    kernels_before = [p for p in data_files(wh) if p.startswith("kernels/")]
    assert any(m.endswith("_op_flops") for m in migrate_warehouse(wh))
    kernels_after = [p for p in data_files(wh) if p.startswith("kernels/")]
    # untouched by 0009-0012 (kept on disk); the only new ones are 0013's, of many runs (schema 8)
    assert set(kernels_before) <= set(kernels_after)
    assert all("/part-m0013-" in p for p in set(kernels_after) - set(kernels_before))
    con = catalog.connect(wh)
    (source,) = con.execute("SELECT DISTINCT source_file FROM nodes WHERE run_id = 'kineto'").fetchone()
    path = {FP32.name: FP32, BF16.name: BF16}[source]
    got = {c: (op, f, counted) for c, op, f, counted in con.execute(
        "SELECT correlation_id, op_type, flops, flops_counted FROM nodes WHERE run_id = 'kineto'").fetchall()}
    n = 0
    for e in _ops(path):
        want = _leaf_flops(e)
        if want is not None and e["name"] in ("aten::mm", "aten::addmm"):
            assert got[e["args"]["External id"]] == (e["name"], want, True)
            n += 1
    assert n > 0
    step_flops, _ = _raw_step_flops(path)
    assert con.execute("SELECT sum(flops) FROM nodes WHERE run_id = 'kineto' AND flops_counted").fetchone()[0] == \
        sum(step_flops.values())
    # the TF run's MatMuls and MegEngine's footprint, as a fresh ingest gives them
    assert con.execute("SELECT count(flops), count(*) FROM nodes WHERE run_id = 'tf' AND op_type = 'MatMul'"
                       ).fetchone() == (83, 83)
    assert con.execute("SELECT sum(flops), min(flops_rule) FROM nodes WHERE run_id = 'megengine'").fetchone() == (
        sum(f["computation"] or 0 for f in json.loads(MEGENGINE.read_text())["profiler"]["opr_footprint"].values()),
        "reported")


def test_report_gates_mfu_per_step_and_draws_the_roofline(fleet_warehouse):
    """The report's MFU per step: one sample per step, the `mfu` query's; on mem512 (the
    GPU waited for the host: device step time +25%, busy time flat) MFU drops beyond its
    noise, host-bound by default and a gating regression with gate_host; the HTML draws
    both sides' kernels under the H200's roofline."""
    from tracedb.report import Settings, build_report, html
    from tracedb.report import metrics as M

    days = ["day1", "day2", "day3", "day4"]
    rep = build_report(fleet_warehouse, days, ["mem512"])
    mfu = rep.find(M.MFU, M.MFU_DEVICE)
    for run in days + ["mem512"]:
        side = mfu.cand if run == "mem512" else mfu.base
        want = [r["mfu_pct"] for r in run_query("mfu", {"run_id": run}, fleet_warehouse).to_pylist()
                if r["step"] is not None]
        assert side.runs[run] == want and len(want) == 5
    assert mfu.gating and mfu.test.delta < 0 and mfu.status == "host-bound"
    gated = build_report(fleet_warehouse, days, ["mem512"], settings=Settings(gate_host=True))
    assert gated.find(M.MFU, M.MFU_DEVICE).status == "regression"
    assert M.MFU in {m.kind for m in gated.findings}
    page = html.document(rep)
    roof = page[page.index('<svg class="chart roofline"'):]
    roof = roof[:roof.index("</svg>")]
    points = mfu.extra["roofline"]
    assert roof.count('<circle class="kernel base"') == len(points["base"]) > 0
    assert roof.count('<circle class="kernel cand"') == len(points["cand"]) > 0
    assert "ceiling: 4800 GB/s, 989.5 TFLOP/s" in roof


def _tf_raw(scenario_name: str) -> dict[str, tuple[str, list, list]]:
    """node name -> (op, [input names], [output shapes]) from the raw TF text."""
    import re

    import rawtrace

    root = rawtrace.parse_pbtxt(rawtrace.scenario(scenario_name).read_text())
    stats = rawtrace.one(root, "step_stats", root)
    out = {}
    for dev in stats["dev_stats"]:
        if "/stream:" in rawtrace.one(dev, "device"):
            continue
        for ns in dev.get("node_stats", []):
            m = re.search(r"(\S+) = (\w+)\((.*)\)$", rawtrace.one(ns, "timeline_label", ""))
            shapes = [[rawtrace.one(d, "size") for d in rawtrace.one(rawtrace.one(o, "tensor_description", {}), "shape", {})
                       .get("dim", [])] for o in ns.get("output", [])]
            out[rawtrace.one(ns, "node_name")] = (m[2] if m else None,
                                                 [i.strip() for i in m[3].split(",")] if m and m[3] else [], shapes)
    return out


@pytest.mark.parametrize("scenario_name", ["tf_stepstats_gpu_streams", "tf_runmetadata_text"])
def test_tf_matmul_and_conv2d_from_their_producers_shapes(tmp_path, scenario_name):
    """TF nodes keep output shapes only: an input's shape is its producer's output. MatMul:
    2*M*N*K with K the dimension of `a` that is not M (transposed or not); Conv2D and its
    gradients: 2 * N*Hout*Wout*Cout * kh*kw*Cin with the filter [kh, kw, Cin, Cout]."""
    import rawtrace

    raw = _tf_raw(scenario_name)

    def shape(name):
        node, _, k = name.partition(":")
        return raw[node][2][int(k or 0)]

    want = {}
    for name, (op, ins, outs) in raw.items():
        if op == "MatMul":
            (m, n), a = outs[0], shape(ins[0])
            want[name] = 2 * m * n * (a[1] if a[0] == m else a[0])
        elif op == "Conv2D":
            kh, kw, cin, cout = shape(ins[1])
            assert cout in outs[0][1:]
            want[name] = 2 * math.prod(outs[0]) * kh * kw * cin
        elif op == "Conv2DBackpropInput":
            kh, kw, cin, _ = shape(ins[1])
            want[name] = 2 * math.prod(shape(ins[2])) * kh * kw * cin
        elif op == "Conv2DBackpropFilter":
            kh, kw, cin, _ = outs[0]
            want[name] = 2 * math.prod(shape(ins[2])) * kh * kw * cin
    wh = tmp_path / "wh"
    assert ingest([rawtrace.scenario(scenario_name)], wh, run_id="tf").ok
    got = dict(catalog.connect(wh).execute(
        "SELECT node_name, flops FROM nodes WHERE flops IS NOT NULL").fetchall())
    assert got == want
    assert len(want) == {"tf_stepstats_gpu_streams": 83, "tf_runmetadata_text": 23}[scenario_name]
