"""Canned queries megengine_top_operators, megengine_op_types and graph_diff, on a real
warehouse built with tracedb.ingest from the seed traces.

Expected numbers come from plain `json` on the MegEngine seed (per operator
round(end*1e9) - round(start*1e9) over profiler.device, FLOPs/memory from opr_footprint),
not from the reader.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tracedb.errors import TracedbError
from tracedb.ingest import ingest
from tracedb.query import run_query

DATA = Path(__file__).parent / "data"
MGE = DATA / "megengine_graph_profile" / "004_825e28a4f520ddc2.txt"
DUMP = DATA / "node_shape_dump" / "002_11cf062b29f34b60.txt"
LIST = DATA / "node_name_list" / "003_5bf2854c930b1b8f.txt"

ADDED = "conv6/Conv2D, (128x256x13x13), (3x3x256x256), (128x256x13x13), GPU, 0"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("mge_queries")
    wh = tmp / "wh"
    # Run b: the dump with conv1/biases dropped, conv6/Conv2D added and pool5's output changed.
    lines = DUMP.read_text().splitlines()
    assert sum(ln.startswith("conv1/biases,") for ln in lines) == 1
    assert sum(ln.startswith("pool5, ") for ln in lines) == 1
    changed = []
    for ln in lines:
        if ln.startswith("conv1/biases,"):
            continue
        if ln.startswith("pool5, "):
            assert ln == "pool5, (128x256x13x13), (128x256x6x6), GPU, 0"
            ln = "pool5, (128x256x13x13), (128x256x7x7), GPU, 0"
        changed.append(ln)
    changed.append(ADDED)
    dump_b = tmp / "dump_b.bin"  # meaningless suffix: detected from content
    dump_b.write_text("\n".join(changed) + "\n")
    for path, run in ((MGE, "mge"), (DUMP, "dump_a"), (dump_b, "dump_b"), (LIST, "names")):
        summary = ingest([path], wh, run_id=run)
        assert summary.ok, summary.errors
    return wh


def test_top_operators(warehouse):
    t = run_query("megengine_top_operators", {"limit": 3}, warehouse).to_pylist()
    assert [(r["node_name"], r["device_ns"]) for r in t] == [
        ("conv(FUSE_ADD_RELU[800],const{512,512,3,3}[459])[802]", 580_597),
        ("conv(FUSE_ADD_RELU[817],const{512,512,3,3}[486])[819]", 578_567),
        ("conv(FUSE_ADD_RELU[780],const{512,512,3,3}[425])[782]", 572_403),
    ]
    top = t[0]
    assert top["op_type"] == "ConvolutionForward" and top["device"] == "GPU:0" and top["run_id"] == "mge"
    assert top["flops"] == 2_312_110_080
    assert top["gflops_per_s"] == pytest.approx(2_312_110_080 / 580_597, abs=0.01)
    assert top["run_time_pct"] == pytest.approx(100 * 580_597 / 22_430_132, abs=0.01)
    everything = run_query("megengine_top_operators", {"limit": 1000, "run_id": "mge"}, warehouse)
    assert everything.num_rows == 234
    assert run_query("megengine_top_operators", {"run_id": "dump_a"}, warehouse).num_rows == 0


def test_op_types_by_time(warehouse):
    t = run_query("megengine_op_types", {}, warehouse).to_pylist()
    assert len(t) == 9
    conv, elem = t[0], t[1]
    assert (conv["op_type"], conv["executions"], conv["total_ns"], conv["max_ns"]) == (
        "ConvolutionForward", 53, 15_487_374, 580_597)
    assert (elem["op_type"], elem["executions"], elem["total_ns"]) == ("Elemwise", 69, 6_236_200)
    assert round(conv["total_ns"] / 1e6, 3) == 15.487 and round(elem["total_ns"] / 1e6, 3) == 6.236
    assert conv["mean_ns"] == pytest.approx(15_487_374 / 53, abs=0.1)
    assert conv["total_flops"] == 81_742_725_120 and conv["total_memory_bytes"] == 964_875_008
    assert conv["gflops_per_s"] == pytest.approx(81_742_725_120 / 15_487_374, abs=0.01)
    assert conv["gb_per_s"] == pytest.approx(964_875_008 / 15_487_374, abs=0.01)
    assert sum(r["total_ns"] for r in t) == 22_430_132


def test_op_types_order_by(warehouse):
    by_flops = run_query("megengine_op_types", {"order_by": "flops"}, warehouse).column("op_type").to_pylist()
    assert by_flops[:3] == ["ConvolutionForward", "Elemwise", "MatrixMul"]
    by_memory = run_query("megengine_op_types", {"order_by": "memory", "limit": 3}, warehouse)
    assert by_memory.column("op_type").to_pylist() == ["Elemwise", "ConvolutionForward", "ImmutableTensor"]
    assert by_memory.column("total_memory_bytes").to_pylist()[0] == 1_431_434_480
    with pytest.raises(TracedbError, match="order_by must be time, flops or memory"):
        run_query("megengine_op_types", {"order_by": "name; DROP VIEW nodes"}, warehouse)


def test_graph_diff(warehouse):
    t = run_query("graph_diff", {"run_a": "dump_a", "run_b": "dump_b"}, warehouse).to_pylist()
    assert [(r["change"], r["node_name"]) for r in t] == [
        ("added", "conv6/Conv2D"),
        ("removed", "conv1/biases"),
        ("shape_changed", "pool5"),
    ]
    added, removed, changed = t
    assert added["output_shapes_b"] == [[128, 256, 13, 13]] and added["device_a"] is None
    assert removed["output_shapes_a"] == [[64, 1]] and removed["output_shapes_b"] is None
    assert changed["output_shapes_a"] == [[128, 256, 6, 6]] and changed["output_shapes_b"] == [[128, 256, 7, 7]]
    # Same run on both sides: no differences; shapes unknown on both sides: not a change.
    assert run_query("graph_diff", {"run_a": "dump_a", "run_b": "dump_a"}, warehouse).num_rows == 0
    assert run_query("graph_diff", {"run_a": "names", "run_b": "names"}, warehouse).num_rows == 0
    with pytest.raises(TracedbError, match="run_b"):
        run_query("graph_diff", {"run_a": "dump_a"}, warehouse)


def _op_types_from_the_raw_profile() -> dict[str, tuple]:
    """megengine_op_types worked out with plain `json`: per operator type, the executions
    over profiler.device, their ns (round(end*1e9) - round(start*1e9)), the longest, and the
    operators' FLOPs and bytes from profiler.opr_footprint (None where no operator has one)."""
    import json

    doc = json.loads(MGE.read_text())
    ops, prof = doc["graph_exec"]["operator"], doc["profiler"]
    out: dict[str, list] = {}
    for op_id, devices in prof["device"].items():
        for t in devices.values():
            ns = round(t["end"] * 1e9) - round(t["start"] * 1e9)
            foot = prof["opr_footprint"].get(op_id, {})
            a = out.setdefault(ops[op_id]["type"], [0, 0, 0, None, None])
            a[0], a[1], a[2] = a[0] + 1, a[1] + ns, max(a[2], ns)
            for i, key in ((3, "computation"), (4, "memory")):
                if foot.get(key) is not None:
                    a[i] = (a[i] or 0) + foot[key]
    return {k: tuple(v) for k, v in out.items()}


def test_op_types_equal_the_raw_profile(warehouse):
    """Every row, not only the top two: an oracle from the raw file beside the constants."""
    want = _op_types_from_the_raw_profile()
    t = run_query("megengine_op_types", {"limit": 1000, "run_id": "mge"}, warehouse).to_pylist()
    got = {r["op_type"]: (r["executions"], r["total_ns"], r["max_ns"], r["total_flops"], r["total_memory_bytes"])
           for r in t}
    assert got == want
    assert [r["op_type"] for r in t] == sorted(want, key=lambda k: -want[k][1])  # by time, the default
