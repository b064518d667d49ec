"""XLA ops' FLOPs from XSpace profiles (issue 26), against an oracle of the raw file.

The oracle decodes the `Hlo Proto` stats of `/host:metadata` with protobuf's own parser:
the few messages of XLA's `hlo.proto` / `xla_data.proto` that FLOPs need are declared
below as a FileDescriptorProto (same field numbers, unknown fields skipped), compiled by
`descriptor_pool` and `message_factory`. From them, by hand: a dot is 2*B*M*N*K (B: batch
dims, K: contracting dims, M and N: the rest of each side); a convolution is the textbook
2 * N * Cout * prod(out spatial) * Cin/groups * prod(kernel spatial), N, Cin and the spatial
sizes read from the forward convolution's input, output and kernel per the dimension
numbers (a cuDNN backward call computes the forward's shapes from its own operands). The
device plane's kernels are matched to instructions by their `hlo_op` stat, or inside a
command buffer by their name (the fusion's name with '.' and '-' written '_').
"""

from __future__ import annotations

import json
import math
import shutil
from collections import Counter
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tracedb import catalog
from tracedb.ingest import ingest
from tracedb.proto import xplane_pb2
from tracedb.query import run_query

DATA = Path(__file__).parent / "data"
H200 = DATA / "xspace_jax_h200" / "jax_h200.xplane.pb"  # bf16 matmuls in a command buffer
CONVNET = next((DATA / "jax_dev_fleet" / "night1").rglob("*.xplane.pb"))  # cuDNN convs and GEMM fusions, H100


def _hlo_classes():
    f = descriptor_pb2.FileDescriptorProto(name="hlo_oracle.proto", package="oracle", syntax="proto3")
    L, R = descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    T = descriptor_pb2.FieldDescriptorProto
    messages = {
        "Shape": [("element_type", 2, T.TYPE_INT32, L, None), ("dimensions", 3, T.TYPE_INT64, R, None),
                  ("tuple_shapes", 4, T.TYPE_MESSAGE, R, "Shape")],
        "Dot": [("lhs_contracting", 1, T.TYPE_INT64, R, None), ("rhs_contracting", 2, T.TYPE_INT64, R, None),
                ("lhs_batch", 3, T.TYPE_INT64, R, None), ("rhs_batch", 4, T.TYPE_INT64, R, None)],
        "Conv": [("kernel_input_feature", 3, T.TYPE_INT64, L, None), ("kernel_output_feature", 4, T.TYPE_INT64, L, None),
                 ("kernel_spatial", 6, T.TYPE_INT64, R, None), ("input_batch", 7, T.TYPE_INT64, L, None),
                 ("input_feature", 8, T.TYPE_INT64, L, None), ("input_spatial", 11, T.TYPE_INT64, R, None),
                 ("output_spatial", 12, T.TYPE_INT64, R, None)],
        "Instruction": [("name", 1, T.TYPE_STRING, L, None), ("opcode", 2, T.TYPE_STRING, L, None),
                        ("shape", 3, T.TYPE_MESSAGE, L, "Shape"), ("conv", 16, T.TYPE_MESSAGE, L, "Conv"),
                        ("target", 28, T.TYPE_STRING, L, None), ("dot", 30, T.TYPE_MESSAGE, L, "Dot"),
                        ("id", 35, T.TYPE_INT64, L, None), ("operand_ids", 36, T.TYPE_INT64, R, None),
                        ("called", 38, T.TYPE_INT64, R, None), ("feature_group_count", 50, T.TYPE_INT64, L, None)],
        "Computation": [("name", 1, T.TYPE_STRING, L, None), ("instructions", 2, T.TYPE_MESSAGE, R, "Instruction"),
                        ("id", 5, T.TYPE_INT64, L, None)],
        "Module": [("name", 1, T.TYPE_STRING, L, None), ("computations", 3, T.TYPE_MESSAGE, R, "Computation")],
        "HloProto": [("hlo_module", 1, T.TYPE_MESSAGE, L, "Module")],
    }
    for name, fields in messages.items():
        m = f.message_type.add(name=name)
        for fname, num, typ, label, ref in fields:
            fd = m.field.add(name=fname, number=num, type=typ, label=label)
            if ref:
                fd.type_name = f".oracle.{ref}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("oracle.HloProto"))


HloProto = _hlo_classes()


def _dot(ins, shapes) -> int:
    lhs, rhs = shapes[ins.operand_ids[0]], shapes[ins.operand_ids[1]]
    d = ins.dot
    b = math.prod(lhs[i] for i in d.lhs_batch)
    k = math.prod(lhs[i] for i in d.lhs_contracting)
    m = math.prod(x for i, x in enumerate(lhs) if i not in d.lhs_batch and i not in d.lhs_contracting)
    n = math.prod(x for i, x in enumerate(rhs) if i not in d.rhs_batch and i not in d.rhs_contracting)
    return 2 * b * m * n * k


def _cudnn_conv(ins, shapes) -> int:
    a, b = shapes[ins.operand_ids[0]], shapes[ins.operand_ids[1]]
    res = list(ins.shape.tuple_shapes[0].dimensions)
    inp, kernel, out = {"__cudnn$convForward": (a, b, res), "__cudnn$convBackwardInput": (res, b, a),
                        "__cudnn$convBackwardFilter": (a, res, b)}[ins.target]
    c = ins.conv
    n, cin_g = inp[c.input_batch], kernel[c.kernel_input_feature]
    cout = kernel[c.kernel_output_feature]
    return 2 * n * cout * math.prod(out[i] for i in c.output_spatial) * cin_g * math.prod(kernel[i] for i in c.kernel_spatial)


def _value(stat):
    return getattr(stat, stat.WhichOneof("value"))


def _programs(path: Path) -> dict[int, dict]:
    """program id -> {launched instruction name: FLOPs (0: none)} from the raw `Hlo Proto` stats."""
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    plane = next(p for p in space.planes if p.name == "/host:metadata")
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    out = {}
    for md in plane.event_metadata.values():
        stats = {names[s.metadata_id]: s for s in md.stats}
        mod = HloProto.FromString(stats["Hlo Proto"].bytes_value).hlo_module
        shapes = {i.id: list(i.shape.dimensions) for c in mod.computations for i in c.instructions}
        comps = {c.id: c for c in mod.computations}

        def flops(ins) -> int:
            if ins.opcode == "dot":
                return _dot(ins, shapes)
            if ins.opcode == "custom-call" and ins.target.startswith("__cudnn$conv"):
                return _cudnn_conv(ins, shapes)
            if ins.opcode == "fusion":
                return sum(flops(i) for c in ins.called for i in comps[c].instructions)
            return 0
        out[_value(stats["program_id"])] = {i.name: flops(i) for c in mod.computations for i in c.instructions}
    return out


def _executions(path: Path) -> list[tuple[str, int]]:
    """(instruction, FLOPs) of each op execution on the GPU plane: a kernel inside a command
    buffer is one; a thunk's kernels share their `scope_range_id`."""
    programs = _programs(path)
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:GPU:0")
    names = {k: m.name for k, m in plane.stat_metadata.items()}
    seen, out = set(), []
    for line in plane.lines:
        for ev in line.events:
            md = plane.event_metadata[ev.metadata_id]
            st = {names[s.metadata_id]: s for s in list(md.stats) + list(ev.stats)}
            if "program_id" not in st:
                continue
            prog = programs[_value(st["program_id"])]
            op = names[st["hlo_op"].ref_value]
            if op not in prog:  # a command buffer: the kernel's own name
                op = next(i for i in prog if i.replace(".", "_").replace("-", "_") == (md.display_name or md.name))
                out.append((op, prog[op]))
            elif (op, _value(st["scope_range_id"])) not in seen:
                seen.add((op, _value(st["scope_range_id"])))
                out.append((op, prog[op]))
    return out


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("xla_runs")
    for name, src in (("h200", H200), ("convnet", CONVNET)):
        (runs / name).mkdir()
        shutil.copy(src, runs / name / src.name)
    out = tmp_path_factory.mktemp("xla_wh") / "wh"
    summary = ingest([runs], out)
    assert summary.ok, summary.errors
    return out


def _device_ops(wh: Path, run: str) -> list[dict]:
    con = catalog.connect(wh)
    cur = con.execute("SELECT node_name, op_type, flops, memory_bytes, flops_rule, flops_dtype, flops_counted, step, seq "
                      "FROM nodes WHERE run_id = ? AND device = 'GPU:0' ORDER BY seq", [run])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def test_h200_matmuls_are_2mnk_of_their_hlo_dots(wh):
    want = _executions(H200)
    got = _device_ops(wh, "h200")
    assert len(got) == len(want) == 30
    for row, (name, flops) in zip(got, want):
        assert row["flops"] == (flops or None), row
    gemms = [r for r in got if r["flops"]]
    assert len(gemms) == 20 and {r["flops"] for r in gemms} == {2 * 4096**3}
    assert {(r["flops_rule"], r["flops_dtype"], r["flops_counted"]) for r in gemms} == {("matmul", "bf16", True)}
    # bytes: two bf16 4096x4096 operands read, the bf16 result written
    assert {r["memory_bytes"] for r in gemms} == {3 * 4096 * 4096 * 2}


def test_convnet_convolutions_and_gemms_per_execution(wh):
    want = _executions(CONVNET)
    got = _device_ops(wh, "convnet")
    assert [(r["node_name"], r["flops"] or 0) for r in got] == want
    rules = Counter((r["op_type"], r["flops_rule"]) for r in got if r["flops"])
    assert rules == {("__cudnn$convForward", "conv"): 8, ("__cudnn$convBackwardFilter", "conv"): 8,
                     ("__cudnn$convBackwardInput", "conv"): 4, ("fusion", "matmul"): 12}
    assert all(r["flops_dtype"] == "fp32" for r in got if r["flops"])


def test_mfu_and_op_flops_count_the_xla_ops(wh):
    """mfu: each marked step's FLOPs are its XLA ops' (the oracle's executions, 4 steps of
    the same program); op_flops: per op type the same totals, with the kernels' time."""
    want = _executions(CONVNET)
    per_step = sum(f for _, f in want) // 4
    rows = run_query("mfu", {"run_id": "convnet"}, wh).to_pylist()
    steps = [r for r in rows if r["step"] is not None]
    assert len(steps) == 4 and {r["flops"] for r in steps} == {per_step}
    assert {r["gpu_model"] for r in rows} == {"H100 SXM"} and {r["dtype"] for r in rows} == {"fp32"}
    for r in steps:
        assert r["mfu_pct"] == pytest.approx(100 * per_step / (r["device_step_ns"] * r["peak_tflops"] * 1000), abs=1e-3)
    ops = {r["op_type"]: r for r in run_query("op_flops", {"run_id": "convnet", "limit": 100}, wh).to_pylist()}
    conv = sum(f for n, f in want if n.startswith("cudnn-conv"))
    assert sum(r["flops"] for k, r in ops.items() if k.startswith("__cudnn")) == conv
    assert ops["fusion"]["flops"] == sum(f for n, f in want if not n.startswith("cudnn-conv"))
    assert all(r["kernel_ns"] > 0 and r["achieved_tflops"] > 0 for r in ops.values())
    unknown = {r["op_type"] for r in run_query("flops_unknown_ops", {"run_id": "convnet", "limit": 100}, wh).to_pylist()}
    assert "fusion" in unknown  # the elementwise / reduce fusions: no FLOPs, listed with their kernel time


def test_the_planes_own_flops_stats_win(tmp_path):
    """A device plane whose op carries XProf's `flops` / `bytes_accessed` stats: those are the
    op's figures (rule `reported`), not the HLO module's."""
    space = xplane_pb2.XSpace.FromString(H200.read_bytes())
    plane = next(p for p in space.planes if p.name == "/device:GPU:0")
    ids = {}
    for name in ("flops", "bytes_accessed"):
        ids[name] = max(plane.stat_metadata) + 1
        plane.stat_metadata[ids[name]].id = ids[name]
        plane.stat_metadata[ids[name]].name = name
    md = next(m for m in plane.event_metadata.values() if m.name == "gemm_fusion_dot_general_4")
    md.stats.add(metadata_id=ids["flops"], uint64_value=123_456_789)
    md.stats.add(metadata_id=ids["bytes_accessed"], uint64_value=4_242)
    run = tmp_path / "runs" / "own"
    run.mkdir(parents=True)
    (run / "own.xplane.pb").write_bytes(space.SerializeToString())
    summary = ingest([tmp_path / "runs"], tmp_path / "wh")
    assert summary.ok, summary.errors
    got = _device_ops(tmp_path / "wh", "own")
    own = [r for r in got if r["node_name"] == "gemm_fusion_dot_general.4"]
    assert len(own) == 5 and {(r["flops"], r["memory_bytes"], r["flops_rule"]) for r in own} == {
        (123_456_789, 4_242, "reported")}
    assert {r["flops"] for r in got if r["node_name"] == "gemm_fusion_dot_general.5"} == {2 * 4096**3}


def test_kernels_link_to_their_op_rows(wh):
    con = catalog.connect(wh)
    unlinked, kinds = con.execute(
        "SELECT count(*) FILTER (WHERE k.node_seq IS NULL), count(DISTINCT n.device) FROM kernels k "
        "LEFT JOIN nodes n ON n.run_id = k.run_id AND n.source_file = k.source_file AND n.seq = k.node_seq "
        "WHERE k.run_id = 'h200'").fetchone()
    assert (unlinked, kinds) == (0, 1)
    params = json.loads(con.execute("SELECT params FROM nodes WHERE run_id = 'convnet' AND device = 'GPU:0' "
                                    "AND node_name = 'cudnn-conv.2' "
                                    "LIMIT 1").fetchone()[0])
    assert params["hlo_module"] == "jit_step" and params["kernels"] == 3  # two cuDNN converts and the conv
