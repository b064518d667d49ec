"""Memory queries (peak_memory, memory_timeline, largest_tensors) on the seed warehouse,
checked by replaying the raw allocation records in plain Python."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import accumulate

import pytest

import rawtrace
from rawtrace import TF, rows
from conftest import scenario

TF_RM = "tf_runmetadata_text"


def replay(records):
    """[(ts, live bytes after ts)] with the records at one timestamp netted first."""
    net = defaultdict(int)
    for ts, b in records:
        net[ts] += b
    ts = sorted(net)
    return list(zip(ts, accumulate(net[t] for t in ts)))


def by_allocator(run):
    out = defaultdict(list)
    for dev, alloc, ts, b in rawtrace.tf(run).allocations:
        out[(dev, alloc)].append((ts, b))
    return out


@pytest.mark.parametrize("run", [TF, TF_RM])
def test_peak_memory_replays_allocation_records(seed_warehouse, run):
    want = by_allocator(run)
    got = rows("peak_memory", seed_warehouse, run_id=run)
    assert {(r["device"], r["allocator"]) for r in got} == set(want)
    for r in got:
        recs = want[(r["device"], r["allocator"])]
        live = replay(recs)
        peak = max(v for _, v in live)
        assert (r["peak_bytes"], r["dynamic_peak_bytes"], r["chunk_bytes"]) == (peak, peak, None)
        assert r["peak_ts_ns"] == min(t for t, v in live if v == peak)
        assert r["end_bytes"] == live[-1][1] == 0  # every allocation freed within the step
        assert (r["allocs"], r["frees"]) == (sum(b > 0 for _, b in recs), sum(b < 0 for _, b in recs))
        assert r["allocated_bytes"] == sum(b for _, b in recs if b > 0)
    if run == TF:
        gpu = next(r for r in got if r["allocator"] == "GPU_0_bfc")
        assert (gpu["peak_bytes"], gpu["allocs"]) == (66_359_808, 1048)
    else:
        assert [(r["allocator"], r["peak_bytes"]) for r in got] == [("GPU_0_bfc", 829_911_552)]


def test_peak_memory_megengine_chunks_sum(seed_warehouse):
    doc = json.loads(scenario("megengine_graph_profile").read_text())
    chunks = doc["graph_exec"]["mem_chunk"].values()
    [r] = rows("peak_memory", seed_warehouse, run_id="megengine_graph_profile")
    assert (r["chunks"], r["peak_bytes"], r["chunk_bytes"]) == (len(chunks), sum(int(c["size"]) for c in chunks), sum(int(c["size"]) for c in chunks))
    assert (r["chunks"], r["peak_bytes"]) == (104, 102_106_528)
    assert r["dynamic_peak_bytes"] is None and r["peak_ts_ns"] is None


def test_memory_timeline_per_timestamp(seed_warehouse):
    recs = by_allocator(TF)[("GPU:0", "GPU_0_bfc")]
    live = replay(recs)
    got = rows("memory_timeline", seed_warehouse, run_id=TF, device="GPU:0", allocator="GPU_0_bfc")
    assert [(r["ts_ns"], r["live_bytes"]) for r in got] == live
    assert [r["max_live_bytes"] for r in got] == [v for _, v in live]
    assert sum(r["events"] for r in got) == len(recs) == 2096
    assert got[0]["offset_ns"] == 0 and got[-1]["offset_ns"] == live[-1][0] - live[0][0]


def test_memory_timeline_bucketed(seed_warehouse):
    width = 1_000_000
    recs = by_allocator(TF)[("GPU:0", "GPU_0_bfc")]
    live = replay(recs)
    first = live[0][0]
    want = defaultdict(lambda: [0, 0, None, None])
    for ts, b in recs:
        w = want[first + (ts - first) // width * width]
        w[0] += 1
        w[1] += b
    for ts, v in live:
        w = want[first + (ts - first) // width * width]
        w[2] = v if w[2] is None else max(w[2], v)
        w[3] = v  # live is in time order: the last one wins
    got = rows("memory_timeline", seed_warehouse, run_id=TF, allocator="GPU_0_bfc", bucket_ns=width)
    assert {r["ts_ns"]: [r["events"], r["delta_bytes"], r["max_live_bytes"], r["live_bytes"]] for r in got} == dict(want)
    assert all(r["offset_ns"] % width == 0 for r in got)
    assert max(r["max_live_bytes"] for r in got) == 66_359_808


# TF enum -> the warehouse's dtype names, for the dtypes among these tensors.
DTYPES = {"DT_FLOAT": "float32", "DT_INT32": "int32", "DT_INT64": "int64", "DT_BOOL": "bool", "DT_HALF": "float16"}


def tensor_bytes(t):
    return t["allocated_bytes"] if t["allocated_bytes"] is not None else t["requested_bytes"]


@pytest.mark.parametrize("run", [TF, TF_RM])
def test_largest_tensors(seed_warehouse, run):
    raw = [t for t in rawtrace.tf(run).tensors if tensor_bytes(t) is not None]
    raw.sort(key=tensor_bytes, reverse=True)
    got = rows("largest_tensors", seed_warehouse, run_id=run, limit=25)
    assert [r["bytes"] for r in got] == [tensor_bytes(t) for t in raw[:25]]
    index = {(t["node_name"], t["slot"]): t for t in raw}
    for r in got:
        t = index[(r["node_name"], r["slot"])]
        assert (r["dtype"], r["shape"], r["allocator"], r["requested_bytes"]) == (
            DTYPES[t["dtype"]], t["shape"], t["allocator"], t["requested_bytes"])
    assert len(rows("largest_tensors", seed_warehouse, run_id=run, limit=100_000)) == len(raw)
