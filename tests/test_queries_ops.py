"""Op queries (top_ops, op_type_time, op_kernel_map) on the seed warehouse, checked against
the raw trace files (tests/rawtrace.py parses them without tracedb)."""

from __future__ import annotations

from collections import defaultdict

import pytest

import rawtrace
from rawtrace import KINETO, TF, raw, rows


@pytest.mark.parametrize("run", [TF, KINETO])
def test_top_ops_matches_raw(seed_warehouse, run):
    want = defaultdict(list)
    for n in raw(run).nodes:
        want[(n.device, n.node, n.op_type)].append(n.dur)
    got = rows("top_ops", seed_warehouse, run_id=run, limit=100_000)
    assert len(got) == len(want)
    per_device = defaultdict(int)
    for (dev, _, _), durs in want.items():
        per_device[dev] += sum(durs)
    for r in got:
        durs = want[(r["device"], r["node_name"], r["op_type"])]
        assert (r["executions"], r["total_ns"], r["min_ns"], r["max_ns"]) == (len(durs), sum(durs), min(durs), max(durs))
        assert r["time_pct"] == pytest.approx(100 * sum(durs) / per_device[r["device"]], abs=0.005)
    assert [r["total_ns"] for r in got] == sorted((r["total_ns"] for r in got), reverse=True)
    assert sum(r["executions"] for r in got) == (577 if run == TF else 7245)


def test_top_ops_limit_and_untimed_runs(seed_warehouse):
    assert len(rows("top_ops", seed_warehouse, run_id=KINETO, limit=5)) == 5
    assert rows("top_ops", seed_warehouse, run_id="node_name_list") == []  # no timing


@pytest.mark.parametrize("run", [TF, KINETO])
def test_op_type_time_matches_raw(seed_warehouse, run):
    want = defaultdict(lambda: [0, 0, set()])
    for n in raw(run).nodes:
        w = want[(n.device, n.op_type)]
        w[0] += 1
        w[1] += n.dur
        w[2].add(n.node)
    got = rows("op_type_time", seed_warehouse, run_id=run)
    assert {(r["device"], r["op_type"]): [r["executions"], r["total_ns"], r["nodes"]] for r in got} == {
        k: [c, t, len(names)] for k, (c, t, names) in want.items()}
    for dev in {r["device"] for r in got}:
        assert sum(r["time_pct"] for r in got if r["device"] == dev) == pytest.approx(100, abs=0.5)


def test_op_type_time_tf_matmul(seed_warehouse):
    got = {(r["device"], r["op_type"]): r for r in rows("op_type_time", seed_warehouse, run_id=TF)}
    mm = [n for n in rawtrace.tf().nodes if n.op_type == "MatMul" and n.device == "GPU:0"]
    r = got[("GPU:0", "MatMul")]
    assert (r["executions"], r["total_ns"]) == (len(mm), sum(n.dur for n in mm))


@pytest.mark.parametrize("run", [TF, KINETO])
def test_op_kernel_map_matches_raw(seed_warehouse, run):
    trace = raw(run)
    op_type = defaultdict(set)
    for n in trace.nodes:
        op_type[n.node].add(n.op_type)
    want = defaultdict(lambda: [0, 0])
    for k in trace.kernels:
        w = want[(k.node, k.kind, k.name)]
        w[0] += 1
        w[1] += k.dur
    got = rows("op_kernel_map", seed_warehouse, run_id=run, limit=100_000)
    assert {(r["node_name"], r["kind"], r["kernel_name"]): [r["launches"], r["gpu_ns"]] for r in got} == {
        k: v for k, v in want.items()}
    op_total = defaultdict(int)
    for (node, _, _), (_, t) in want.items():
        op_total[node] += t
    for r in got:
        assert r["op_gpu_ns"] == op_total[r["node_name"]]
        types = op_type.get(r["node_name"])
        assert r["op_type"] == (min(t for t in types if t is not None) if types else None)
    assert sum(r["launches"] for r in got) == (755 if run == TF else 1202)
    if run == KINETO:
        # 260 GPU activities (219 kernels, 12 copies, 29 sets) have no launching op in the trace.
        assert sum(r["launches"] for r in got if r["node_name"] is None) == 260


def test_op_kernel_map_one_op(seed_warehouse):
    got = rows("op_kernel_map", seed_warehouse, run_id=KINETO, node_name="aten::mm")
    want = [k for k in rawtrace.kineto_seed().kernels if k.node == "aten::mm"]
    assert {r["node_name"] for r in got} == {"aten::mm"}
    assert sum(r["launches"] for r in got) == len(want) > 0
    assert sum(r["gpu_ns"] for r in got) == sum(k.dur for k in want)
