"""Kineto ops recorded without shapes take their FLOPs from the execution trace (issue 26).

Oracles from the raw files (json / gzip only): an ET node's `input_shapes` give its
matrix op's 2*M*N*K (addmm: mat1 [M, K] @ mat2 [K, N]); the Kineto op it joins is the one
with the same record-function id (the ingest's `rf_id`). On the PyTorch 2.11 pair the
Kineto trace's own `Input Dims` are withheld from a copy: the FLOPs from the ET must equal
those 2*M*N*K of the original Kineto trace, op by op (by External id), and the mfu and
op_flops queries must count them the same.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from tracedb import catalog
from tracedb.ingest import ingest
from tracedb.query import run_query

DATA = Path(__file__).parent / "data"
LINEAR = DATA / "chakra_linear_param"  # an old Kineto trace without Input Dims, and its ET
MLP = DATA / "chakra_mlp_h100"  # PyTorch 2.11: both files with shapes and record-function ids
WITHHELD = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def _mnk(name: str, shapes: list) -> int | None:
    if name == "aten::mm":
        (m, k), (_, n) = shapes[0], shapes[1]
    elif name == "aten::addmm":
        (m, k), (_, n) = shapes[1], shapes[2]
    else:
        return None
    return 2 * m * n * k


def _et_nodes(path: Path) -> dict[int, dict]:
    """rf_id -> {name, input_shapes} of the raw ET (both schema generations)."""
    out = {}
    for n in json.load(gzip.open(path))["nodes"]:
        attrs = {a["name"]: a["value"] for a in n.get("attrs", [])}
        rf = n.get("rf_id", attrs.get("rf_id"))
        shapes = n["inputs"]["shapes"] if isinstance(n.get("inputs"), dict) else n.get("input_shapes")
        if rf is not None:
            out[rf] = {"name": n["name"], "shapes": shapes}
    return out


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("et_runs")
    (runs / "linear").mkdir()
    for f in LINEAR.iterdir():
        shutil.copy(f, runs / "linear" / f.name)
    (runs / "mlp").mkdir()
    shutil.copy(MLP / "mlp_h100_et.json.gz", runs / "mlp")
    doc = json.load(gzip.open(MLP / "mlp_h100_kineto.json.gz"))
    for e in doc["traceEvents"]:
        for key in WITHHELD:
            e.get("args", {}).pop(key, None)
    with gzip.open(runs / "mlp" / "mlp_h100_kineto.json.gz", "wt") as f:
        json.dump(doc, f)
    out = tmp_path_factory.mktemp("et_wh") / "wh"
    summary = ingest([runs], out)
    assert summary.ok, summary.errors
    return out


def _kineto_ops(wh: Path, run: str) -> list[dict]:
    con = catalog.connect(wh)
    cur = con.execute("SELECT op_type, rf_id, correlation_id, flops, flops_rule, flops_counted, params FROM nodes "
                      "WHERE run_id = ? AND source_format = 'kineto' AND op_type IN ('aten::mm', 'aten::addmm')", [run])
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def test_old_kineto_trace_without_shapes_gets_the_et_shapes(wh):
    raw = [e for e in json.load(gzip.open(LINEAR / "linear_kineto.json.gz"))["traceEvents"] if e.get("cat") == "cpu_op"]
    assert not any("Input Dims" in e.get("args", {}) for e in raw)  # the Kineto trace alone: no FLOPs
    et = _et_nodes(LINEAR / "linear_et.json.gz")
    rows = _kineto_ops(wh, "linear")
    linked = [r for r in rows if r["rf_id"] is not None]
    assert len(linked) == sum(1 for n in et.values() if n["name"] in ("aten::mm", "aten::addmm")) == 62
    for r in linked:
        node = et[r["rf_id"]]
        assert node["name"] == r["op_type"]
        assert (r["flops"], r["flops_rule"], r["flops_counted"]) == (_mnk(node["name"], node["shapes"]), "matmul", True)
        assert json.loads(r["params"])["shapes_from"] == "execution_trace"
    assert all(r["flops"] is None for r in rows if r["rf_id"] is None)  # ops outside the ET's step: unknown


def test_withheld_shapes_come_back_from_the_et_op_by_op(wh):
    raw = {e["args"]["External id"]: e for e in json.load(gzip.open(MLP / "mlp_h100_kineto.json.gz"))["traceEvents"]
           if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")}
    rows = _kineto_ops(wh, "mlp")
    assert len(rows) == len(raw) == 16
    for r in rows:
        e = raw[r["correlation_id"]]
        assert r["flops"] == _mnk(e["name"], e["args"]["Input Dims"]), r
        assert r["flops_counted"] is True


def test_mfu_and_op_flops_count_them(wh):
    raw = [e for e in json.load(gzip.open(MLP / "mlp_h100_kineto.json.gz"))["traceEvents"]
           if e.get("cat") == "cpu_op" and e["name"] in ("aten::mm", "aten::addmm")]
    want = sum(_mnk(e["name"], e["args"]["Input Dims"]) for e in raw)
    ops = run_query("op_flops", {"run_id": "mlp", "limit": 100}, wh).to_pylist()
    assert sum(r["counted_flops"] for r in ops) == want
    mfu = run_query("mfu", {"run_id": "mlp"}, wh).to_pylist()
    assert sum(r["flops"] for r in mfu) == want
