"""Kernel and copy queries on the seed warehouse, checked against the raw trace files
(tests/rawtrace.py parses them without tracedb)."""

from __future__ import annotations

from collections import defaultdict

import pytest

import rawtrace
from rawtrace import KINETO, TF, rows


def raw_kernels(run):
    return rawtrace.tf().kernels if run == TF else rawtrace.kineto_seed().kernels


def test_kernel_summary_tf_known_numbers(seed_warehouse):
    got = rows("kernel_summary", seed_warehouse, run_id=TF, kind=None)
    assert sum(r["instances"] for r in got) == 755
    assert sum(r["total_ns"] for r in got) == 7_590_000
    top = got[0]
    assert (top["kind"], top["name"], top["instances"], top["total_ns"]) == ("kernel", "MatMul", 83, 3_071_000)
    assert sum(r["time_pct"] for r in got) == pytest.approx(100, abs=0.2)


@pytest.mark.parametrize("run", [TF, KINETO])
def test_kernel_summary_matches_raw(seed_warehouse, run):
    raw = defaultdict(list)
    for k in raw_kernels(run):
        if k.kind == "kernel":
            raw[(k.device, k.name)].append(k.dur)
    total = sum(sum(v) for v in raw.values())
    got = rows("kernel_summary", seed_warehouse, run_id=run)
    assert len(got) == len(raw)
    for r in got:
        durs = raw[(r["device"], r["name"])]
        assert (r["run_id"], r["kind"]) == (run, "kernel")
        assert (r["instances"], r["total_ns"], r["min_ns"], r["max_ns"]) == (len(durs), sum(durs), min(durs), max(durs))
        assert r["avg_ns"] == pytest.approx(sum(durs) / len(durs), abs=0.051)
        assert r["time_pct"] == pytest.approx(100 * sum(durs) / total, abs=0.005)
    assert [r["total_ns"] for r in got] == sorted((r["total_ns"] for r in got), reverse=True)
    if run == KINETO:
        assert (len(got), total) == (35, 231_940_705)


def test_kernel_summary_filters_and_limit(seed_warehouse):
    got = rows("kernel_summary", seed_warehouse, run_id=KINETO, kind="memset", device="GPU:0", limit=1)
    assert len(got) == 1 and got[0]["kind"] == "memset"
    assert got[0]["instances"] == 116
    assert rows("kernel_summary", seed_warehouse, device="GPU:7") == []


def log2_bucket(d):
    return 0 if d < 1 else 1 << (d.bit_length() - 1)


@pytest.mark.parametrize("run", [TF, KINETO])
def test_duration_histogram_log2(seed_warehouse, run):
    want = defaultdict(list)
    for k in raw_kernels(run):
        if k.kind == "kernel":
            want[log2_bucket(k.dur)].append(k.dur)
    got = rows("kernel_duration_histogram", seed_warehouse, run_id=run)
    assert [r["bucket_lo_ns"] for r in got] == sorted(want)
    for r in got:
        durs = want[r["bucket_lo_ns"]]
        assert r["bucket_hi_ns"] == max(1, 2 * r["bucket_lo_ns"])
        assert (r["instances"], r["total_ns"]) == (len(durs), sum(durs))
    assert sum(r["instances"] for r in got) == (729 if run == TF else 1038)
    assert sum(r["instances_pct"] for r in got) == pytest.approx(100, abs=0.1)


def test_duration_histogram_fixed_width(seed_warehouse):
    width = 50_000
    want = defaultdict(list)
    for k in raw_kernels(KINETO):
        if k.kind == "kernel":
            want[k.dur // width * width].append(k.dur)
    got = rows("kernel_duration_histogram", seed_warehouse, run_id=KINETO, bucket_ns=width)
    assert {r["bucket_lo_ns"]: (r["instances"], r["total_ns"]) for r in got} == {
        b: (len(v), sum(v)) for b, v in want.items()}
    assert all(r["bucket_hi_ns"] - r["bucket_lo_ns"] == width for r in got)


def test_duration_histogram_tf_durations_are_whole_microseconds(seed_warehouse):
    # TF StepStats times are µs: every copy lands in [512, 1024) ... [32768, 65536) ns buckets.
    got = rows("kernel_duration_histogram", seed_warehouse, run_id=TF, kind="memcpy")
    want = defaultdict(int)
    for k in rawtrace.tf().kernels:
        if k.kind == "memcpy":
            want[log2_bucket(k.dur)] += 1
    assert {r["bucket_lo_ns"]: r["instances"] for r in got} == dict(want)
    assert sum(want.values()) == 26


def test_launch_config_from_kineto_args(seed_warehouse):
    doc = rawtrace.load_kineto_json()
    want = defaultdict(lambda: [0, 0, []])
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            a = e["args"]
            key = (e["name"], tuple(a["grid"]), tuple(a["block"]), a["registers per thread"], a["shared memory"])
            w = want[key]
            w[0] += 1
            w[1] += rawtrace.us_ns(e["dur"])
            w[2].append(float(a["est. achieved occupancy %"]))
    got = rows("kernel_launch_config", seed_warehouse, run_id=KINETO)
    assert len(got) == len(want)
    for r in got:
        key = (r["name"], tuple(r["grid"]), tuple(r["block"]), r["registers_per_thread"], r["shared_memory_bytes"])
        n, total, occ = want[key]
        assert (r["instances"], r["total_ns"]) == (n, total)
        assert r["avg_occupancy_pct"] == pytest.approx(sum(occ) / n, abs=0.005)
    assert sum(r["instances"] for r in got) == 1038


def test_launch_config_unknown_is_null(seed_warehouse):
    got = rows("kernel_launch_config", seed_warehouse, run_id=TF)
    assert sum(r["instances"] for r in got) == 729
    assert all(r["grid"] is None and r["registers_per_thread"] is None and r["avg_occupancy_pct"] is None for r in got)


@pytest.mark.parametrize("run", [TF, KINETO])
def test_memcpy_summary_matches_raw(seed_warehouse, run):
    want = defaultdict(lambda: [0, 0, 0])
    for k in raw_kernels(run):
        if k.kind != "kernel":
            w = want[(k.kind, k.copy_kind)]
            w[0] += 1
            w[1] += k.bytes
            w[2] += k.dur
    got = rows("memcpy_summary", seed_warehouse, run_id=run)
    assert {(r["kind"], r["copy_kind"]): [r["operations"], r["total_bytes"], r["total_ns"]] for r in got} == dict(want)
    for r in got:
        assert r["gb_per_s"] == pytest.approx(r["total_bytes"] / r["total_ns"], abs=0.0005)
    if run == TF:
        assert {r["copy_kind"]: r["operations"] for r in got} == {"HtoD": 11, "DtoH": 8, "DtoD": 7}
    else:
        assert {r["kind"]: r["operations"] for r in got} == {"memcpy": 48, "memset": 116}
