"""Across-run queries (compare_runs, fleet_trend) and collectives, on a warehouse of real
Kineto traces and edited copies of them whose expected differences are known exactly."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from collections import defaultdict
from decimal import Decimal

import pytest

import rawtrace
from rawtrace import rows
from conftest import scenario
from tracedb.ingest import ingest

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


def dump(doc: dict, path) -> None:
    """JSON with the Decimal numbers written back digit for digit."""
    text = json.dumps(doc, default=lambda d: f"@@{d}@@")
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write(re.sub(r'"@@([-0-9.Ee+]+)@@"', r"\1", text))


def kernel_names(doc):
    counts = defaultdict(int)
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            counts[e["name"]] += 1
    return sorted(counts, key=lambda n: (-counts[n], n)), counts


def edit_candidate(doc):
    """Drop every fmha kernel (vanished), every other instance of the most frequent kernel
    (changed), and rename one more kernel (vanished + new)."""
    order, _ = kernel_names(doc)
    gone = next(n for n in order if n.startswith("fmha"))
    halved, renamed = order[0], order[2]
    seen = 0
    events = []
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            if e["name"] == gone:
                continue
            if e["name"] == halved:
                seen += 1
                if seen % 2 == 0:
                    continue
            if e["name"] == renamed:
                e = {**e, "name": renamed + " [v2]"}
        events.append(e)
    doc["traceEvents"] = events
    return doc


def edit_nccl(doc):
    """Turn the third most frequent kernel into an all-reduce on stream 20, started half its
    duration earlier, so that it overlaps the compute kernel before it on stream 7."""
    order, _ = kernel_names(doc)
    target = order[3]
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"] == target:
            e["name"] = NCCL
            e["tid"] = 20
            e["args"]["stream"] = 20
            e["ts"] = e["ts"] - (e["dur"] / 2).quantize(Decimal("0.001"))
    return doc


@pytest.fixture(scope="module")
def variants(tmp_path_factory):
    root = tmp_path_factory.mktemp("variants")
    runs = root / "runs"
    docs = {
        "a_base": rawtrace.load_kineto_json(),
        "b_cand": edit_candidate(rawtrace.load_kineto_json()),
        "c_nccl": edit_nccl(rawtrace.load_kineto_json()),
    }
    started = {"a_base": "2026-01-03T00:00:00+00:00", "b_cand": "2026-01-01T00:00:00+00:00",
               "c_nccl": "2026-01-02T00:00:00+00:00"}
    for run, doc in docs.items():
        (runs / run).mkdir(parents=True)
        dump(doc, runs / run / "trace.json.gz")
        model = "bert" if run == "c_nccl" else "resnet"
        (runs / run / "run.json").write_text(json.dumps({"model": model, "started_at": started[run]}))
    (runs / "d_tf").mkdir()  # no run.json: no started_at, sorts last
    shutil.copy(scenario("tf_stepstats_gpu_streams"), runs / "d_tf" / "trace.txt")
    wh = root / "wh"
    summary = ingest([runs], wh)
    assert summary.ok, summary.errors
    traces = {run: rawtrace.kineto(doc) for run, doc in docs.items()}
    traces["d_tf"] = rawtrace.tf()
    return wh, traces


def per_kernel(trace):
    out = defaultdict(lambda: [0, 0])
    for k in trace.kernels:
        out[(k.kind, k.name)][0] += 1
        out[(k.kind, k.name)][1] += k.dur
    return out


def test_compare_runs_full_outer_join(variants):
    wh, traces = variants
    base, cand = per_kernel(traces["a_base"]), per_kernel(traces["b_cand"])
    want = {}
    for key in base.keys() | cand.keys():
        b, c = base.get(key), cand.get(key)
        status = "new" if b is None else "vanished" if c is None else "unchanged" if b == c else "changed"
        want[key] = (status, (c or [0])[0] - (b or [0])[0], (c or [0, 0])[1] - (b or [0, 0])[1])
    got = rows("compare_runs", wh, baseline="a_base", candidate="b_cand")
    assert {(r["kind"], r["name"]): (r["status"], r["delta_instances"], r["delta_ns"]) for r in got} == want
    statuses = defaultdict(int)
    for r in got:
        statuses[r["status"]] += 1
    # the fmha kernel and the renamed one vanish, the rename is new, the halved one changed
    assert dict(statuses) == {"vanished": 2, "new": 1, "changed": 1, "unchanged": len(want) - 4}
    changed = next(r for r in got if r["status"] == "changed")
    assert (changed["baseline_instances"], changed["candidate_instances"]) == (
        base[(changed["kind"], changed["name"])][0], cand[(changed["kind"], changed["name"])][0])
    assert changed["delta_pct"] == pytest.approx(100 * changed["delta_ns"] / changed["baseline_ns"], abs=0.005)
    assert [abs(r["delta_ns"]) for r in got] == sorted((abs(r["delta_ns"]) for r in got), reverse=True)
    assert sum(r["delta_ns"] for r in got) == sum(k.dur for k in traces["b_cand"].kernels) - sum(
        k.dur for k in traces["a_base"].kernels)


def test_compare_runs_same_run_is_all_unchanged(seed_warehouse):
    got = rows("compare_runs", seed_warehouse, baseline="tf_stepstats_gpu_streams", candidate="tf_stepstats_gpu_streams")
    assert {r["status"] for r in got} == {"unchanged"}
    assert sum(r["candidate_instances"] for r in got) == 755
    assert sum(r["delta_ns"] for r in got) == 0


def test_collectives_overlap(variants):
    wh, traces = variants
    kernels = [k for k in traces["c_nccl"].kernels if k.kind == "kernel"]
    coll = [k for k in kernels if k.name == NCCL]
    compute = rawtrace.union((k.start, k.end) for k in kernels if k.name != NCCL)
    overlapped = sum(rawtrace.intersect((k.start, k.end), compute) for k in coll)
    total = sum(k.dur for k in coll)
    [r] = rows("collectives", wh)
    assert (r["run_id"], r["name"], r["instances"], r["total_ns"]) == ("c_nccl", NCCL, len(coll), total)
    assert (r["overlapped_ns"], r["exposed_ns"]) == (overlapped, total - overlapped)
    assert 0 < overlapped < total
    assert r["kernel_time_pct"] == pytest.approx(100 * total / sum(k.dur for k in kernels), abs=0.005)
    assert r["overlap_pct"] == pytest.approx(100 * overlapped / total, abs=0.005)


def test_collectives_name_like_and_none_in_seed(variants, seed_warehouse):
    wh, traces = variants
    assert rows("collectives", seed_warehouse) == []  # no communication in the seed traces
    got = rows("collectives", wh, run_id="a_base", name_like="fmha%")
    fmha = defaultdict(lambda: [0, 0])
    for k in traces["a_base"].kernels:
        if k.kind == "kernel" and k.name.startswith("fmha"):
            fmha[k.name][0] += 1
            fmha[k.name][1] += k.dur
    assert {r["name"]: [r["instances"], r["total_ns"]] for r in got} == dict(fmha)
    assert len(fmha) == 2  # forward and backward attention
    assert {r["overlapped_ns"] for r in got} == {0}  # one stream: nothing runs beside them


def mean_step(trace):
    spans = defaultdict(list)
    for a in list(trace.nodes) + list(trace.kernels):
        if a.step is not None:
            spans[a.step].append((a.start, a.end))
    walls = [max(e for _, e in s) - min(b for b, _ in s) for s in spans.values()]
    return len(walls), sum(walls) / len(walls)


def mean_host_device_step(trace):
    """Host step: the step marker's span (ProfilerStep#N) where the trace has one, else the
    span of the step's host ops; device step: the step's first GPU activity to the next
    step's first one (the last step: to its own last end)."""
    host, gpu = defaultdict(list), defaultdict(list)
    for n in trace.nodes:
        if n.step is not None:
            host[n.step].append((n.start, n.end))
    for k in trace.kernels:
        if k.step is not None:
            gpu[k.step].append((k.start, k.end))
    marks = getattr(trace, "steps", {})  # Kineto traces: N -> (start, end) of ProfilerStep#N
    hosts = [marks[s][1] - marks[s][0] if s in marks else max(e for _, e in v) - min(b for b, _ in v)
             for s, v in host.items()]
    steps = sorted(gpu)
    firsts = [min(b for b, _ in gpu[s]) for s in steps]
    devs = [(firsts[i + 1] if i + 1 < len(steps) else max(e for _, e in gpu[s])) - firsts[i] for i, s in enumerate(steps)]
    return sum(hosts) / len(hosts), sum(devs) / len(devs)


def test_fleet_trend(variants):
    wh, traces = variants
    got = rows("fleet_trend", wh)
    assert [r["run_id"] for r in got] == ["b_cand", "c_nccl", "a_base", "d_tf"]  # started_at, then unlabelled
    prev = None
    for r in got:
        t = traces[r["run_id"]]
        gpu = sum(k.dur for k in t.kernels if k.kind == "kernel")
        steps, mean = mean_step(t)
        assert (r["kernels"], r["gpu_kernel_ns"], r["nodes"], r["steps"]) == (
            sum(k.kind == "kernel" for k in t.kernels), gpu, len(t.nodes), steps)
        assert r["mean_step_ns"] == pytest.approx(mean, abs=0.051)
        host, device = mean_host_device_step(t)
        assert r["mean_host_step_ns"] == pytest.approx(host, abs=0.051)
        assert r["mean_device_step_ns"] == pytest.approx(device, abs=0.051)
        if prev is None:
            assert r["gpu_kernel_change_pct"] is None
        else:
            assert r["gpu_kernel_change_pct"] == pytest.approx(100 * (gpu - prev) / prev, abs=0.005)
        prev = gpu
    assert got[2]["gpu_kernel_ns"] == 231_940_705 and got[3]["gpu_kernel_ns"] == 7_485_000
    assert [r["steps"] for r in got] == [3, 3, 3, 1]
    assert [r["run_id"] for r in rows("fleet_trend", wh, model="resnet")] == ["b_cand", "a_base"]
